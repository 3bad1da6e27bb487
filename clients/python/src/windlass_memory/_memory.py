"""BufferMemory, WindowMemory and SummaryMemory, backed by the memory service.

Each class keeps the constructor parameters and methods of the original
in-process module and sends them to the service: the parameters become a
``Strategy``, the methods become RPCs. Threads live in the service, so every
memory object, process and replica that names a thread sees the same
messages. As the original's objects each applied their own window, each
object here reads with its own strategy (``GetRequest.recall``), and its
Adds create a thread with it but never impose it on an existing thread
(``keep_strategy``), except that a SummaryMemory makes a buffer or window
thread a summary thread: only a summary thread has a summary to give it.

BufferMemory, the base with the calls, is in ``_buffer``; this module adds
the window and summary kinds, which differ in their strategy.
"""

from __future__ import annotations

import uuid
from typing import Any

from windlass.memory.v1 import memory_pb2

from ._buffer import DEFAULT_THREAD, BufferMemory
from ._requests import check_int
from ._transport import DEFAULT_TARGET, TARGET_ENV

# BufferMemory and the defaults live in _buffer and _transport; named here too,
# where they were before the split.
__all__ = [
    "DEFAULT_TARGET",
    "DEFAULT_THREAD",
    "TARGET_ENV",
    "BufferMemory",
    "SummaryMemory",
    "WindowMemory",
]


class WindowMemory(BufferMemory):
    """Keeps a sliding window of recent messages.

    Args:
        window: How many messages :meth:`get` returns, counted in messages,
            not turns. A window that would start on a tool result widens
            backwards to the assistant message that made the call.
        **config: Forwarded to :class:`BufferMemory` (``max_messages`` is
            ignored, as in the original).

    Raises:
        ValueError: If ``window`` is not positive.
    """

    def __init__(self, *, window: int = 20, **config: Any) -> None:
        check_int("window", window)
        if window <= 0:
            raise ValueError("window must be positive")
        config.pop("max_messages", None)
        super().__init__(max_messages=window, **config)
        self.window = window

    def _strategy(self) -> memory_pb2.Strategy:
        return memory_pb2.Strategy(
            window=memory_pb2.WindowStrategy(window=self.window),
            **self._common_strategy(),
        )


class SummaryMemory(BufferMemory):
    """Keeps recent turns verbatim and a running summary of everything older.

    The service writes the summary, in the background after the Add that makes
    a fold due, so :meth:`get` does not normally wait for a model call.

    Args:
        llm: Which summariser the service uses: the name of one configured on
            the server (``"extractive"``, built in; ``"openai"``, when the
            server has ``--openai-base-url``); ``None`` or a model object of
            the original's (``FakeLLM(...)``, ``Windlass.llm(...)``): the
            server's default. The service writes the summaries with the
            summarisers configured on the server, so a model object is kept
            as ``self.llm`` but never called.
        window: How many recent messages to keep verbatim.
        summarize_every: Summarise once this many messages have overflowed
            the window (at least 1).
        **config: Forwarded to :class:`BufferMemory` (``max_messages`` is
            ignored, as in the original).

    Unlike the original, messages that overflowed but are not summarised yet
    are returned verbatim, so none is in neither the summary nor the list.
    Adding to a buffer or window thread makes it a summary thread with this
    object's strategy (other objects keep reading their own view of it).
    """

    def __init__(
        self,
        *,
        llm: object = None,
        window: int = 10,
        summarize_every: int = 6,
        **config: Any,
    ) -> None:
        check_int("window", window)
        check_int("summarize_every", summarize_every)
        if window < 0:
            raise ValueError("window must not be negative")
        config.pop("max_messages", None)
        super().__init__(max_messages=None, **config)
        self.llm = llm
        self.window = window
        self.summarize_every = max(1, summarize_every)

    def _strategy(self) -> memory_pb2.Strategy:
        return memory_pb2.Strategy(
            summary=memory_pb2.SummaryStrategy(
                window=self.window,
                summarize_every=self.summarize_every,
                # A model object of the original's cannot travel: the
                # server's default summariser stands in for it.
                model=self.llm if isinstance(self.llm, str) else "",
            ),
            **self._common_strategy(),
        )

    def _upgrade_request(self, response: memory_pb2.AddResponse) -> memory_pb2.AddRequest | None:
        # A buffer or window thread has no summary, so this object's view
        # (the summary, then the recent turns) needs the thread to become a
        # summary thread. Nothing is lost for other objects: they read their
        # own buffer or window of a summary thread. Conditional on the thread
        # not having moved on, so two summary objects racing cannot flip it
        # back and forth; a lost race is left to the next Add.
        if not response.HasField("thread"):
            return None
        if response.thread.strategy.WhichOneof("kind") == "summary":
            return None
        return memory_pb2.AddRequest(
            thread_id=response.thread.thread_id,
            strategy=self._strategy(),
            replace_strategy=True,
            expected_last_seq=response.thread.last_seq,
            request_id=uuid.uuid4().hex,
        )

    def summary(self, thread_id: str = DEFAULT_THREAD) -> str:
        """Return the current summary of a thread, or ``""``.

        Waits, like :meth:`get`, for a fold that is due or running (at this
        object's window), so the summary covers every message that should be
        folded by now.
        """
        response = self._call(self._stub.Get, self._get_request(thread_id, None, None))
        return str(response.summary)

    async def asummary(self, thread_id: str = DEFAULT_THREAD) -> str:
        """Return the current summary of a thread, or ``""``."""
        response = await self._acall(self._stub.Get, self._get_request(thread_id, None, None))
        return str(response.summary)
