"""WindlassChatMessageHistory under LangChain's RunnableWithMessageHistory, against a live server.

The model is langchain_core's FakeMessagesListChatModel (scripted replies,
tool calls included); the history is the real service. Each test reads the
stored thread back with the plain windlass_memory client as well, to check
what the service holds, not only what the adapter returns.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    ChatMessage,
    FunctionMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
from langchain_core.runnables.history import RunnableWithMessageHistory

from live_server import Server
from prompts import Prompts
from windlass_memory import BufferMemory, Message, Role, ToolCall, WindowMemory
from windlass_memory_langchain import WindlassChatMessageHistory, from_langchain, to_langchain


def session() -> str:
    return f"lc-{uuid.uuid4().hex}"


def fields(message: BaseMessage) -> tuple[Any, ...]:
    """What must survive the service: type, text, name, id, tool calls and results."""
    return (
        message.type,
        message.content,
        message.name,
        message.id,
        getattr(message, "tool_calls", None),
        getattr(message, "tool_call_id", None),
        getattr(message, "status", None),
    )


def test_a_tool_calling_turn_through_runnable_with_message_history(server: Server) -> None:
    sid = session()
    call = {"name": "weather", "args": {"city": "Oslo"}, "id": "call_1", "type": "tool_call"}
    model = FakeMessagesListChatModel(
        responses=[
            AIMessage("", tool_calls=[call], id="ai-1"),
            AIMessage("3 degrees in Oslo.", id="ai-2", name="planner"),
        ]
    )
    prompts = Prompts()
    with BufferMemory(target=server.target) as memory:
        chain = RunnableWithMessageHistory(
            model, lambda session_id: WindlassChatMessageHistory(session_id, memory=memory)
        )
        config = {"configurable": {"session_id": sid}, "callbacks": [prompts]}
        first = chain.invoke([HumanMessage("Weather in Oslo?", id="h-1", name="ana")], config)
        assert first.tool_calls == [call]
        # The agent runs the tool and sends its result as the next input.
        result = ToolMessage('{"temp": 3}', tool_call_id="call_1", name="weather", id="t-1")
        second = chain.invoke([result], config)
        assert second.content == "3 degrees in Oslo."

        stored = memory.get(thread_id=sid)
        history = WindlassChatMessageHistory(sid, memory=memory).messages

    # The model's second call saw the whole turn, read back from the service.
    assert [fields(m) for m in prompts.calls[1]] == [
        fields(HumanMessage("Weather in Oslo?", id="h-1", name="ana")),
        fields(AIMessage("", tool_calls=[call], id="ai-1")),
        fields(result),
    ]
    # What the service holds, field by field.
    assert stored == [
        Message(Role.USER, "Weather in Oslo?", name="ana", metadata={"langchain.id": "h-1"}),
        Message(
            Role.ASSISTANT,
            "",
            tool_calls=[ToolCall("call_1", "weather", {"city": "Oslo"})],
            metadata={"langchain.id": "ai-1"},
        ),
        Message(
            Role.TOOL,
            '{"temp": 3}',
            name="weather",
            tool_call_id="call_1",
            metadata={"langchain.id": "t-1"},
        ),
        Message(
            Role.ASSISTANT, "3 degrees in Oslo.", name="planner", metadata={"langchain.id": "ai-2"}
        ),
    ]
    assert [type(m) for m in history] == [HumanMessage, AIMessage, ToolMessage, AIMessage]
    assert fields(history[3]) == fields(AIMessage("3 degrees in Oslo.", id="ai-2", name="planner"))


def test_a_prompt_chain_with_a_history_key_and_a_window(server: Server) -> None:
    sid = session()
    prompt = ChatPromptTemplate.from_messages(
        [("system", "Be brief."), MessagesPlaceholder("history"), ("human", "{question}")]
    )
    model = FakeMessagesListChatModel(
        responses=[AIMessage("one"), AIMessage("two"), AIMessage("three")]
    )
    prompts = Prompts()
    # A window of 2: the model sees only the newest two stored messages.
    with WindowMemory(window=2, target=server.target) as memory:
        chain = RunnableWithMessageHistory(
            prompt | model,
            lambda session_id: WindlassChatMessageHistory(session_id, memory=memory),
            input_messages_key="question",
            history_messages_key="history",
        )
        config = {"configurable": {"session_id": sid}, "callbacks": [prompts]}
        for question in ("q1", "q2", "q3"):
            chain.invoke({"question": question}, config)
        # limit=0: every stored message, whatever the window.
        stored = [(m.role.value, m.content) for m in memory.get(thread_id=sid, limit=0)]
    assert stored == [
        ("user", "q1"),
        ("assistant", "one"),
        ("user", "q2"),
        ("assistant", "two"),
        ("user", "q3"),
        ("assistant", "three"),
    ]
    assert [m.content for m in prompts.calls[2]] == ["Be brief.", "q2", "two", "q3"]


def test_async_chain(server: Server) -> None:
    sid = session()
    model = FakeMessagesListChatModel(responses=[AIMessage("hello")])

    async def scenario() -> list[BaseMessage]:
        with BufferMemory(target=server.target) as memory:
            chain = RunnableWithMessageHistory(
                model, lambda session_id: WindlassChatMessageHistory(session_id, memory=memory)
            )
            await chain.ainvoke([HumanMessage("hi")], {"configurable": {"session_id": sid}})
            history = WindlassChatMessageHistory(sid, memory=memory)
            messages = await history.aget_messages()
            await history.aclear()
            assert await history.aget_messages() == []
            return messages

    messages = asyncio.run(scenario())
    assert [(m.type, m.content) for m in messages] == [("human", "hi"), ("ai", "hello")]


def test_every_message_type_round_trips() -> None:
    originals: list[BaseMessage] = [
        SystemMessage("rules", id="s"),
        HumanMessage([{"type": "text", "text": "a"}, "b"], name="ana"),
        AIMessage(
            "thinking",
            tool_calls=[{"name": "f", "args": {"x": [1, 2]}, "id": "c1", "type": "tool_call"}],
            invalid_tool_calls=[
                {
                    "name": "g",
                    "args": "{oops",
                    "id": "c2",
                    "error": "bad JSON",
                    "type": "invalid_tool_call",
                }
            ],
        ),
        ToolMessage("failed", tool_call_id="c1", status="error"),
        ChatMessage(role="assistant", content="generic"),
    ]
    back = [to_langchain(from_langchain(m)) for m in originals]
    assert fields(back[0]) == fields(originals[0])
    assert back[1].content == "ab" and back[1].name == "ana"
    assert fields(back[2]) == fields(originals[2])
    assert back[2].invalid_tool_calls == originals[2].invalid_tool_calls
    assert fields(back[3]) == fields(originals[3])
    assert fields(back[4]) == fields(AIMessage("generic"))


def test_tool_arguments_that_are_not_an_object_become_invalid_tool_calls() -> None:
    stored = Message.assistant("", tool_calls=[ToolCall("c1", "f", "not json")])
    back = to_langchain(stored)
    assert back.tool_calls == []
    assert back.invalid_tool_calls[0]["args"] == "not json"
    assert back.invalid_tool_calls[0]["id"] == "c1"


def test_bad_input_names_the_message(server: Server) -> None:
    with BufferMemory(target=server.target) as memory:
        history = WindlassChatMessageHistory(session(), memory=memory)
        with pytest.raises(
            TypeError, match=r"messages\[1\]: expected a langchain_core BaseMessage"
        ):
            history.add_messages([HumanMessage("ok"), {"role": "user"}])  # type: ignore[list-item]
        with pytest.raises(ValueError, match=r"messages\[0\]: FunctionMessage"):
            history.add_messages([FunctionMessage("x", name="f")])
        with pytest.raises(ValueError, match=r"messages\[0\].content\[0\]: 'image_url'"):
            history.add_messages([HumanMessage([{"type": "image_url", "image_url": {"url": "x"}}])])
        with pytest.raises(TypeError, match="session_id: expected str"):
            WindlassChatMessageHistory(7, memory=memory)  # type: ignore[arg-type]
        assert history.messages == []  # nothing was stored
