"""Fork: a new thread holding another's messages up to a seq (MemoryService.Fork),
and the listing of threads with their fork origins (ListThreads forks_of)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

from google.protobuf import duration_pb2, timestamp_pb2
from windlass.memory.v1 import memory_pb2

LIST_PAGE_SIZE = 1000


@dataclass(frozen=True)
class ForkOrigin:
    """Where a fork came from: its direct parent, the fork point, when, and the
    parent's create_time then (a parent whose create_time differs now has
    been cleared, perhaps created again, since)."""

    thread_id: str
    at_seq: int
    fork_time: datetime | None
    parent_create_time: datetime | None


@dataclass(frozen=True)
class Thread:
    """A thread as the service describes it (``raw`` is the generated ``Thread``);
    ``parent`` is None unless the thread was created by Fork."""

    thread_id: str
    last_seq: int
    summarized_through_seq: int
    labels: dict[str, str]
    parent: ForkOrigin | None
    raw: memory_pb2.Thread = field(repr=False, compare=False)

    @classmethod
    def from_pb(cls, thread: memory_pb2.Thread) -> Thread:
        parent = None
        if thread.HasField("parent"):
            p = thread.parent
            parent = ForkOrigin(
                thread_id=p.thread_id,
                at_seq=p.at_seq,
                fork_time=_time(p, "fork_time"),
                parent_create_time=_time(p, "parent_create_time"),
            )
        return cls(
            thread_id=thread.thread_id,
            last_seq=thread.last_seq,
            summarized_through_seq=thread.summarized_through_seq,
            labels=dict(thread.labels),
            parent=parent,
            raw=thread,
        )


@dataclass(frozen=True)
class ForkResult:
    """What a Fork made: the new thread, how many stored messages it holds from
    its parent (shared, not copied), and whether it took the parent's summary."""

    thread: Thread
    shared_count: int
    summary_inherited: bool


def fork_request(
    thread_id: Any,
    new_thread_id: Any,
    at_seq: Any,
    expected_last_seq: Any,
    strategy: Any,
    labels: Any,
    ttl: Any,
    request_id: Any,
) -> memory_pb2.ForkRequest:
    _check_str("thread_id", thread_id)
    _check_str("new_thread_id", new_thread_id)
    if request_id is not None:
        _check_str("request_id", request_id)
    request = memory_pb2.ForkRequest(
        thread_id=thread_id,
        new_thread_id=new_thread_id,
        # Always an id: gRPC retries a Fork on UNAVAILABLE, and the server
        # answers a repeated id with the first fork, not ALREADY_EXISTS.
        request_id=request_id or uuid.uuid4().hex,
        labels=_labels(labels),
    )
    if at_seq is not None:
        _check_seq("at_seq", at_seq)
        request.at_seq = at_seq
    if expected_last_seq is not None:
        _check_seq("expected_last_seq", expected_last_seq)
        request.expected_last_seq = expected_last_seq
    if strategy is not None:
        request.strategy.CopyFrom(_strategy(strategy))
    if ttl is not None:
        request.ttl.CopyFrom(_duration(ttl))
    return request


def fork_result(response: memory_pb2.ForkResponse) -> ForkResult:
    return ForkResult(
        thread=Thread.from_pb(response.thread),
        shared_count=response.shared_count,
        summary_inherited=response.summary_inherited,
    )


def list_request(
    page_token: str, forks_of: Any, labels: Any, include_threads: Any
) -> memory_pb2.ListThreadsRequest:
    if forks_of is not None:
        _check_str("forks_of", forks_of)
    return memory_pb2.ListThreadsRequest(
        page_size=LIST_PAGE_SIZE,
        page_token=page_token,
        forks_of=forks_of or "",
        labels=_labels(labels),
        include_threads=bool(include_threads),
    )


def listed(page: memory_pb2.ListThreadsResponse, include_threads: bool) -> list[Any]:
    if include_threads:
        return [Thread.from_pb(t) for t in page.threads]
    return list(page.thread_ids)


class ForkMethods:
    """BufferMemory's fork and list_threads (sync and async), over its calls."""

    if TYPE_CHECKING:  # BufferMemory's
        _stub: Any
        _call: Callable[[Any, Any], Any]

        async def _acall(self, method: Any, request: Any) -> Any: ...

    def fork(
        self,
        thread_id: str,
        new_thread_id: str,
        *,
        at_seq: int | None = None,
        expected_last_seq: int | None = None,
        strategy: Any = None,
        labels: Mapping[str, str] | None = None,
        ttl: float | timedelta | None = None,
        request_id: str | None = None,
    ) -> ForkResult:
        """Create ``new_thread_id`` holding ``thread_id``'s messages up to ``at_seq``
        (default: all), shared with the parent, not copied; then both change
        independently.

        ``strategy`` (a memory object, whose strategy the fork takes, or a
        ``memory_pb2.Strategy``), ``labels`` and ``ttl`` (seconds or a
        ``timedelta``; 0: none) default to the parent's. ``expected_last_seq``:
        fork only if the parent's last_seq is still that (ABORTED otherwise).
        ``request_id``: a retry with the same id returns the first fork.
        Raises :class:`MemoryServiceError` with NOT_FOUND (no parent),
        ALREADY_EXISTS (new_thread_id is taken), ABORTED, OUT_OF_RANGE (at_seq
        past last_seq), FAILED_PRECONDITION (messages up to at_seq trimmed)
        or RESOURCE_EXHAUSTED.
        """
        request = fork_request(
            thread_id, new_thread_id, at_seq, expected_last_seq, strategy, labels, ttl, request_id
        )
        return fork_result(self._call(self._stub.Fork, request))

    async def afork(
        self,
        thread_id: str,
        new_thread_id: str,
        *,
        at_seq: int | None = None,
        expected_last_seq: int | None = None,
        strategy: Any = None,
        labels: Mapping[str, str] | None = None,
        ttl: float | timedelta | None = None,
        request_id: str | None = None,
    ) -> ForkResult:
        """Fork ``thread_id`` into ``new_thread_id``; see :meth:`fork`."""
        request = fork_request(
            thread_id, new_thread_id, at_seq, expected_last_seq, strategy, labels, ttl, request_id
        )
        return fork_result(await self._acall(self._stub.Fork, request))

    def list_threads(
        self,
        *,
        forks_of: str | None = None,
        labels: Mapping[str, str] | None = None,
        include_threads: bool = False,
    ) -> list[Any]:
        """The namespace's thread ids, sorted; with ``forks_of`` only the direct
        forks of that thread, with ``labels`` only threads carrying all of
        them. ``include_threads=True``: :class:`Thread` objects instead of
        ids (``parent`` shows each fork's origin)."""
        items: list[Any] = []
        token = ""
        while True:
            request = list_request(token, forks_of, labels, include_threads)
            page = self._call(self._stub.ListThreads, request)
            items.extend(listed(page, include_threads))
            token = page.next_page_token
            if not token:
                return items

    async def alist_threads(
        self,
        *,
        forks_of: str | None = None,
        labels: Mapping[str, str] | None = None,
        include_threads: bool = False,
    ) -> list[Any]:
        """The namespace's threads; see :meth:`list_threads`."""
        items: list[Any] = []
        token = ""
        while True:
            request = list_request(token, forks_of, labels, include_threads)
            page = await self._acall(self._stub.ListThreads, request)
            items.extend(listed(page, include_threads))
            token = page.next_page_token
            if not token:
                return items


def _time(message: Any, name: str) -> datetime | None:
    if not message.HasField(name):
        return None
    stamp: timestamp_pb2.Timestamp = getattr(message, name)
    return stamp.ToDatetime(tzinfo=timezone.utc)


def _strategy(strategy: Any) -> memory_pb2.Strategy:
    if isinstance(strategy, memory_pb2.Strategy):
        return strategy
    own = getattr(strategy, "_strategy", None)
    if callable(own):
        return own()
    raise TypeError(
        "strategy: expected a memory object, a memory_pb2.Strategy or None, "
        f"not {type(strategy).__name__}"
    )


def _labels(labels: Any) -> dict[str, str]:
    if labels is None:
        return {}
    if not isinstance(labels, Mapping):
        raise TypeError(f"labels: expected a mapping or None, not {type(labels).__name__}")
    for key, value in labels.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise TypeError(f"labels: keys and values must be str, not {key!r}: {value!r}")
    return dict(labels)


def _duration(ttl: Any) -> duration_pb2.Duration:
    if isinstance(ttl, timedelta):
        seconds = ttl.total_seconds()
    elif isinstance(ttl, (int, float)) and not isinstance(ttl, bool):
        seconds = float(ttl)
    else:
        raise TypeError(f"ttl: expected seconds or a timedelta, not {type(ttl).__name__}")
    if seconds < 0:
        raise ValueError(f"ttl: must not be negative, not {seconds}")
    duration = duration_pb2.Duration()
    duration.FromTimedelta(timedelta(seconds=seconds))
    return duration


def _check_str(name: str, value: Any) -> None:
    if not isinstance(value, str):
        raise TypeError(f"{name}: expected str, not {type(value).__name__}")


def _check_seq(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name}: expected int, not {type(value).__name__}")
    if value < 0:
        raise ValueError(f"{name}: must not be negative, not {value}")
