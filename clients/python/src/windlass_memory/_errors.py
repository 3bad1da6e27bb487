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
