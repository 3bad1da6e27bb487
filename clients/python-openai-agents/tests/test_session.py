"""WindlassSession driven by the SDK's own Runner.run, with a scripted local model."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import grpc
import pytest
from agents import Agent, RunConfig, Runner, function_tool, set_tracing_disabled
from agents.items import ModelResponse
from agents.memory import Session, SessionSettings
from agents.models.interface import Model
from agents.usage import Usage
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
    ResponseReasoningItem,
)
from openai.types.responses.response_reasoning_item import Summary

from live_server import Server, start_server
from windlass_memory import BufferMemory, MemoryServiceError, SummaryMemory, ToolResultClearing
from windlass_memory_openai_agents import ITEM_KEY, WindlassSession

set_tracing_disabled(True)
RUN_CONFIG = RunConfig(tracing_disabled=True)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    running = start_server(tmp_path_factory.mktemp("server") / "server.log")
    yield running
    running.stop()


@pytest.fixture
def session_id() -> str:
    return f"agents-{uuid.uuid4().hex}"


def text(item_id: str, words: str) -> ResponseOutputMessage:
    return ResponseOutputMessage(
        id=item_id,
        type="message",
        role="assistant",
        status="completed",
        content=[ResponseOutputText(text=words, type="output_text", annotations=[])],
    )


class ScriptedModel(Model):
    """Answers each call with the next scripted output, recording the input it was given."""

    def __init__(self, steps: list[list[Any]]) -> None:
        self.steps = list(steps)
        self.inputs: list[list[Any]] = []

    async def get_response(self, system_instructions, input, *args: Any, **kwargs: Any):  # noqa: A002
        self.inputs.append(json.loads(json.dumps(input, default=str)))
        if not self.steps:
            raise AssertionError("the model was called more often than scripted")
        return ModelResponse(output=self.steps.pop(0), usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise AssertionError("these tests run the agent without streaming")


weather_calls: list[str] = []


@function_tool
def weather(city: str) -> str:
    """The weather in a city."""
    weather_calls.append(city)
    return f"3 degrees in {city}"


def agent_with(model: ScriptedModel) -> Agent:
    return Agent(name="forecaster", instructions="Answer briefly.", model=model, tools=[weather])


def tool_turn() -> list[list[Any]]:
    return [
        [
            ResponseReasoningItem(
                id="rs_1",
                type="reasoning",
                summary=[Summary(text="The user wants the weather.", type="summary_text")],
                encrypted_content="opaque-reasoning-state",
            ),
            ResponseFunctionToolCall(
                id="fc_1", call_id="call_1", type="function_call", name="weather",
                arguments='{"city": "Oslo"}', status="completed",
            ),
        ],
        [text("msg_1", "3 degrees in Oslo: bring a coat.")],
    ]


def test_it_is_an_sdk_session(server: Server, session_id: str) -> None:
    assert isinstance(WindlassSession(session_id, target=server.target), Session)


def test_a_second_turn_sees_the_first_turns_items(server: Server, session_id: str) -> None:
    model = ScriptedModel([*tool_turn(), [text("msg_2", "Milder tomorrow.")]])
    session = WindlassSession(session_id, target=server.target)
    agent = agent_with(model)

    async def two_turns() -> None:
        first = await Runner.run(agent, "Weather in Oslo?", session=session, run_config=RUN_CONFIG)
        assert first.final_output == "3 degrees in Oslo: bring a coat."
        second = await Runner.run(agent, "And tomorrow?", session=session, run_config=RUN_CONFIG)
        assert second.final_output == "Milder tomorrow."

    weather_calls.clear()
    asyncio.run(two_turns())
    assert weather_calls == ["Oslo"]
    second_input = model.inputs[2]
    kinds = [item.get("type", "message") for item in second_input]
    assert kinds == ["message", "reasoning", "function_call", "function_call_output",
                     "message", "message"]
    assert second_input[0]["content"] == "Weather in Oslo?"
    assert second_input[1]["id"] == "rs_1"
    assert second_input[1]["encrypted_content"] == "opaque-reasoning-state"
    assert second_input[2]["call_id"] == "call_1" and second_input[2]["id"] == "fc_1"
    assert second_input[3]["call_id"] == "call_1"
    assert "3 degrees in Oslo" in str(second_input[3]["output"])
    assert second_input[-1]["content"] == "And tomorrow?"

    # What the server's own readers see: a chat transcript with the tool call paired.
    with BufferMemory(target=server.target) as memory:
        stored = memory.get(thread_id=session_id)
    assert [(m.role.value, m.content) for m in stored[:2]] == [
        ("user", "Weather in Oslo?"),
        ("assistant", "[reasoning] The user wants the weather."),
    ]
    assert stored[2].tool_calls[0].id == "call_1" and stored[2].tool_calls[0].name == "weather"
    assert stored[3].role.value == "tool" and stored[3].tool_call_id == "call_1"
    assert stored[4].content == "3 degrees in Oslo: bring a coat."
    assert all(ITEM_KEY in m.metadata for m in stored)
    session.close()


def test_items_of_every_type_round_trip_unchanged(server: Server, session_id: str) -> None:
    items: list[Any] = [
        {"role": "developer", "content": "Be terse."},
        {"role": "user", "content": [{"type": "input_text", "text": "Look at this"},
                                     {"type": "input_image", "image_url": "data:x", "detail": "low"}]},
        {"type": "reasoning", "id": "rs_9", "summary": [], "encrypted_content": "e" * 100},
        {"type": "function_call", "id": "fc_9", "call_id": "c9", "name": "f",
         "arguments": "{\"a\": [1, 2]}", "status": "completed"},
        {"type": "function_call_output", "call_id": "c9",
         "output": [{"type": "input_text", "text": "done"}]},
        {"type": "web_search_call", "id": "ws_1", "status": "completed",
         "action": {"type": "search", "query": "q"}},
        {"type": "message", "id": "msg_9", "role": "assistant", "status": "completed",
         "content": [{"type": "output_text", "text": "ok", "annotations": []}]},
    ]
    session = WindlassSession(session_id, target=server.target)

    async def scenario() -> None:
        await session.add_items(items)
        assert await session.get_items() == items
        assert await session.get_items(limit=2) == items[-2:]
        assert await session.get_items(limit=0) == []
        assert await session.get_items(limit=-1) == items  # the SDK's SQLiteSession: no limit
        assert await session.pop_item() == items[-1]
        assert await session.get_items(limit=1) == [items[-2]]

    asyncio.run(scenario())
    with BufferMemory(target=server.target) as memory:
        stored = memory.get(thread_id=session_id)
    assert [m.content for m in stored] == [
        "Be terse.", "Look at this\n[input_image]", "[reasoning]", "", "done", "[web_search_call]",
    ]
    assert [m.role.value for m in stored] == [
        "system", "user", "assistant", "assistant", "tool", "assistant",
    ]
    session.close()


def test_pop_clear_and_settings(server: Server, session_id: str) -> None:
    session = WindlassSession(
        session_id, target=server.target, session_settings=SessionSettings(limit=2)
    )

    async def scenario() -> None:
        assert await session.pop_item() is None
        await session.add_items([{"role": "user", "content": str(i)} for i in range(4)])
        assert [i["content"] for i in await session.get_items()] == ["2", "3"]
        assert [i["content"] for i in await session.get_items(limit=3)] == ["1", "2", "3"]
        assert (await session.pop_item()) == {"role": "user", "content": "3"}
        await session.clear_session()
        assert await session.get_items() == []
        assert await session.pop_item() is None

    asyncio.run(scenario())
    session.close()


def test_bad_items_are_refused_before_anything_is_stored(server: Server, session_id: str) -> None:
    session = WindlassSession(session_id, target=server.target)

    async def scenario() -> None:
        with pytest.raises(ValueError, match=r"items\[1\]\.call_id"):
            await session.add_items([{"role": "user", "content": "a"},
                                     {"type": "function_call_output", "output": "x"}])
        with pytest.raises(TypeError, match=r"items\[0\]"):
            await session.add_items(["just text"])
        assert await session.get_items() == []

    asyncio.run(scenario())
    with pytest.raises(TypeError, match="session_id"):
        WindlassSession("", target=server.target)
    session.close()


def test_pop_never_removes_an_item_added_by_another_run(
    server: Server, session_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = WindlassSession(session_id, target=server.target)
    other = WindlassSession(session_id, target=server.target)
    asyncio.run(session.add_items([{"role": "user", "content": "mine"}]))
    # Another run adds an item between this pop's read and its Rewind: the
    # Rewind's expected_last_seq refuses it, and the pop takes the new newest.
    real_call = BufferMemory._call

    def racing_call(self: BufferMemory, method: Any, request: Any) -> Any:
        if type(request).__name__ == "RewindRequest" and not racing_call.done:
            racing_call.done = True
            asyncio.run(other.add_items([{"role": "user", "content": "theirs"}]))
        return real_call(self, method, request)

    racing_call.done = False  # type: ignore[attr-defined]
    monkeypatch.setattr(BufferMemory, "_call", racing_call)
    popped = session.memory.pop(thread_id=session_id)
    assert popped is not None and popped.content == "theirs"
    assert [i["content"] for i in asyncio.run(session.get_items())] == ["mine"]
    session.close()
    other.close()


def test_rewind_errors_reach_the_caller(server: Server, session_id: str) -> None:
    with BufferMemory(target=server.target) as memory, pytest.raises(MemoryServiceError) as raised:
        memory.rewind(session_id, 0)
    assert raised.value.code is grpc.StatusCode.NOT_FOUND


def test_a_summary_thread_session(server: Server, session_id: str) -> None:
    # The server's default summariser (extractive) folds what leaves the window.
    memory = SummaryMemory(window=2, summarize_every=2, target=server.target)
    session = WindlassSession(session_id, memory=memory)
    model = ScriptedModel([*tool_turn(), [text("msg_2", "Milder tomorrow.")]])

    async def two_turns() -> None:
        agent = agent_with(model)
        await Runner.run(agent, "Weather in Oslo?", session=session, run_config=RUN_CONFIG)
        await Runner.run(agent, "And tomorrow?", session=session, run_config=RUN_CONFIG)

    asyncio.run(two_turns())
    second_input = model.inputs[2]
    assert second_input[0]["role"] == "system"
    assert second_input[0]["content"].startswith("Summary of the earlier conversation:")
    # The window of 2 keeps the tool result with its call (the server never
    # splits a call from its result), then the new user message.
    assert [i.get("type", "message") for i in second_input[1:]] == [
        "function_call", "function_call_output", "message", "message",
    ]
    assert memory.summary(session_id) != ""
    items = asyncio.run(session.get_items(limit=10))
    assert len(items) == 7 and items[0]["content"] == "Weather in Oslo?"
    memory.close()


def test_a_memory_object_that_shapes_its_reads_is_refused(server: Server, session_id: str) -> None:
    shaping: list[dict[str, Any]] = [
        {"profile": "anthropic"},
        {"clear_tool_results": ToolResultClearing(keep_tool_turns=1)},
    ]
    for options in shaping:
        with BufferMemory(target=server.target, **options) as memory:
            with pytest.raises(ValueError, match="memory: a memory object with a profile"):
                WindlassSession(session_id, memory=memory)
