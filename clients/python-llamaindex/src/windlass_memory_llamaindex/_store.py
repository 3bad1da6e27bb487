"""WindlassChatStore: a LlamaIndex BaseChatStore over windlass-memory threads."""

from __future__ import annotations

from typing import Any

from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.storage.chat_store.base import BaseChatStore

from windlass_memory import SummaryMemory

from ._backing import MemoryBacked, check_unshaped
from ._convert import from_llamaindex, to_llamaindex


class WindlassChatStore(MemoryBacked, BaseChatStore):
    """Chat histories kept in the windlass-memory service, one thread per key.

    Args:
        memory: A :mod:`windlass_memory` memory object; its class picks what
            :meth:`get_messages` returns: ``BufferMemory`` (everything),
            ``WindowMemory(window=n)`` or ``SummaryMemory`` (a summary system
            message, then the recent turns). Closing it is yours.
        target: Instead of ``memory``: the service's ``host:port``; a
            ``BufferMemory`` is made for it (:meth:`close` closes it).

    The service appends; it does not edit. ``set_messages`` is a Clear then
    an Add, and ``delete_message`` / ``delete_last_message`` rewrite the
    thread the same way: not atomic with other writers of the same key, and
    not possible over a ``SummaryMemory`` (its summary cannot be rewritten):
    there they raise NotImplementedError.
    """

    @classmethod
    def class_name(cls) -> str:
        return "WindlassChatStore"

    # ---- reads ----

    def get_messages(self, key: str, **kwargs: Any) -> list[ChatMessage]:
        """The thread ``key``, shaped by the memory's strategy."""
        return [to_llamaindex(m) for m in self._memory.get(thread_id=key)]

    async def aget_messages(self, key: str, **kwargs: Any) -> list[ChatMessage]:
        return [to_llamaindex(m) for m in await self._memory.aget(thread_id=key)]

    def get_keys(self) -> list[str]:
        return self._memory.threads()

    async def aget_keys(self) -> list[str]:
        return await self._memory.athreads()

    # ---- appends ----

    def add_message(self, key: str, message: ChatMessage, idx: int | None = None) -> None:
        """Appends a message (``idx``, an insert position, is not supported)."""
        _no_insert(idx)
        self._memory.add(from_llamaindex(message), thread_id=key)

    async def async_add_message(
        self, key: str, message: ChatMessage, idx: int | None = None
    ) -> None:
        _no_insert(idx)
        await self._memory.aadd(from_llamaindex(message), thread_id=key)

    # ---- rewrites ----

    def set_messages(self, key: str, messages: list[ChatMessage]) -> None:
        """Replaces the thread: a Clear, then one Add of all the messages."""
        converted = convert_all(messages)
        self._memory.clear(thread_id=key)
        self._memory.add(converted, thread_id=key)

    async def aset_messages(self, key: str, messages: list[ChatMessage]) -> None:
        converted = convert_all(messages)
        await self._memory.aclear(thread_id=key)
        await self._memory.aadd(converted, thread_id=key)

    def delete_messages(self, key: str) -> list[ChatMessage] | None:
        """Forgets the thread; returns what it held (``None`` if it was empty)."""
        held = self.get_messages(key)
        self._memory.clear(thread_id=key)
        return held or None

    async def adelete_messages(self, key: str) -> list[ChatMessage] | None:
        held = await self.aget_messages(key)
        await self._memory.aclear(thread_id=key)
        return held or None

    def delete_message(self, key: str, idx: int) -> ChatMessage | None:
        """Removes message ``idx`` by rewriting the thread; ``None`` if there is none."""
        stored = self._stored(key)
        if not 0 <= idx < len(stored):
            return None
        removed = stored.pop(idx)
        self._memory.clear(thread_id=key)
        self._memory.add(stored, thread_id=key)
        return to_llamaindex(removed)

    def delete_last_message(self, key: str) -> ChatMessage | None:
        """Removes the newest message by rewriting the thread; ``None`` if there is none."""
        count = len(self._stored(key))
        return self.delete_message(key, count - 1) if count else None

    def _stored(self, key: str) -> list[Any]:
        if isinstance(self._memory, SummaryMemory):
            raise NotImplementedError(
                "deleting single messages of a summary thread: its summary cannot be rewritten"
            )
        check_unshaped(self._memory)
        # limit=0: every stored message, whatever the window or max_messages.
        return self._memory.get(thread_id=key, limit=0)


def convert_all(messages: Any) -> list[Any]:
    if isinstance(messages, ChatMessage) or not isinstance(messages, (list, tuple)):
        raise TypeError(f"messages: expected a list of ChatMessage, not {type(messages).__name__}")
    return [from_llamaindex(m, f"messages[{i}]") for i, m in enumerate(messages)]


def _no_insert(idx: int | None) -> None:
    if idx is not None:
        raise NotImplementedError(
            "idx: the service appends; inserting at a position is not supported"
        )
