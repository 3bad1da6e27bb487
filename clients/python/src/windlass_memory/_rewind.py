"""Rewind and pop: dropping a thread's newest messages (MemoryService.Rewind)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import grpc
from windlass.memory.v1 import memory_pb2

from ._convert import from_chat_message
from ._errors import MemoryServiceError
from ._types import Message

# How often pop() reads the newest message again when an Add lands between
# its read and its Rewind (ABORTED): each try pops what is newest then, and a
# thread busier than this raises the ABORTED error rather than spin.
POP_ATTEMPTS = 3


@dataclass(frozen=True)
class RewindResult:
    """What a Rewind did: the thread's ``last_seq`` after it, how many
    messages it dropped, and whether the summary went with them."""

    thread_id: str
    last_seq: int
    removed_count: int
    summary_dropped: bool


def rewind_request(
    thread_id: Any, to_seq: Any, expected_last_seq: Any, request_id: Any
) -> memory_pb2.RewindRequest:
    if not isinstance(thread_id, str):
        raise TypeError(f"thread_id: expected str, not {type(thread_id).__name__}")
    _check_seq("to_seq", to_seq)
    if expected_last_seq is not None:
        _check_seq("expected_last_seq", expected_last_seq)
    if request_id is not None and not isinstance(request_id, str):
        raise TypeError(f"request_id: expected str or None, not {type(request_id).__name__}")
    request = memory_pb2.RewindRequest(
        thread_id=thread_id,
        to_seq=to_seq,
        # Always an id: gRPC retries a Rewind on UNAVAILABLE, and the server
        # answers a repeated id with the first response, dropping nothing more.
        request_id=request_id or uuid.uuid4().hex,
    )
    if expected_last_seq is not None:
        request.expected_last_seq = expected_last_seq
    return request


def rewind_result(response: memory_pb2.RewindResponse) -> RewindResult:
    return RewindResult(
        thread_id=response.thread.thread_id,
        last_seq=response.thread.last_seq,
        removed_count=response.removed_count,
        summary_dropped=response.summary_dropped,
    )


def newest_request(thread_id: Any, count: Any = 1) -> memory_pb2.GetRequest:
    """The Get of a thread's newest ``count`` stored messages, whatever its strategy."""
    if not isinstance(thread_id, str):
        raise TypeError(f"thread_id: expected str, not {type(thread_id).__name__}")
    _check_seq("count", count)
    return memory_pb2.GetRequest(
        thread_id=thread_id,
        limit=count,
        recall=memory_pb2.Strategy(buffer=memory_pb2.BufferStrategy()),
    )


def pop_rewind(response: memory_pb2.GetResponse) -> memory_pb2.RewindRequest | None:
    """The Rewind that drops the newest message of ``response`` only if it is
    still the newest (expected_last_seq); None when the thread has none."""
    stored = [m for m in response.messages if m.seq > 0]
    if not stored:
        return None
    newest = stored[-1]
    return rewind_request(
        response.thread.thread_id, newest.seq - 1, response.thread.last_seq, None
    )


def is_lost_race(error: MemoryServiceError) -> bool:
    return error.code is grpc.StatusCode.ABORTED


class RewindMethods:
    """BufferMemory's rewind and pop (sync and async), over its calls."""

    if TYPE_CHECKING:  # BufferMemory's
        _stub: Any
        _call: Callable[[Any, Any], Any]

        async def _acall(self, method: Any, request: Any) -> Any: ...

    def rewind(
        self,
        thread_id: str,
        to_seq: int,
        *,
        expected_last_seq: int | None = None,
        request_id: str | None = None,
    ) -> RewindResult:
        """Drop the thread's messages after ``to_seq`` (``last_seq - 1``: the newest).

        ``expected_last_seq``: rewind only if no message was added since the
        thread's last_seq was that (ABORTED otherwise). ``request_id``: a
        retry with the same id drops nothing more. Raises
        :class:`MemoryServiceError` with NOT_FOUND, ABORTED, OUT_OF_RANGE
        (to_seq past last_seq) or FAILED_PRECONDITION (the messages after
        to_seq are no longer all stored).
        """
        request = rewind_request(thread_id, to_seq, expected_last_seq, request_id)
        return rewind_result(self._call(self._stub.Rewind, request))

    async def arewind(
        self,
        thread_id: str,
        to_seq: int,
        *,
        expected_last_seq: int | None = None,
        request_id: str | None = None,
    ) -> RewindResult:
        """Drop the thread's messages after ``to_seq``; see :meth:`rewind`."""
        request = rewind_request(thread_id, to_seq, expected_last_seq, request_id)
        return rewind_result(await self._acall(self._stub.Rewind, request))

    def newest(self, count: int, *, thread_id: str = "default") -> list[Message]:
        """The thread's newest ``count`` stored messages, oldest first.

        Whatever this object's or the thread's strategy: no window, summary
        or token budget applies (a summary thread's folded messages too,
        while stored). ``count`` 0: none.
        """
        if count == 0:
            return []
        response = self._call(self._stub.Get, newest_request(thread_id, count))
        return [from_chat_message(m) for m in response.messages]

    async def anewest(self, count: int, *, thread_id: str = "default") -> list[Message]:
        """The thread's newest ``count`` stored messages; see :meth:`newest`."""
        if count == 0:
            return []
        response = await self._acall(self._stub.Get, newest_request(thread_id, count))
        return [from_chat_message(m) for m in response.messages]

    def pop(self, *, thread_id: str = "default") -> Message | None:
        """Remove and return the thread's newest message; None if it has none.

        A message added by someone else between the read and the Rewind is
        never dropped unseen: the Rewind carries expected_last_seq, and on
        ABORTED pop reads the newest message again (up to 3 tries, then the
        ABORTED error is raised).
        """
        for attempt in range(POP_ATTEMPTS):
            response = self._call(self._stub.Get, newest_request(thread_id))
            request = pop_rewind(response)
            if request is None:
                return None
            try:
                self._call(self._stub.Rewind, request)
            except MemoryServiceError as error:
                if not is_lost_race(error) or attempt == POP_ATTEMPTS - 1:
                    raise
                continue
            return from_chat_message(response.messages[-1])
        raise AssertionError("unreachable")

    async def apop(self, *, thread_id: str = "default") -> Message | None:
        """Remove and return the thread's newest message; see :meth:`pop`."""
        for attempt in range(POP_ATTEMPTS):
            response = await self._acall(self._stub.Get, newest_request(thread_id))
            request = pop_rewind(response)
            if request is None:
                return None
            try:
                await self._acall(self._stub.Rewind, request)
            except MemoryServiceError as error:
                if not is_lost_race(error) or attempt == POP_ATTEMPTS - 1:
                    raise
                continue
            return from_chat_message(response.messages[-1])
        raise AssertionError("unreachable")


def _check_seq(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name}: expected int, not {type(value).__name__}")
    if value < 0:
        raise ValueError(f"{name}: must not be negative, not {value}")
