"""WindlassMemoryMiddleware: a LangChain v1 agent's history kept in a windlass-memory thread."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated, Any

from langchain.agents.middleware import (
    AgentMiddleware,
    AgentState,
    ModelCallResult,
    ModelRequest,
    ModelResponse,
)
from langchain.agents.middleware.types import PrivateStateAttr
from langchain_core.messages import SystemMessage
from langgraph.config import get_config
from langgraph.runtime import Runtime
from typing_extensions import NotRequired

from windlass_memory import BufferMemory, Message

from ._convert import from_langchain_all, to_langchain
from ._memory import memory_for


class WindlassState(AgentState[Any]):
    # How many of the state's messages are already in the thread. Private: it
    # is neither input nor output, and it starts at 0 in every run without a
    # checkpointer (the state then holds only that run's messages).
    windlass_saved: NotRequired[Annotated[int, PrivateStateAttr]]


class WindlassMemoryMiddleware(AgentMiddleware[WindlassState]):
    """Keeps an agent's conversation in a windlass-memory thread.

    ``create_agent(model, tools, middleware=[WindlassMemoryMiddleware(memory)])``,
    then ``agent.invoke({"messages": [new user message]},
    {"configurable": {"thread_id": "..."}})``: before each model call the
    messages of the run not yet stored are appended to the thread (the user's
    message, the model's tool calls, the tool results: one Add each time), and
    the model is given the thread as the service returns it (everything, a
    window, or a summary plus the recent turns) instead of the state's
    messages (a summary joins the system prompt, after it). After the run the
    last messages (the final answer) are appended.
    The agent's own state keeps only the run's messages; pass only the new
    ones in, not the history.

    Args:
        memory: A :mod:`windlass_memory` memory object; its class is the
            thread's strategy: ``BufferMemory``, ``WindowMemory(window=n)`` or
            ``SummaryMemory(...)``. Closing it is yours.
        target: Instead of ``memory``: the service's ``host:port``; a
            ``BufferMemory`` is made for it (:meth:`close` closes it).
        thread_id: A fixed thread. Without it each run's
            ``config["configurable"]["thread_id"]`` names the thread (the key
            LangGraph's checkpointers use), and a run without one is refused.

    Do not combine it with middleware that removes or rewrites the state's
    messages (``SummarizationMiddleware``): the service already shapes what
    the model sees, and the count of stored messages would no longer match.
    """

    state_schema = WindlassState

    def __init__(
        self,
        memory: BufferMemory | None = None,
        *,
        target: str | None = None,
        thread_id: str | None = None,
    ) -> None:
        super().__init__()
        if thread_id is not None and not isinstance(thread_id, str):
            raise TypeError(f"thread_id: expected str, not {type(thread_id).__name__}")
        self.thread_id = thread_id
        self.memory, self._owns_memory = memory_for(memory, target)

    def close(self) -> None:
        """Closes the memory object made from ``target`` (not one passed in)."""
        if self._owns_memory:
            self.memory.close()

    def _thread(self) -> str:
        if self.thread_id is not None:
            return self.thread_id
        thread = get_config().get("configurable", {}).get("thread_id")
        if not isinstance(thread, str) or not thread:
            raise ValueError(
                "WindlassMemoryMiddleware needs a thread: pass "
                '{"configurable": {"thread_id": "..."}} to invoke, or thread_id= to the middleware'
            )
        return thread

    @staticmethod
    def _unsaved(state: WindlassState) -> tuple[list[Any], dict[str, Any] | None]:
        messages = state["messages"]
        saved = state.get("windlass_saved", 0)
        if saved >= len(messages):
            return [], None
        return from_langchain_all(messages[saved:]), {"windlass_saved": len(messages)}

    # ---- append what the run added ----

    def before_model(self, state: WindlassState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        new, update = self._unsaved(state)
        if new:
            self.memory.add(new, thread_id=self._thread())
        return update

    async def abefore_model(
        self, state: WindlassState, runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        new, update = self._unsaved(state)
        if new:
            await self.memory.aadd(new, thread_id=self._thread())
        return update

    def after_agent(self, state: WindlassState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        return self.before_model(state, runtime)

    async def aafter_agent(
        self, state: WindlassState, runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        return await self.abefore_model(state, runtime)

    # ---- give the model the thread ----

    def wrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], ModelResponse[Any]],
    ) -> ModelCallResult[Any]:
        return handler(_with_thread(request, self.memory.get(thread_id=self._thread())))

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelCallResult[Any]:
        recalled = await self.memory.aget(thread_id=self._thread())
        return await handler(_with_thread(request, recalled))


def _with_thread(request: ModelRequest[Any], recalled: list[Message]) -> ModelRequest[Any]:
    """The request with the thread as its messages.

    The thread's leading system messages (a summary thread's summary) join
    the agent's system prompt, after it, so the model gets one system message
    first: some providers take no other.
    """
    messages = [to_langchain(m) for m in recalled]
    lead: list[str] = []
    while messages and isinstance(messages[0], SystemMessage):
        lead.append(messages.pop(0).text)
    if not lead:
        return request.override(messages=messages)
    text = "\n\n".join(lead)
    prompt = request.system_message
    if prompt is None or not prompt.content:
        system = SystemMessage(text)
    elif isinstance(prompt.content, str):
        system = SystemMessage(f"{prompt.content}\n\n{text}")
    else:  # content blocks (cache control …): kept, the thread's text after them
        system = SystemMessage([*prompt.content, {"type": "text", "text": text}])
    return request.override(messages=messages, system_message=system)
