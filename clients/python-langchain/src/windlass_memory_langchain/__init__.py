"""LangChain memory kept in the windlass-memory service.

A LangChain v1 agent (``langchain``'s ``create_agent``, the ``agents`` extra)::

    from langchain.agents import create_agent
    from windlass_memory import WindowMemory
    from windlass_memory_langchain import WindlassMemoryMiddleware

    agent = create_agent(model, tools, middleware=[WindlassMemoryMiddleware(WindowMemory())])
    agent.invoke({"messages": [("user", "hi")]}, {"configurable": {"thread_id": "user-1"}})

Existing code on ``BaseChatMessageHistory`` (``RunnableWithMessageHistory``)
uses :class:`WindlassChatMessageHistory` (langchain-core alone).

Each thread id (or session id) is one thread of the service. Messages map onto the
service's ``ChatMessage`` without losing what an agent loop needs: roles,
names, ids, ``AIMessage.tool_calls`` (arguments as JSON text) and
``invalid_tool_calls``, ``ToolMessage.tool_call_id`` and ``status``.
"""

from ._convert import from_langchain, to_langchain
from ._history import WindlassChatMessageHistory

__all__ = [
    "WindlassChatMessageHistory",
    "WindlassMemoryMiddleware",
    "from_langchain",
    "to_langchain",
]


def __getattr__(name: str) -> object:
    # Imported on first use: the middleware needs the langchain package (the
    # "agents" extra), the history adapter only langchain-core.
    if name == "WindlassMemoryMiddleware":
        from ._middleware import WindlassMemoryMiddleware

        return WindlassMemoryMiddleware
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
