"""LlamaIndex chat stores kept in the windlass-memory service.

For LlamaIndex's ``Memory`` (what ``FunctionAgent`` and the chat engines take)::

    from llama_index.core.memory import Memory
    from windlass_memory import WindowMemory
    from windlass_memory_llamaindex import WindlassDBChatStore

    store = WindlassDBChatStore(memory=WindowMemory(window=20, target="127.0.0.1:50051"))
    memory = Memory.from_defaults(session_id="user-1", chat_store=store)

For the legacy ``ChatMemoryBuffer`` (a ``BaseChatStore``)::

    from llama_index.core.memory import ChatMemoryBuffer
    from windlass_memory import BufferMemory
    from windlass_memory_llamaindex import WindlassChatStore

    store = WindlassChatStore(memory=BufferMemory(target="127.0.0.1:50051"))
    memory = ChatMemoryBuffer.from_defaults(chat_store=store, chat_store_key="user-1")

Each key is one thread of the service. Roles, names, tool calls (as
``ToolCallBlock`` or in ``additional_kwargs``), tool results and the other
``additional_kwargs`` (ids) survive the round trip.
"""

from ._convert import from_llamaindex, to_llamaindex
from ._db_store import WindlassDBChatStore
from ._store import WindlassChatStore

__all__ = ["WindlassChatStore", "WindlassDBChatStore", "from_llamaindex", "to_llamaindex"]
