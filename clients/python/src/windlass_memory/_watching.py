"""BufferMemory's watch and awatch: opening resumable Watch streams over its stub."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from windlass.memory.v1 import memory_pb2

from ._watch import AsyncWatchStream, Backoff, WatchStream, watch_request


class WatchMethods:
    """BufferMemory's watch (sync) and awatch (async), over its stub and metadata."""

    if TYPE_CHECKING:  # BufferMemory's
        _stub: Any
        _metadata: tuple[tuple[str, str], ...]

    def watch(
        self,
        thread_ids: str | Sequence[str] | None = None,
        *,
        event_types: Sequence[str] | None = None,
        resume_token: str = "",
        send_initial_state: bool = False,
        include_progress: bool = False,
        backoff: Backoff | None = None,
    ) -> WatchStream:
        """Stream events of threads (all of the namespace's with ``None``), resuming by itself.

        Iterate the result (a :class:`WatchStream`, also a context manager)::

            with memory.watch("t1", event_types=["summary_updated"]) as events:
                for event in events:
                    print(event.summary)

        After UNAVAILABLE, RESOURCE_EXHAUSTED or an end of stream the Watch is
        opened again with the last event's resume token, after a pause that
        grows exponentially (``backoff``, default :class:`Backoff`). An empty
        ``resume_token`` watches from now; ``send_initial_state`` first sends
        the current summary of each watched thread that has one.

        Raises:
            ResyncRequired: the server no longer has the events after the
                token (OUT_OF_RANGE): re-read with ``get``, watch again from now.
            MemoryServiceError: an error a retry cannot fix.
        """
        request = watch_request(thread_ids, event_types, resume_token, send_initial_state)

        def open_watch(req: memory_pb2.WatchRequest) -> Any:
            # No deadline: a Watch lasts until it is closed.
            return self._stub.Watch(req, metadata=self._metadata)

        return WatchStream(open_watch, request, backoff or Backoff(), include_progress)

    def awatch(
        self,
        thread_ids: str | Sequence[str] | None = None,
        *,
        event_types: Sequence[str] | None = None,
        resume_token: str = "",
        send_initial_state: bool = False,
        include_progress: bool = False,
        backoff: Backoff | None = None,
    ) -> AsyncWatchStream:
        """:meth:`watch` for ``async for``; cancelling the awaiting task closes the stream."""
        return AsyncWatchStream(
            self.watch(
                thread_ids,
                event_types=event_types,
                resume_token=resume_token,
                send_initial_state=send_initial_state,
                include_progress=include_progress,
                backoff=backoff,
            )
        )
