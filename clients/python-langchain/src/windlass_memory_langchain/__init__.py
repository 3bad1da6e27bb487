"""A LangChain chat message history kept in the windlass-memory service.

::

    from langchain_core.runnables.history import RunnableWithMessageHistory
    from windlass_memory import BufferMemory
    from windlass_memory_langchain import WindlassChatMessageHistory

    memory = BufferMemory(target="127.0.0.1:50051")
    chain = RunnableWithMessageHistory(
        model, lambda session_id: WindlassChatMessageHistory(session_id, memory=memory)
    )

Each LangChain session is one thread of the service. Messages map onto the
service's ``ChatMessage`` without losing what an agent loop needs: roles,
names, ids, ``AIMessage.tool_calls`` (arguments as JSON text) and
``invalid_tool_calls``, ``ToolMessage.tool_call_id`` and ``status``.
"""

from ._convert import from_langchain, to_langchain
from ._history import WindlassChatMessageHistory

__all__ = ["WindlassChatMessageHistory", "from_langchain", "to_langchain"]
