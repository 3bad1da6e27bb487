"""WindlassDBChatStore: the AsyncDBChatStore that LlamaIndex's Memory takes, over windlass threads."""

from __future__ import annotations

from typing import Any

from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.storage.chat_store.base_db import AsyncDBChatStore, MessageStatus

from windlass_memory import SummaryMemory

from ._backing import MemoryBacked, check_unshaped
from ._convert import to_llamaindex
from ._store import convert_all


class WindlassDBChatStore(MemoryBacked, AsyncDBChatStore):
    """The store of ``llama_index.core.memory.Memory``, kept in the windlass-memory service.

    ``Memory.from_defaults(session_id="user-1", chat_store=WindlassDBChatStore(memory=...))``:
    each session id is one thread. The service, not Memory, decides what is
    recalled: the ACTIVE messages are the thread as its strategy returns it
    (``BufferMemory`` everything, ``WindowMemory(window=n)`` the newest n,
    ``SummaryMemory`` a summary system message then the recent turns). The
    service archives nothing, so there are no ARCHIVED messages, and
    :meth:`archive_oldest_messages` (what Memory calls when the recalled
    thread exceeds its ``token_limit`` × ``chat_history_token_ratio``) raises
    ValueError: pick a strategy whose thread fits the token limit.

    Args:
        memory: A :mod:`windlass_memory` memory object (closing it is yours).
        target: Instead of ``memory``: the service's ``host:port``; a
            ``BufferMemory`` is made for it (:meth:`close` closes it).

    ``set_messages`` is a Clear then an Add; ``delete_message`` and
    ``delete_oldest_messages`` rewrite the thread the same way (not atomic
    with other writers, refused over a ``SummaryMemory``).
    """

    @classmethod
    def class_name(cls) -> str:
        return "WindlassDBChatStore"

    # ---- reads ----

    async def get_messages(
        self,
        key: str,
        status: MessageStatus | None = MessageStatus.ACTIVE,
        limit: int | None = None,
        offset: int | None = None,
    ) -> list[ChatMessage]:
        """ACTIVE: the thread as its strategy shapes it; ARCHIVED: none; None: all stored.

        All stored is every message of a buffer or window thread, and for a
        summary thread its summary and the turns it does not cover yet (the
        covered ones are in the summary only).
        """
        if status == MessageStatus.ARCHIVED:
            return []
        everything = status is None and not isinstance(self._memory, SummaryMemory)
        # limit=0: every stored message, whatever the window or max_messages.
        stored = await self._memory.aget(thread_id=key, limit=0 if everything else None)
        messages = [to_llamaindex(m) for m in stored][offset or 0 :]
        return messages if limit is None else messages[:limit]

    async def count_messages(
        self, key: str, status: MessageStatus | None = MessageStatus.ACTIVE
    ) -> int:
        return len(await self.get_messages(key, status=status))

    async def get_keys(self) -> list[str]:
        return await self._memory.athreads()

    # ---- appends ----

    async def add_message(
        self, key: str, message: ChatMessage, status: MessageStatus = MessageStatus.ACTIVE
    ) -> None:
        await self.add_messages(key, [message], status=status)

    async def add_messages(
        self, key: str, messages: list[ChatMessage], status: MessageStatus = MessageStatus.ACTIVE
    ) -> None:
        """Appends the messages in one Add (stored together or not at all)."""
        _active_only(status)
        await self._memory.aadd(convert_all(messages), thread_id=key)

    # ---- rewrites ----

    async def set_messages(
        self, key: str, messages: list[ChatMessage], status: MessageStatus = MessageStatus.ACTIVE
    ) -> None:
        """Replaces the thread: a Clear, then one Add of all the messages."""
        _active_only(status)
        converted = convert_all(messages)
        await self._memory.aclear(thread_id=key)
        await self._memory.aadd(converted, thread_id=key)

    async def delete_messages(self, key: str, status: MessageStatus | None = None) -> None:
        """Forgets the thread (ARCHIVED: nothing, as nothing is archived)."""
        if status != MessageStatus.ARCHIVED:
            await self._memory.aclear(thread_id=key)

    async def delete_message(self, key: str, idx: int) -> ChatMessage | None:
        """Removes stored message ``idx`` by rewriting the thread; ``None`` if there is none."""
        stored = await self._stored(key)
        if not 0 <= idx < len(stored):
            return None
        removed = stored.pop(idx)
        await self._rewrite(key, stored)
        return to_llamaindex(removed)

    async def delete_oldest_messages(self, key: str, n: int) -> list[ChatMessage]:
        """Removes the oldest ``n`` stored messages by rewriting the thread; returns them."""
        stored = await self._stored(key)
        if n <= 0:
            return []
        await self._rewrite(key, stored[n:])
        return [to_llamaindex(m) for m in stored[:n]]

    async def archive_oldest_messages(self, key: str, n: int) -> list[ChatMessage]:
        # A ValueError, not NotImplementedError: LlamaIndex's asyncio_run (the
        # sync Memory.put) takes any RuntimeError for a nested event loop.
        raise ValueError(
            f"Memory asked to archive the oldest {n} messages of {key!r}, the thread being over "
            "its token limit: the service archives nothing; its strategy bounds what is "
            "recalled, so use a WindowMemory or SummaryMemory that fits Memory's token_limit "
            "(or raise token_limit)"
        )

    async def _stored(self, key: str) -> list[Any]:
        if isinstance(self._memory, SummaryMemory):
            raise NotImplementedError(
                "deleting single messages of a summary thread: its summary cannot be rewritten"
            )
        check_unshaped(self._memory)
        return list(await self._memory.aget(thread_id=key, limit=0))

    async def _rewrite(self, key: str, messages: list[Any]) -> None:
        await self._memory.aclear(thread_id=key)
        await self._memory.aadd(messages, thread_id=key)


def _active_only(status: MessageStatus) -> None:
    if status != MessageStatus.ACTIVE:
        raise NotImplementedError(
            f"status {MessageStatus(status).value!r}: the service keeps only active messages (it archives nothing)"
        )

