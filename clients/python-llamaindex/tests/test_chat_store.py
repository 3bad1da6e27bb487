"""WindlassChatStore under LlamaIndex's SimpleChatEngine and ChatMemoryBuffer, with a live server.

The LLM is llama_index's MockLLMWithChatMemoryOfLastCall (it echoes its
prompt and records the messages it was given); the chat store is the real
service. Each test also reads the stored thread with the plain
windlass_memory client, to check what the service holds.
"""

from __future__ import annotations

import asyncio
import uuid

import pytest
from llama_index.core.base.llms.types import (
    ChatMessage,
    ImageBlock,
    MessageRole,
    TextBlock,
    ToolCallBlock,
)
from llama_index.core.chat_engine import SimpleChatEngine
from llama_index.core.llms.mock import MockLLMWithChatMemoryOfLastCall
from llama_index.core.memory import ChatMemoryBuffer

from live_server import Server
from windlass_memory import (
    BufferMemory,
    Message,
    Role,
    SummaryMemory,
    ToolCall,
    ToolResultClearing,
    WindowMemory,
)
from windlass_memory_llamaindex import (
    WindlassChatStore,
    WindlassDBChatStore,
    from_llamaindex,
    to_llamaindex,
)


def key() -> str:
    return f"li-{uuid.uuid4().hex}"


def shape(messages: list[ChatMessage]) -> list[tuple[str, str | None]]:
    return [(m.role.value, m.content) for m in messages]


def test_a_simple_chat_engine_keeps_its_conversation_in_the_service(server: Server) -> None:
    user = key()
    llm = MockLLMWithChatMemoryOfLastCall()
    with BufferMemory(target=server.target) as client:
        store = WindlassChatStore(memory=client)
        engine = SimpleChatEngine.from_defaults(
            llm=llm,
            memory=ChatMemoryBuffer.from_defaults(
                chat_store=store, chat_store_key=user, token_limit=10_000, llm=llm
            ),
        )
        first = engine.chat("Hello, I am Ana.")
        # A second engine, as another process would make: the history comes from the service.
        again = SimpleChatEngine.from_defaults(
            llm=llm,
            memory=ChatMemoryBuffer.from_defaults(
                chat_store=WindlassChatStore(memory=client), chat_store_key=user, llm=llm
            ),
        )
        again.chat("What is my name?")
        stored = client.get(thread_id=user)
        keys = store.get_keys()
    assert llm.last_chat_messages is not None
    assert shape(list(llm.last_chat_messages)) == [
        ("user", "Hello, I am Ana."),
        ("assistant", first.response),
        ("user", "What is my name?"),
    ]
    assert [(m.role, m.content) for m in stored] == [
        (Role.USER, "Hello, I am Ana."),
        (Role.ASSISTANT, first.response),
        (Role.USER, "What is my name?"),
        (Role.ASSISTANT, stored[3].content),
    ]
    assert stored[3].content != ""
    assert user in keys


def test_tool_calls_and_results_survive_in_both_shapes(server: Server) -> None:
    user = key()
    messages = [
        ChatMessage(role=MessageRole.SYSTEM, content="Use tools."),
        ChatMessage(
            role=MessageRole.USER, content="Weather in Oslo?", additional_kwargs={"id": "m1"}
        ),
        # The OpenAI integration's shape: tool calls in additional_kwargs.
        ChatMessage(
            role=MessageRole.ASSISTANT,
            content="",
            additional_kwargs={
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "weather", "arguments": '{"city": "Oslo"}'},
                    }
                ]
            },
        ),
        ChatMessage(
            role=MessageRole.TOOL,
            content='{"temp": 3}',
            additional_kwargs={"tool_call_id": "call_1", "name": "weather"},
        ),
        # The newer shape: ToolCallBlock.
        ChatMessage(
            role=MessageRole.ASSISTANT,
            blocks=[
                TextBlock(text="And the time:"),
                ToolCallBlock(tool_call_id="call_2", tool_name="time", tool_kwargs={"tz": "CET"}),
            ],
        ),
        ChatMessage(
            role=MessageRole.TOOL, content="12:00", additional_kwargs={"tool_call_id": "call_2"}
        ),
        ChatMessage(role=MessageRole.CHATBOT, content="3 degrees at noon."),
    ]
    with BufferMemory(target=server.target) as client:
        store = WindlassChatStore(memory=client)
        memory = ChatMemoryBuffer.from_defaults(chat_store=store, chat_store_key=user)
        for message in messages:
            memory.put(message)
        back = memory.get_all()
        stored = client.get(thread_id=user)
    assert back == messages
    assert [(m.role, m.tool_calls, m.tool_call_id, m.name) for m in stored] == [
        (Role.SYSTEM, (), None, None),
        (Role.USER, (), None, None),
        (Role.ASSISTANT, (ToolCall("call_1", "weather", '{"city": "Oslo"}'),), None, None),
        (Role.TOOL, (), "call_1", "weather"),
        (Role.ASSISTANT, (ToolCall("call_2", "time", {"tz": "CET"}),), None, None),
        (Role.TOOL, (), "call_2", None),
        (Role.ASSISTANT, (), None, None),
    ]
    assert stored[1].metadata == {"llamaindex.additional_kwargs": '{"id": "m1"}'}


def test_set_and_delete(server: Server) -> None:
    user = key()
    with WindowMemory(window=2, target=server.target) as client:
        store = WindlassChatStore(memory=client)
        store.set_messages(user, [ChatMessage(role="user", content=str(i)) for i in range(4)])
        assert shape(store.get_messages(user)) == [("user", "2"), ("user", "3")]  # the window
        assert store.delete_message(user, 0).content == "0"
        assert store.delete_message(user, 9) is None
        assert store.delete_last_message(user).content == "3"
        assert shape(store.get_messages(user)) == [("user", "1"), ("user", "2")]
        store.set_messages(user, [ChatMessage(role="user", content="fresh")])
        assert shape(store.get_messages(user)) == [("user", "fresh")]
        assert shape(store.delete_messages(user) or []) == [("user", "fresh")]
        assert store.get_messages(user) == []
        assert store.delete_messages(user) is None
        assert store.delete_last_message(user) is None


def test_async_chat_engine(server: Server) -> None:
    user = key()
    llm = MockLLMWithChatMemoryOfLastCall()

    async def scenario() -> list[ChatMessage]:
        with BufferMemory(target=server.target) as client:
            store = WindlassChatStore(memory=client)
            engine = SimpleChatEngine.from_defaults(
                llm=llm,
                memory=ChatMemoryBuffer.from_defaults(
                    chat_store=store, chat_store_key=user, llm=llm
                ),
            )
            await engine.achat("one")
            await engine.achat("two")
            return await store.aget_messages(user)

    messages = asyncio.run(scenario())
    assert [m.role.value for m in messages] == ["user", "assistant", "user", "assistant"]
    assert [messages[0].content, messages[2].content] == ["one", "two"]


def test_summary_threads_refuse_single_deletes(server: Server) -> None:
    with SummaryMemory(target=server.target) as client:
        store = WindlassChatStore(memory=client)
        with pytest.raises(NotImplementedError, match="summary"):
            store.delete_last_message(key())


def test_bad_input_names_the_field(server: Server) -> None:
    with BufferMemory(target=server.target) as client:
        store = WindlassChatStore(memory=client)
        user = key()
        with pytest.raises(ValueError, match=r"message.blocks\[1\]: ImageBlock"):
            store.add_message(
                user,
                ChatMessage(
                    role="user", blocks=[TextBlock(text="see"), ImageBlock(url="http://x/y.png")]
                ),
            )
        with pytest.raises(TypeError, match="message: expected a llama_index ChatMessage"):
            store.add_message(user, {"role": "user", "content": "x"})  # type: ignore[arg-type]
        with pytest.raises(TypeError, match=r"messages\[0\]: expected a llama_index ChatMessage"):
            store.set_messages(user, ["x"])  # type: ignore[list-item]
        with pytest.raises(TypeError, match="additional_kwargs: values must be JSON"):
            store.add_message(
                user, ChatMessage(role="user", content="x", additional_kwargs={"o": object()})
            )
        with pytest.raises(NotImplementedError, match="idx"):
            store.add_message(user, ChatMessage(role="user", content="x"), idx=0)
        assert store.get_messages(user) == []  # nothing was stored


def test_round_trip_without_a_server() -> None:
    message = ChatMessage(
        role=MessageRole.DEVELOPER, content="rules", additional_kwargs={"id": "d1", "tags": [1, 2]}
    )
    wire = from_llamaindex(message)
    assert wire == Message(
        Role.SYSTEM,
        "rules",
        metadata={
            "llamaindex.role": "developer",
            "llamaindex.additional_kwargs": '{"id": "d1", "tags": [1, 2]}',
        },
    )
    assert to_llamaindex(wire) == message


def test_a_memory_objects_profile_and_clearing_shape_what_the_store_returns(
    server: Server,
) -> None:
    k = key()
    report = "4 degrees in Oslo, rain all day, wind from the north at twenty knots, clearing later."
    stored = [
        Message.assistant("Welcome back."),
        Message.user("Weather in Oslo?"),
        Message.assistant("", tool_calls=[ToolCall("c0", "weather", {"city": "Oslo"})]),
        Message.tool(report, tool_call_id="c0"),
        Message.system("Answer in one line."),
    ]
    shaped = WindowMemory(
        window=20,
        profile="anthropic",
        clear_tool_results=ToolResultClearing(keep_tool_turns=0),
        target=server.target,
    )
    with shaped, BufferMemory(target=server.target) as plain:
        plain.add(stored, thread_id=k)
        store = WindlassChatStore(memory=shaped)
        got = store.get_messages(k)
        assert [m.role.value for m in got] == ["system", "user", "assistant", "tool"]
        assert got[3].content == "[tool result cleared: weather call c0, 25 tokens]"
        # A rewrite would store the view in place of the messages: refused,
        # and the thread is as it was.
        with pytest.raises(NotImplementedError, match="profile or clear_tool_results"):
            store.delete_last_message(k)
        with pytest.raises(NotImplementedError, match="profile or clear_tool_results"):
            asyncio.run(WindlassDBChatStore(memory=shaped).delete_oldest_messages(k, 1))
        assert plain.get(thread_id=k) == stored
