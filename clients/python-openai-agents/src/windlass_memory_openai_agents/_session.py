"""WindlassSession: an OpenAI Agents SDK Session kept in windlass-memory."""

from __future__ import annotations

from typing import Any

import grpc
from agents.memory.session_settings import SessionSettings, resolve_session_limit
from windlass_memory import BufferMemory

from ._items import to_item, to_message


class WindlassSession:
    """The SDK's ``Session`` protocol over one windlass-memory thread.

    ``session_id`` is the thread id. ``target`` (``host:port``) defaults to
    ``$WINDLASS_MEMORY_TARGET``, else ``127.0.0.1:50051``; ``token``,
    ``credentials``, ``channel`` and ``timeout`` are those of
    :class:`windlass_memory.BufferMemory`. ``memory``: a memory object of
    your own instead (a ``WindowMemory`` or ``SummaryMemory``): new threads
    get its strategy, and ``get_items()`` without a limit returns its view
    (a summary thread's summary comes first, as a system item). Items are
    stored one per message, losslessly (see ``_items``). A memory object
    with a ``profile`` or ``clear_tool_results`` is refused: items come back
    from their stored JSON, so neither could shape them, and a profile that
    merges messages would merge items away (the SDK's model converts items
    for its provider itself).
    """

    def __init__(
        self,
        session_id: str,
        *,
        target: str | None = None,
        token: str | None = None,
        credentials: grpc.ChannelCredentials | None = None,
        channel: grpc.Channel | None = None,
        timeout: float | None = 30.0,
        memory: BufferMemory | None = None,
        session_settings: SessionSettings | None = None,
    ) -> None:
        if not isinstance(session_id, str) or not session_id:
            raise TypeError("session_id: expected a non-empty str (the thread id)")
        if memory is not None and (
            getattr(memory, "profile", None) is not None
            or getattr(memory, "clear_tool_results", None) is not None
        ):
            raise ValueError(
                "memory: a memory object with a profile or clear_tool_results cannot back a "
                "session (items are returned as stored; a profile would merge them away)"
            )
        self.session_id = session_id
        self.session_settings = session_settings
        self._owns_memory = memory is None
        self.memory = memory or BufferMemory(
            target=target, token=token, credentials=credentials, channel=channel, timeout=timeout
        )

    async def get_items(self, limit: int | None = None) -> list[Any]:
        """The session's items, oldest first: the memory object's view (all, for
        the default BufferMemory); with ``limit``, the newest ``limit`` stored."""
        limit = resolve_session_limit(limit, self.session_settings)
        if limit is not None and limit < 0:
            limit = None  # as the SDK's SQLiteSession reads a negative limit: no limit
        if limit == 0:
            return []
        if limit is None:
            messages = await self.memory.aget(thread_id=self.session_id)
        else:
            # The stored items themselves, past any window or summary.
            messages = await self.memory.anewest(limit, thread_id=self.session_id)
        return [to_item(m) for m in messages]

    async def add_items(self, items: list[Any]) -> None:
        """Append items, in one Add (all or none are stored)."""
        messages = [to_message(item, i) for i, item in enumerate(items)]
        if messages:
            await self.memory.aadd(messages, thread_id=self.session_id)

    async def pop_item(self) -> Any | None:
        """Remove and return the newest item (None when there is none).

        A Rewind guarded by expected_last_seq: an item added meanwhile by
        another run is never removed unseen (see ``BufferMemory.apop``).
        """
        message = await self.memory.apop(thread_id=self.session_id)
        return None if message is None else to_item(message)

    async def clear_session(self) -> None:
        await self.memory.aclear(thread_id=self.session_id)

    def close(self) -> None:
        """Closes the channel of a memory object this session made."""
        if self._owns_memory:
            self.memory.close()
