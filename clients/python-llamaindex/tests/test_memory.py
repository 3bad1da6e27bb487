"""WindlassDBChatStore under LlamaIndex's current Memory, with a live server.

A real FunctionAgent (LlamaIndex's workflow agent) over a scripted
MockFunctionCallingLLM, which returns the replies given to it (tool calls
included) and records every prompt, runs the real tools; SimpleChatEngine
runs over MockLLMWithChatMemoryOfLastCall (it echoes its prompt). Each test
checks what the LLM was given and what the service holds.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from typing import Any

import pytest
from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.base.llms.types import ChatMessage, MessageRole, TextBlock, ToolCallBlock
from llama_index.core.chat_engine import SimpleChatEngine
from llama_index.core.llms.mock import MockFunctionCallingLLM, MockLLMWithChatMemoryOfLastCall
from llama_index.core.memory import Memory
from llama_index.core.storage.chat_store.base_db import MessageStatus
from llama_index.core.tools import FunctionTool

from live_server import Server
from windlass_memory import BufferMemory, Role, SummaryMemory, ToolCall, WindowMemory
from windlass_memory_llamaindex import WindlassDBChatStore


def session() -> str:
    return f"li-mem-{uuid.uuid4().hex}"


class Script:
    """A response generator for MockFunctionCallingLLM: the next reply, recording each prompt."""

    def __init__(self, replies: list[ChatMessage]) -> None:
        self.replies = list(replies)
        self.prompts: list[list[ChatMessage]] = []

    def __call__(self, messages: Sequence[ChatMessage], **_: Any) -> ChatMessage:
        self.prompts.append(list(messages))
        return self.replies.pop(0)


def calls(*pairs: tuple[str, str]) -> ChatMessage:
    blocks = [
        ToolCallBlock(tool_call_id=id, tool_name="weather", tool_kwargs={"city": city})
        for city, id in pairs
    ]
    return ChatMessage(role=MessageRole.ASSISTANT, blocks=blocks)


def say(text: str) -> ChatMessage:
    return ChatMessage(role=MessageRole.ASSISTANT, blocks=[TextBlock(text=text)])


def weather(city: str) -> str:
    """The temperature in a city."""
    return f"{len(city)} degrees in {city}"


def shape(messages: Sequence[ChatMessage]) -> list[tuple[str, str]]:
    return [
        (m.role.value, m.content or f"calls {[b.tool_call_id for b in m.blocks]}")
        for m in messages
    ]


def test_a_function_agent_keeps_tool_calling_runs_in_the_thread(server: Server) -> None:
    sid = session()
    script = Script(
        [calls(("Oslo", "c1")), say("4 degrees in Oslo."), calls(("Lima", "c2")), say("Lima: 4.")]
    )
    llm = MockFunctionCallingLLM(response_generator=script)

    async def scenario(client: BufferMemory) -> list[str]:
        agent = FunctionAgent(
            tools=[FunctionTool.from_defaults(weather)], llm=llm, system_prompt="Be brief."
        )
        answers = []
        for question in ("Weather in Oslo?", "And Lima?"):
            # A new Memory each run, as another process would make: the thread is the history.
            memory = Memory.from_defaults(
                session_id=sid, chat_store=WindlassDBChatStore(memory=client)
            )
            answers.append(str(await agent.run(question, memory=memory)))
        return answers

    with BufferMemory(target=server.target) as client:
        answers = asyncio.run(scenario(client))
        stored = client.get(thread_id=sid)

    assert answers == ["4 degrees in Oslo.", "Lima: 4."]
    assert [(m.role, m.content, m.tool_call_id) for m in stored] == [
        (Role.USER, "Weather in Oslo?", None),
        (Role.ASSISTANT, "", None),
        (Role.TOOL, "4 degrees in Oslo", "c1"),
        (Role.ASSISTANT, "4 degrees in Oslo.", None),
        (Role.USER, "And Lima?", None),
        (Role.ASSISTANT, "", None),
        (Role.TOOL, "4 degrees in Lima", "c2"),
        (Role.ASSISTANT, "Lima: 4.", None),
    ]
    assert list(stored[1].tool_calls) == [ToolCall("c1", "weather", {"city": "Oslo"})]
    # The second run's first LLM call got the first run back from the service.
    assert shape(script.prompts[2]) == [
        ("system", "Be brief."),
        ("user", "Weather in Oslo?"),
        ("assistant", "calls ['c1']"),
        ("tool", "4 degrees in Oslo"),
        ("assistant", "4 degrees in Oslo."),
        ("user", "And Lima?"),
    ]


def test_a_chat_engine_over_a_summary_thread_gets_the_summary(server: Server) -> None:
    sid = session()
    llm = MockLLMWithChatMemoryOfLastCall()
    with SummaryMemory(window=2, summarize_every=2, target=server.target) as client:
        memory = Memory.from_defaults(session_id=sid, chat_store=WindlassDBChatStore(memory=client))
        engine = SimpleChatEngine.from_defaults(llm=llm, memory=memory)
        for text in ("My name is Ana.", "I live in Oslo.", "What do you know?"):
            engine.chat(text)
        prompt = llm.last_chat_messages
    assert prompt is not None
    # The summary (the server's extractive summariser) of what the window left
    # out, then the newest messages verbatim, the question last.
    assert prompt[0].role is MessageRole.SYSTEM
    assert "My name is Ana." in (prompt[0].content or "")
    assert all(m.content != "My name is Ana." for m in prompt[1:])
    assert (prompt[-1].role, prompt[-1].content) == (MessageRole.USER, "What do you know?")


def test_a_window_bounds_what_memory_recalls(server: Server) -> None:
    sid = session()
    with WindowMemory(window=2, target=server.target) as client:
        store = WindlassDBChatStore(memory=client)
        history = [ChatMessage(role="user", content=f"m{i}") for i in range(5)]
        memory = Memory.from_defaults(session_id=sid, chat_history=history, chat_store=store)
        assert [m.content for m in memory.get()] == ["m3", "m4"]
        memory.put(ChatMessage(role="assistant", content="m5"))
        assert [m.content for m in memory.get()] == ["m4", "m5"]
        # get_all: every stored message; nothing is ever archived.
        assert [m.content for m in memory.get_all()] == [f"m{i}" for i in range(6)]
        assert memory.get_all(status=MessageStatus.ARCHIVED) == []
        memory.reset()
        assert memory.get_all() == []


def test_the_store_api(server: Server) -> None:
    sid = session()

    async def scenario(store: WindlassDBChatStore) -> None:
        await store.set_messages(sid, [ChatMessage(role="user", content=f"m{i}") for i in range(4)])
        assert await store.count_messages(sid) == 4
        assert [m.content for m in await store.get_messages(sid, limit=2, offset=1)] == [
            "m1",
            "m2",
        ]
        assert (await store.delete_message(sid, 1)).content == "m1"  # type: ignore[union-attr]
        assert await store.delete_message(sid, 9) is None
        assert [m.content for m in await store.delete_oldest_messages(sid, 1)] == ["m0"]
        assert [m.content for m in await store.get_messages(sid)] == ["m2", "m3"]
        assert sid in await store.get_keys()
        with pytest.raises(NotImplementedError, match="archives nothing"):
            await store.add_message(sid, ChatMessage(content="x"), status=MessageStatus.ARCHIVED)
        await store.delete_messages(sid, status=MessageStatus.ARCHIVED)  # nothing to delete
        assert await store.count_messages(sid) == 2
        await store.delete_messages(sid)
        assert await store.get_messages(sid, status=None) == []

    with BufferMemory(target=server.target) as client:
        asyncio.run(scenario(WindlassDBChatStore(memory=client)))


def test_over_the_token_limit_memory_is_told_to_use_a_bounding_strategy(server: Server) -> None:
    sid = session()
    with BufferMemory(target=server.target) as client:
        memory = Memory.from_defaults(
            session_id=sid, chat_store=WindlassDBChatStore(memory=client), token_limit=50
        )
        with pytest.raises(ValueError, match="use a WindowMemory or SummaryMemory"):
            for i in range(20):
                memory.put(ChatMessage(role="user", content=f"message number {i} " * 3))
        # What was put is stored; only the archiving was refused.
        assert client.get(thread_id=sid)[-1].content.startswith("message number")


def test_summary_threads_refuse_rewriting_single_messages(server: Server) -> None:
    with SummaryMemory(target=server.target) as client:
        store = WindlassDBChatStore(memory=client)
        with pytest.raises(NotImplementedError, match="summary cannot be rewritten"):
            asyncio.run(store.delete_oldest_messages(session(), 1))
    with pytest.raises(TypeError, match="memory: expected a windlass_memory"):
        WindlassDBChatStore(memory="127.0.0.1:50051")  # type: ignore[arg-type]
