"""WindlassChatMessageHistory: BaseChatMessageHistory over a windlass-memory thread."""

from __future__ import annotations

from collections.abc import Sequence

from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.messages import BaseMessage

from windlass_memory import BufferMemory

from ._convert import from_langchain_all, to_langchain
from ._memory import memory_for


class WindlassChatMessageHistory(BaseChatMessageHistory):
    """The messages of one session, kept in a thread of the windlass-memory service.

    Args:
        session_id: The thread id (``RunnableWithMessageHistory`` passes its
            ``session_id`` here).
        memory: A :mod:`windlass_memory` memory object; its class picks what
            :attr:`messages` returns: :class:`~windlass_memory.BufferMemory`
            (everything), ``WindowMemory(window=n)`` (the newest n, never
            starting on an orphaned tool result) or ``SummaryMemory`` (a
            summary system message, then the recent turns). Share one memory
            object (one gRPC channel) among histories; closing it is yours.
        target: Instead of ``memory``: the service's ``host:port``; a
            :class:`~windlass_memory.BufferMemory` is made for it (close it
            with :meth:`close`).

    Every Add carries a request id, so gRPC's retries after a lost connection
    store the messages once. Failed calls raise
    :class:`windlass_memory.MemoryServiceError`.
    """

    def __init__(
        self,
        session_id: str,
        *,
        memory: BufferMemory | None = None,
        target: str | None = None,
    ) -> None:
        if not isinstance(session_id, str):
            raise TypeError(f"session_id: expected str, not {type(session_id).__name__}")
        self.session_id = session_id
        self.memory, self._owns_memory = memory_for(memory, target)

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]
        """The thread, shaped by the memory's strategy, as LangChain messages."""
        return [to_langchain(m) for m in self.memory.get(thread_id=self.session_id)]

    async def aget_messages(self) -> list[BaseMessage]:
        return [to_langchain(m) for m in await self.memory.aget(thread_id=self.session_id)]

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        """Appends the messages, in one Add (stored together or not at all)."""
        self.memory.add(from_langchain_all(messages), thread_id=self.session_id)

    async def aadd_messages(self, messages: Sequence[BaseMessage]) -> None:
        await self.memory.aadd(from_langchain_all(messages), thread_id=self.session_id)

    def clear(self) -> None:
        """Forgets the session's thread."""
        self.memory.clear(thread_id=self.session_id)

    async def aclear(self) -> None:
        await self.memory.aclear(thread_id=self.session_id)

    def close(self) -> None:
        """Closes the memory object made from ``target`` (not one passed in)."""
        if self._owns_memory:
            self.memory.close()
