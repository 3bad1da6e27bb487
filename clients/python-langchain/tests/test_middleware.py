"""WindlassMemoryMiddleware in a real LangChain v1 agent (create_agent), against a live server.

The model is langchain-core's FakeMessagesListChatModel with scripted replies
(tool calls included); create_agent runs the real tools between them. Each
test checks what the model was given (a callback records every prompt) and
what the service holds (read back with the plain client).
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.tools import tool

from live_server import Server
from prompts import Prompts
from windlass_memory import (
    BufferMemory,
    Message,
    Role,
    SummaryMemory,
    ToolCall,
    ToolResultClearing,
    WindowMemory,
)
from windlass_memory_langchain import WindlassMemoryMiddleware


class ScriptedModel(FakeMessagesListChatModel):
    """The scripted fake, accepting the tools create_agent binds (the fake has no bind_tools)."""

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedModel:
        return self


@tool
def weather(city: str) -> str:
    """The temperature in a city."""
    return f"{len(city)} degrees in {city}"


def call(city: str, id: str) -> dict[str, Any]:
    return {"name": "weather", "args": {"city": city}, "id": id, "type": "tool_call"}


def thread() -> str:
    return f"lc-agent-{uuid.uuid4().hex}"


def short(messages: list[BaseMessage]) -> list[tuple[str, str]]:
    return [(m.type, m.text if m.text else f"calls {[c['id'] for c in m.tool_calls]}")
            for m in messages]  # fmt: skip


def test_an_agent_keeps_several_tool_calling_turns_in_the_thread(server: Server) -> None:
    tid = thread()
    model = ScriptedModel(
        responses=[
            AIMessage("", tool_calls=[call("Oslo", "c1")]),
            AIMessage("4 degrees in Oslo."),
            AIMessage("", tool_calls=[call("Lima", "c2"), call("Rome", "c3")]),
            AIMessage("Lima 4, Rome 4."),
        ]
    )
    prompts = Prompts()
    with BufferMemory(target=server.target) as memory:
        agent = create_agent(
            model,
            [weather],
            system_prompt="Be brief.",
            middleware=[WindlassMemoryMiddleware(memory)],
        )
        config = {"configurable": {"thread_id": tid}, "callbacks": [prompts]}
        first = agent.invoke({"messages": [HumanMessage("Weather in Oslo?")]}, config)
        second = agent.invoke({"messages": [HumanMessage("And Lima and Rome?")]}, config)
        stored = memory.get(thread_id=tid)

    # The run's result holds that run's messages only; the thread holds all.
    assert short(first["messages"]) == [
        ("human", "Weather in Oslo?"),
        ("ai", "calls ['c1']"),
        ("tool", "4 degrees in Oslo"),
        ("ai", "4 degrees in Oslo."),
    ]
    assert second["messages"][-1].text == "Lima 4, Rome 4."
    assert [(m.role, m.content, m.tool_call_id) for m in stored] == [
        (Role.USER, "Weather in Oslo?", None),
        (Role.ASSISTANT, "", None),
        (Role.TOOL, "4 degrees in Oslo", "c1"),
        (Role.ASSISTANT, "4 degrees in Oslo.", None),
        (Role.USER, "And Lima and Rome?", None),
        (Role.ASSISTANT, "", None),
        (Role.TOOL, "4 degrees in Lima", "c2"),
        (Role.TOOL, "4 degrees in Rome", "c3"),
        (Role.ASSISTANT, "Lima 4, Rome 4.", None),
    ]
    assert list(stored[5].tool_calls) == [
        ToolCall("c2", "weather", {"city": "Lima"}),
        ToolCall("c3", "weather", {"city": "Rome"}),
    ]
    # Each model call was given the system prompt and the thread as stored so far:
    # the second run's first call starts with the whole first run, read back.
    assert len(prompts.calls) == 4
    assert all(p[0] == SystemMessage("Be brief.") for p in prompts.calls)
    assert short(prompts.calls[2][1:]) == [
        ("human", "Weather in Oslo?"),
        ("ai", "calls ['c1']"),
        ("tool", "4 degrees in Oslo"),
        ("ai", "4 degrees in Oslo."),
        ("human", "And Lima and Rome?"),
    ]
    assert short(prompts.calls[3][1:])[-3:] == [
        ("ai", "calls ['c2', 'c3']"),
        ("tool", "4 degrees in Lima"),
        ("tool", "4 degrees in Rome"),
    ]


def test_a_summary_thread_gives_the_model_the_summary_and_the_recent_turns(
    server: Server,
) -> None:
    tid = thread()
    questions = ["My name is Ana.", "I live in Oslo.", "I like tea.", "What do you know?"]
    model = ScriptedModel(
        responses=[
            AIMessage("Hello Ana."),
            AIMessage("", tool_calls=[call("Oslo", "c1")]),
            AIMessage("Oslo is cold."),
            AIMessage("Tea noted."),
            AIMessage("You are Ana, in Oslo, and like tea."),
        ]
    )
    prompts = Prompts()
    with SummaryMemory(window=2, summarize_every=2, target=server.target) as memory:
        agent = create_agent(
            model,
            [weather],
            system_prompt="Be brief.",
            middleware=[WindlassMemoryMiddleware(memory)],
        )
        config = {"configurable": {"thread_id": tid}, "callbacks": [prompts]}
        for question in questions:
            agent.invoke({"messages": [HumanMessage(question)]}, config)
        recalled = memory.get(thread_id=tid)

    # Ten messages stored (seqs 1..10), the final answer last.
    assert recalled[-1].seq == 10 and recalled[-1].content.startswith("You are Ana")
    last = prompts.calls[-1]
    # One system message: the prompt, then the summary (the server's extractive
    # summariser) of what the window left out; then the newest two verbatim.
    assert isinstance(last[0], SystemMessage)
    assert last[0].text.startswith("Be brief.\n\nSummary of the earlier conversation:\n")
    assert "My name is Ana." in last[0].text
    assert 'called weather({"city": "Oslo"})' in last[0].text  # the tool turn is in it
    assert short(last[1:]) == [("ai", "Tea noted."), ("human", "What do you know?")]
    assert all(m.text != "My name is Ana." for m in last[1:])


def test_a_window_never_gives_the_model_a_tool_result_without_its_call(server: Server) -> None:
    tid = thread()
    model = ScriptedModel(
        responses=[AIMessage("", tool_calls=[call("Oslo", "c1")]), AIMessage("Cold.")]
    )
    prompts = Prompts()
    with WindowMemory(window=2, target=server.target) as memory:
        agent = create_agent(model, [weather], middleware=[WindlassMemoryMiddleware(memory)])
        config = {"configurable": {"thread_id": tid}, "callbacks": [prompts]}
        agent.invoke({"messages": [HumanMessage("Weather in Oslo?")]}, config)
    # The window of two would start on the tool result; the service widens it.
    assert short(prompts.calls[1]) == [("ai", "calls ['c1']"), ("tool", "4 degrees in Oslo")]


def test_a_summary_is_the_system_message_of_an_agent_without_a_prompt(server: Server) -> None:
    tid = thread()
    model = ScriptedModel(responses=[AIMessage(f"r{i}") for i in range(3)])
    prompts = Prompts()
    with SummaryMemory(window=1, summarize_every=2, target=server.target) as memory:
        agent = create_agent(model, middleware=[WindlassMemoryMiddleware(memory, thread_id=tid)])
        for question in ("q0", "q1", "q2"):
            agent.invoke({"messages": [HumanMessage(question)]}, {"callbacks": [prompts]})
    last = prompts.calls[-1]
    assert last[0].text.startswith("Summary of the earlier conversation:\n")
    assert [m.type for m in last].count("system") == 1 and last[-1].text == "q2"


def test_async_runs_use_the_async_hooks(server: Server) -> None:
    tid = thread()
    model = ScriptedModel(
        responses=[AIMessage("", tool_calls=[call("Oslo", "c1")]), AIMessage("Cold."),
                   AIMessage("Still cold.")]
    )  # fmt: skip

    async def scenario() -> list[Any]:
        with BufferMemory(target=server.target) as memory:
            agent = create_agent(
                model, [weather], middleware=[WindlassMemoryMiddleware(memory, thread_id=tid)]
            )
            await agent.ainvoke({"messages": [HumanMessage("Weather in Oslo?")]})
            await agent.ainvoke({"messages": [HumanMessage("Now?")]})
            return await memory.aget(thread_id=tid)

    stored = asyncio.run(scenario())
    assert [m.content for m in stored] == [
        "Weather in Oslo?", "", "4 degrees in Oslo", "Cold.", "Now?", "Still cold."
    ]  # fmt: skip


def test_a_run_without_a_thread_is_refused(server: Server) -> None:
    with BufferMemory(target=server.target) as memory:
        agent = create_agent(
            ScriptedModel(responses=[AIMessage("hi")]),
            middleware=[WindlassMemoryMiddleware(memory)],
        )
        with pytest.raises(ValueError, match="needs a thread"):
            agent.invoke({"messages": [HumanMessage("hi")]})
        with pytest.raises(TypeError, match="memory: expected a windlass_memory"):
            WindlassMemoryMiddleware("127.0.0.1:50051")  # type: ignore[arg-type]


def test_a_memory_objects_profile_and_clearing_shape_what_the_model_gets(server: Server) -> None:
    # A thread an Anthropic-style model refuses as stored: it starts on an
    # assistant turn and has a system message after the first turn.
    tid = thread()
    report = "4 degrees in Oslo, rain all day, wind from the north at twenty knots, clearing later."
    with WindowMemory(
        window=20,
        profile="anthropic",
        clear_tool_results=ToolResultClearing(keep_tool_turns=0),
        target=server.target,
    ) as memory:
        memory.add(
            [
                Message.assistant("Welcome back."),
                Message.user("Weather in Oslo?"),
                Message.assistant("", tool_calls=[ToolCall("c0", "weather", {"city": "Oslo"})]),
                Message.tool(report, tool_call_id="c0"),
                Message.system("Answer in one line."),
            ],
            thread_id=tid,
        )
        prompts = Prompts()
        agent = create_agent(
            ScriptedModel(responses=[AIMessage("Still cold.")]),
            [weather],
            system_prompt="You are a forecaster.",
            middleware=[WindlassMemoryMiddleware(memory, thread_id=tid)],
        )
        agent.invoke({"messages": [HumanMessage("And tomorrow?")]}, {"callbacks": [prompts]})

    (given,) = prompts.calls
    # The thread's system message joined the prompt; the list starts on a user turn.
    assert given[0] == SystemMessage("You are a forecaster.\n\nAnswer in one line.")
    assert short(given[1:]) == [
        ("human", "Weather in Oslo?"),
        ("ai", "calls ['c0']"),
        ("tool", "[tool result cleared: weather call c0, 25 tokens]"),
        ("human", "And tomorrow?"),
    ]
