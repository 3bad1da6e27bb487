"""OpenAI Agents SDK sessions kept in the windlass-memory service.

    from agents import Agent, Runner
    from windlass_memory_openai_agents import WindlassSession

    session = WindlassSession("user-42")  # target: $WINDLASS_MEMORY_TARGET
    await Runner.run(agent, "hi", session=session)
"""

from ._items import ITEM_KEY, to_item, to_message
from ._session import WindlassSession

__all__ = ["ITEM_KEY", "WindlassSession", "to_item", "to_message"]
