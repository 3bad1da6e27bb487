"""The gRPC channel a memory object opens, and calls awaited from asyncio.

What makes calls survive a server restart lives here: gRPC's own retries of
the unary calls and a capped reconnect backoff.
"""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any

import grpc

from ._errors import MemoryServiceError

DEFAULT_TARGET = "127.0.0.1:50051"
TARGET_ENV = "WINDLASS_MEMORY_TARGET"

# gRPC retries these calls itself when they fail with UNAVAILABLE (a server
# restarting or shutting down, a connection lost). That is safe for Add only
# because every Add, Rewind and Fork carries a request_id: the server answers a repeated one
# with the first call's response and appends nothing.
_SERVICE_CONFIG = json.dumps(
    {
        "methodConfig": [
            {
                "name": [
                    {"service": "windlass.memory.v1.MemoryService", "method": method}
                    for method in ("Add", "Get", "Clear", "ListThreads", "Rewind", "Fork")
                ],
                "retryPolicy": {
                    "maxAttempts": 4,
                    "initialBackoff": "0.2s",
                    "maxBackoff": "2s",
                    "backoffMultiplier": 2,
                    "retryableStatusCodes": ["UNAVAILABLE"],
                },
            }
        ]
    }
)
# After an outage gRPC waits ever longer between connection attempts (up to
# 120 s by default), failing every call meanwhile: a server back after a
# restart would stay unreachable for minutes. Capped here at the Watch's own
# longest backoff, so calls and Watch come back within seconds.
_RECONNECT_OPTIONS = (
    ("grpc.initial_reconnect_backoff_ms", 200),
    ("grpc.min_reconnect_backoff_ms", 200),
    ("grpc.max_reconnect_backoff_ms", 5000),
)


def resolve_target(target: str | None) -> str:
    """``target``, else the ``WINDLASS_MEMORY_TARGET`` environment variable, else the default."""
    return target or os.environ.get(TARGET_ENV) or DEFAULT_TARGET


def open_channel(target: str, credentials: grpc.ChannelCredentials | None) -> grpc.Channel:
    """A channel to ``target`` with the retry policy and reconnect cap above."""
    options = [("grpc.service_config", _SERVICE_CONFIG), *_RECONNECT_OPTIONS]
    if credentials is not None:
        return grpc.secure_channel(target, credentials, options=options)
    return grpc.insecure_channel(target, options=options)


def bearer_metadata(token: str | None) -> tuple[tuple[str, str], ...]:
    """The metadata every call sends: the bearer token, when there is one."""
    return (("authorization", f"Bearer {token}"),) if token else ()


async def await_call(call: Any) -> Any:
    """Awaits a gRPC future on the running event loop; cancelling cancels the RPC."""
    loop = asyncio.get_running_loop()
    finished: asyncio.Future[None] = loop.create_future()

    def wake(_: Any) -> None:
        if not finished.done():
            finished.set_result(None)

    def on_done(_: Any) -> None:
        # Runs on a gRPC thread (or at once, if the call already ended): hand
        # the wake-up to the loop's own thread.
        try:
            loop.call_soon_threadsafe(wake, None)
        except RuntimeError:
            pass  # the loop closed while the call ran: nobody is waiting

    call.add_done_callback(on_done)
    try:
        await finished
    except asyncio.CancelledError:
        call.cancel()
        raise
    try:
        return call.result()
    except grpc.RpcError as error:
        raise MemoryServiceError.from_rpc_error(error) from error
