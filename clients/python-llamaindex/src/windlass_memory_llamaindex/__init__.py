"""A LlamaIndex chat store kept in the windlass-memory service.

::

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
from ._store import WindlassChatStore

__all__ = ["WindlassChatStore", "from_llamaindex", "to_llamaindex"]
