"""Watch: a stream of thread events that resumes by itself.

A Watch stream breaks when the server restarts, shuts down (UNAVAILABLE),
ends it (RESOURCE_EXHAUSTED for a watcher that fell behind, or a plain end of
stream) or the connection drops. The stream objects here open it again with
the resume token of the last event seen, so no event is missed or repeated,
waiting between attempts with exponential backoff and jitter: a server that is
down costs a few attempts per second at first and one every ``maximum``
seconds after, never a busy loop. A token older than the server's retained
history is not skipped over: :class:`ResyncRequired` tells the caller to
re-read the threads with ``get`` and watch again from now.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import grpc
from windlass.memory.v1 import memory_pb2

from ._errors import MemoryServiceError, ResyncRequired

# Status codes after which the same Watch is opened again from the last token.
# RESOURCE_EXHAUSTED: the server ended a watcher that fell behind (or had too
# many open); the README says to resume from the last token.
_RESUMABLE = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.RESOURCE_EXHAUSTED})

EVENT_TYPES = (
    "messages_added",
    "summary_updated",
    "thread_cleared",
    "summary_failed",
    "thread_rewound",
    "thread_forked",
)
_EVENT_TYPE_TO_PB = {
    "messages_added": memory_pb2.EVENT_TYPE_MESSAGES_ADDED,
    "summary_updated": memory_pb2.EVENT_TYPE_SUMMARY_UPDATED,
    "thread_cleared": memory_pb2.EVENT_TYPE_THREAD_CLEARED,
    "summary_failed": memory_pb2.EVENT_TYPE_SUMMARY_FAILED,
    "thread_rewound": memory_pb2.EVENT_TYPE_THREAD_REWOUND,
    "thread_forked": memory_pb2.EVENT_TYPE_THREAD_FORKED,
}


@dataclass(frozen=True)
class Backoff:
    """How long a Watch waits before opening its stream again.

    The n-th consecutive failed attempt (from 0) waits a random time between
    half and all of ``min(maximum, initial * multiplier**n)`` seconds ("equal
    jitter": never less than half, so a server that is down is not hammered,
    and watchers that lost one server together do not return in step). An
    event received resets the count. ``give_up_after``: seconds of consecutive
    failures after which the last error is raised; ``None`` retries for as
    long as the stream is open.
    """

    initial: float = 0.1
    maximum: float = 5.0
    multiplier: float = 2.0
    give_up_after: float | None = None

    def __post_init__(self) -> None:
        if not 0 < self.initial <= self.maximum:
            raise ValueError("Backoff: need 0 < initial <= maximum")
        if self.multiplier < 1:
            raise ValueError("Backoff: multiplier must be at least 1")
        if self.give_up_after is not None and self.give_up_after < 0:
            raise ValueError("Backoff: give_up_after must not be negative")

    def delay(self, failures: int, rand: Callable[[], float] = random.random) -> float:
        """Seconds to wait after ``failures`` consecutive failed attempts (from 0)."""
        # The exponent is capped so the float never overflows on a long outage.
        ceiling = min(self.maximum, self.initial * self.multiplier ** min(failures, 64))
        return ceiling / 2 + rand() * ceiling / 2


@dataclass(frozen=True)
class WatchEvent:
    """One event of a watched thread.

    ``type`` is ``"messages_added"`` (``first_seq``..``last_seq``),
    ``"summary_updated"`` (``summary``, ``summarized_through_seq``,
    ``folded_count``), ``"thread_cleared"``, ``"summary_failed"``
    (``reason``, ``attempt``), ``"thread_rewound"`` (``to_seq``,
    ``removed_count``, ``summary_dropped``), ``"thread_forked"``
    (``parent_thread_id``, ``at_seq``, ``shared_count``, ``summary_inherited``;
    on the new thread, before its first ``messages_added``) or, only with ``include_progress=True``,
    ``"progress"``. ``resume_token`` continues right after this event;
    ``raw`` is the generated ``WatchResponse``.
    """

    type: str
    thread_id: str
    resume_token: str
    time: datetime | None
    raw: memory_pb2.WatchResponse
    summary: str = ""
    summarized_through_seq: int = 0
    folded_count: int = 0
    first_seq: int = 0
    last_seq: int = 0
    reason: str = ""
    attempt: int = 0
    to_seq: int = 0
    removed_count: int = 0
    summary_dropped: bool = False
    parent_thread_id: str = ""
    at_seq: int = 0
    shared_count: int = 0
    summary_inherited: bool = False

    @classmethod
    def from_pb(cls, event: memory_pb2.WatchResponse) -> WatchEvent:
        kind = event.WhichOneof("event") or "unknown"
        when = event.time.ToDatetime(tzinfo=timezone.utc) if event.HasField("time") else None
        base: dict[str, Any] = {
            "type": kind,
            "thread_id": event.thread_id,
            "resume_token": event.resume_token,
            "time": when,
            "raw": event,
        }
        if kind == "summary_updated":
            s = event.summary_updated
            base.update(
                summary=s.summary,
                summarized_through_seq=s.summarized_through_seq,
                folded_count=s.folded_count,
            )
        elif kind == "messages_added":
            base.update(
                first_seq=event.messages_added.first_seq, last_seq=event.messages_added.last_seq
            )
        elif kind == "summary_failed":
            base.update(reason=event.summary_failed.reason, attempt=event.summary_failed.attempt)
        elif kind == "thread_rewound":
            r = event.thread_rewound
            base.update(
                to_seq=r.to_seq, removed_count=r.removed_count, summary_dropped=r.summary_dropped
            )
        elif kind == "thread_forked":
            f = event.thread_forked
            base.update(
                parent_thread_id=f.parent_thread_id,
                at_seq=f.at_seq,
                shared_count=f.shared_count,
                summary_inherited=f.summary_inherited,
            )
        return cls(**base)


def watch_request(
    thread_ids: Any, event_types: Any, resume_token: str, send_initial_state: bool
) -> memory_pb2.WatchRequest:
    """Checks the arguments of ``watch`` and builds the first request."""
    if thread_ids is None:
        ids: list[str] = []
    elif isinstance(thread_ids, str):
        ids = [thread_ids]
    else:
        try:
            ids = list(thread_ids)
        except TypeError:
            raise TypeError(
                "thread_ids: expected a thread id (str), a list of them or None, "
                f"not {type(thread_ids).__name__}"
            ) from None
        for i, item in enumerate(ids):
            if not isinstance(item, str):
                raise TypeError(f"thread_ids[{i}]: expected str, not {type(item).__name__}")
    types: list[memory_pb2.EventType] = []
    for i, name in enumerate(event_types or ()):
        if name not in _EVENT_TYPE_TO_PB:
            raise ValueError(f"event_types[{i}]: {name!r} is not one of {', '.join(EVENT_TYPES)}")
        types.append(_EVENT_TYPE_TO_PB[name])
    if not isinstance(resume_token, str):
        raise TypeError(f"resume_token: expected str, not {type(resume_token).__name__}")
    return memory_pb2.WatchRequest(
        thread_ids=ids,
        event_types=types,
        resume_token=resume_token,
        send_initial_state=bool(send_initial_state),
    )


# Opens one Watch call for a request; returns grpc's response iterator, which
# is also the call (cancel()).
OpenWatch = Callable[[memory_pb2.WatchRequest], Any]


class WatchStream(Iterator[WatchEvent]):
    """The events of a Watch, as a blocking iterator that resumes by itself.

    Made by :meth:`BufferMemory.watch`. Iterating blocks until the next event.
    :meth:`close` (from any thread) ends the iteration; so does leaving a
    ``with`` block. ``resume_token`` is the token of the last event received
    (Progress events included): pass it to a later ``watch()`` to continue.

    Raises :class:`ResyncRequired` when the server no longer has the events
    after the token, and :class:`MemoryServiceError` for errors a retry cannot
    fix (INVALID_ARGUMENT, UNAUTHENTICATED …), or the last UNAVAILABLE once
    ``Backoff.give_up_after`` has passed.
    """

    def __init__(
        self,
        open_watch: OpenWatch,
        request: memory_pb2.WatchRequest,
        backoff: Backoff,
        include_progress: bool,
    ) -> None:
        self.resume_token: str = request.resume_token
        self.attempts = 0  # Watch calls opened so far, for the curious and for tests
        self._open_watch = open_watch
        self._request = request
        self._backoff = backoff
        self._include_progress = include_progress
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._call: Any = None
        self._events = self._run()

    def __iter__(self) -> WatchStream:
        return self

    def __next__(self) -> WatchEvent:
        return next(self._events)

    def __enter__(self) -> WatchStream:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    def close(self) -> None:
        """Ends the stream: cancels the open call and any wait; safe from any thread."""
        self._closed.set()
        with self._lock:
            call = self._call
        if call is not None:
            call.cancel()

    def _open(self) -> Any:
        request = memory_pb2.WatchRequest()
        request.CopyFrom(self._request)
        request.resume_token = self.resume_token
        # The initial state is what a watcher starting from nothing needs;
        # one resuming from a token has seen it already.
        request.send_initial_state = self._request.send_initial_state and not self.resume_token
        with self._lock:
            if self._closed.is_set():
                return None
            self._call = self._open_watch(request)
            self.attempts += 1
            return self._call

    def _run(self) -> Iterator[WatchEvent]:
        failures = 0
        failing_since: float | None = None
        while True:
            call = self._open()
            if call is None:
                return
            error: grpc.RpcError | None = None
            try:
                for response in call:
                    failures, failing_since = 0, None
                    self.resume_token = response.resume_token
                    if response.WhichOneof("event") == "progress" and not self._include_progress:
                        continue
                    yield WatchEvent.from_pb(response)
            except grpc.RpcError as rpc_error:
                if self._closed.is_set():
                    return
                code = getattr(rpc_error, "code", lambda: grpc.StatusCode.UNKNOWN)()
                if code == grpc.StatusCode.OUT_OF_RANGE:
                    details = getattr(rpc_error, "details", lambda: "")() or ""
                    raise ResyncRequired(details, self.resume_token) from rpc_error
                if code not in _RESUMABLE:
                    raise MemoryServiceError.from_rpc_error(rpc_error) from rpc_error
                error = rpc_error
            finally:
                with self._lock:
                    self._call = None
                if self._closed.is_set():
                    call.cancel()
            if self._closed.is_set():
                return
            # Broken (error) or ended by the server (error is None): resume
            # after a pause, counted from the first failure in a row.
            now = time.monotonic()
            if failing_since is None:
                failing_since = now
            give_up = self._backoff.give_up_after
            if give_up is not None and now - failing_since >= give_up:
                if error is not None:
                    raise MemoryServiceError.from_rpc_error(error) from error
                raise MemoryServiceError(
                    grpc.StatusCode.UNAVAILABLE, "the Watch stream kept ending; gave up"
                )
            delay = self._backoff.delay(failures)
            failures += 1
            if self._closed.wait(delay):
                return


class AsyncWatchStream:
    """The events of a Watch, for ``async for``; see :class:`WatchStream`.

    Made by :meth:`BufferMemory.awatch`. The blocking stream runs on a thread
    of its own, so waiting for an event never holds the event loop or a
    thread of its default executor. Cancelling the task that awaits an event
    closes the stream, as do :meth:`aclose` and ``async with``.
    """

    def __init__(self, stream: WatchStream) -> None:
        self._stream = stream
        self._executor: ThreadPoolExecutor | None = None

    @property
    def resume_token(self) -> str:
        return self._stream.resume_token

    @property
    def attempts(self) -> int:
        return self._stream.attempts

    def __aiter__(self) -> AsyncWatchStream:
        return self

    async def __anext__(self) -> WatchEvent:
        if self._stream.closed:
            raise StopAsyncIteration
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="windlass-watch")
        loop = asyncio.get_running_loop()
        pending = loop.run_in_executor(self._executor, _next_or_none, self._stream)
        try:
            event = await asyncio.shield(pending)
        except BaseException:
            # Cancelled, or the stream failed (ResyncRequired …): either way it is over.
            self._close()
            raise
        if event is None:
            self._close()
            raise StopAsyncIteration
        return event

    async def aclose(self) -> None:
        """Ends the stream (cancels the open call and any wait)."""
        self._close()

    def _close(self) -> None:
        self._stream.close()
        if self._executor is not None:
            # The worker returns at once: its call was cancelled.
            self._executor.shutdown(wait=False)

    async def __aenter__(self) -> AsyncWatchStream:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self._close()


def _next_or_none(stream: WatchStream) -> WatchEvent | None:
    # StopIteration cannot cross a Future: it is turned into None here.
    return next(stream, None)
