"""The one exception type of the client."""

from __future__ import annotations

import grpc


class MemoryServiceError(Exception):
    """A call to the memory service failed.

    ``code`` is the gRPC status code (``grpc.StatusCode.INVALID_ARGUMENT``,
    ``FAILED_PRECONDITION``, ``UNAVAILABLE`` …; the README's error table says
    when each occurs) and ``details`` the server's message, which names the
    field at fault for INVALID_ARGUMENT. The ``grpc.RpcError`` is the cause.
    """

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(f"{code.name}: {details}")
        self.code = code
        self.details = details

    @classmethod
    def from_rpc_error(cls, error: grpc.RpcError) -> MemoryServiceError:
        # Every RpcError raised by a call is also a grpc.Call with code() and
        # details(); the base class does not say so, hence getattr.
        code = getattr(error, "code", lambda: grpc.StatusCode.UNKNOWN)()
        details = getattr(error, "details", lambda: str(error))() or ""
        return cls(code, details)


class ResyncRequired(MemoryServiceError):
    """A Watch cannot resume: the server no longer has the events after its token.

    Raised by the Watch iterators on OUT_OF_RANGE (the token is older than the
    server's retained history, or from another database: a restarted memory
    store, another SQLite file). Events may have been missed, so nothing is
    skipped silently: re-read the threads you follow with ``get`` and call
    ``watch()`` again without a token. ``resume_token`` is the token refused.
    """

    def __init__(self, details: str, resume_token: str) -> None:
        super().__init__(grpc.StatusCode.OUT_OF_RANGE, details)
        self.resume_token = resume_token
