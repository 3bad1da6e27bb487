"""Provider profiles and tool-output clearing as options of get(), against a live server."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable

import pytest
from windlass.memory.v1 import memory_pb2, memory_pb2_grpc

from conftest import Server
from windlass_memory import (
    BufferMemory,
    History,
    Message,
    Profile,
    Role,
    SummaryMemory,
    ToolCall,
    ToolResultClearing,
    WindowMemory,
)


@pytest.fixture
def thread() -> str:
    return f"shaping-{uuid.uuid4().hex}"


# A thread no provider with alternating turns accepts as it is: it starts on
# an assistant turn, has two user messages in a row and a system message last.
OUT_OF_SHAPE = [
    Message.assistant("Hello, how can I help?"),
    Message.user("Hi."),
    Message.user("What is the weather in Oslo?"),
    Message.assistant("", tool_calls=[ToolCall("w1", "weather", {"city": "Oslo"})]),
    Message.tool("rain, 8 C", tool_call_id="w1"),
    Message.system("Answer in one line."),
]

REPORT_2025 = (
    "Revenue fell in the first half of 2025, as orders from the southern region slowed, "
    "and recovered in the second half, when costs fell."
)
REPORT_2024 = (
    "Revenue grew in every quarter of 2024, led by the northern region, "
    "while costs stayed flat and margins widened."
)
TWO_TOOL_TURNS = [
    Message.user("Compare the two reports."),
    Message.assistant("", tool_calls=[ToolCall("r1", "read_report", {"year": 2024})]),
    Message.tool(REPORT_2024, tool_call_id="r1"),
    Message.assistant("", tool_calls=[ToolCall("r2", "read_report", {"year": 2025})]),
    Message.tool(REPORT_2025, tool_call_id="r2"),
]


def shape(messages: list[Message]) -> list[tuple[str, str]]:
    return [(m.role.value, m.content) for m in messages]


def test_anthropic_puts_system_first_starts_on_a_user_turn_and_merges(
    server: Server, thread: str
) -> None:
    with BufferMemory(target=server.target) as m:
        m.add(OUT_OF_SHAPE, thread_id=thread)
        assert len(m.get(thread_id=thread)) == 6  # no profile: stored order
        shaped = m.get(thread_id=thread, profile="anthropic")
    assert shape(shaped) == [
        ("system", "Answer in one line."),
        ("user", "Hi.\n\nWhat is the weather in Oslo?"),
        ("assistant", ""),
        ("tool", "rain, 8 C"),
    ]
    assert shaped[2].tool_calls[0].id == "w1"


def test_openai_chat_keeps_the_system_message_in_place(server: Server, thread: str) -> None:
    with BufferMemory(target=server.target, profile=Profile.OPENAI_CHAT) as m:
        m.add(OUT_OF_SHAPE, thread_id=thread)
        assert shape(m.get(thread_id=thread)) == shape(OUT_OF_SHAPE)
        # A call's profile replaces the object's.
        assert m.get(thread_id=thread, profile="gemini")[0].role is Role.SYSTEM


@pytest.mark.parametrize(
    "name",
    [Profile.BEDROCK_CONVERSE, "bedrock_converse", "PROFILE_BEDROCK_CONVERSE", "Bedrock_Converse"],
)
def test_every_documented_spelling_of_a_profile_is_accepted(
    server: Server, thread: str, name: Profile | str
) -> None:
    with BufferMemory(target=server.target) as m:
        m.add(OUT_OF_SHAPE, thread_id=thread)
        assert shape(m.get(thread_id=thread, profile=name))[0] == ("system", "Answer in one line.")


def test_clearing_returns_placeholders_and_the_counts(server: Server, thread: str) -> None:
    with WindowMemory(window=20, target=server.target) as m:
        m.add(TWO_TOOL_TURNS, thread_id=thread)
        whole = m.get(thread_id=thread)
        cleared = m.get(thread_id=thread, clear_tool_results=ToolResultClearing(keep_tool_turns=1))
    assert isinstance(cleared, History) and isinstance(cleared, list)
    assert (whole.cleared_tool_results, whole.cleared_tool_tokens) == (0, 0)
    assert cleared[2].content.startswith("[tool result cleared: read_report call r1, ")
    assert cleared[2].tool_call_id == "r1" and cleared[2].seq == 3
    assert cleared[4].content == TWO_TOOL_TURNS[4].content  # the newest turn stays whole
    assert cleared.cleared_tool_results == 1
    assert cleared.cleared_tool_tokens > 0
    assert cleared.tokens == whole.tokens - cleared.cleared_tool_tokens


def test_clearing_in_the_objects_strategy_applies_to_every_get_and_a_call_overrides_it(
    server: Server, thread: str
) -> None:
    every = ToolResultClearing(keep_tool_turns=0)
    with WindowMemory(window=20, clear_tool_results=every, target=server.target) as m:
        m.add(TWO_TOOL_TURNS, thread_id=thread)
        assert m.get(thread_id=thread).cleared_tool_results == 2
        kept = m.get(
            thread_id=thread, clear_tool_results=ToolResultClearing(keep_tool_tokens=10_000)
        )
        assert kept.cleared_tool_results == 0
    # The thread was created with the strategy, so a plain Get clears too.
    with BufferMemory(target=server.target) as plain:
        raw = memory_pb2_grpc.MemoryServiceStub(plain._channel)
        response = raw.Get(memory_pb2.GetRequest(thread_id=thread), timeout=10)
    assert response.thread.strategy.clear_tool_results.keep_tool_turns == 0
    assert response.thread.strategy.clear_tool_results.HasField("keep_tool_turns")
    assert response.cleared_tool_results == 2


def test_summary_memory_takes_both_options(server: Server, thread: str) -> None:
    with SummaryMemory(
        window=20,
        profile="anthropic",
        clear_tool_results=ToolResultClearing(keep_tool_turns=0),
        target=server.target,
    ) as m:
        m.add([Message.assistant("Welcome back."), *TWO_TOOL_TURNS], thread_id=thread)
        got = m.get(thread_id=thread)
    assert got[0].content == "Compare the two reports."  # the leading assistant turn dropped
    assert got.cleared_tool_results == 2


def test_async_get_takes_both_options(server: Server, thread: str) -> None:
    async def scenario() -> History:
        with BufferMemory(target=server.target) as m:
            await m.aadd([*OUT_OF_SHAPE[:5], *TWO_TOOL_TURNS[1:]], thread_id=thread)
            return await m.aget(
                thread_id=thread,
                profile="anthropic",
                clear_tool_results=ToolResultClearing(keep_tool_turns=1),
            )

    got = asyncio.run(scenario())
    assert got[0].content == "Hi.\n\nWhat is the weather in Oslo?"
    # r1 cleared; r2 is the newest turn; w1's result is shorter than its
    # placeholder would be, so it stays whole.
    assert got.cleared_tool_results == 1
    assert [m.content for m in got if m.role is Role.TOOL][0] == "rain, 8 C"
    assert got[-1].content == TWO_TOOL_TURNS[4].content


def test_the_largest_limits_the_service_takes_are_accepted(server: Server, thread: str) -> None:
    most = ToolResultClearing(keep_tool_turns=100_000, keep_tool_tokens=10_000_000)
    with BufferMemory(target=server.target) as m:
        m.add(TWO_TOOL_TURNS, thread_id=thread)
        assert m.get(thread_id=thread, clear_tool_results=most).cleared_tool_results == 0


@pytest.mark.parametrize(
    ("make", "error", "names"),
    [
        (lambda: ToolResultClearing(keep_tool_turns=-1), ValueError, "keep_tool_turns"),
        (lambda: ToolResultClearing(keep_tool_tokens=-5), ValueError, "keep_tool_tokens"),
        (lambda: ToolResultClearing(keep_tool_turns=100_001), ValueError, "keep_tool_turns"),
        (lambda: ToolResultClearing(keep_tool_tokens=10_000_001), ValueError, "keep_tool_tokens"),
        (lambda: ToolResultClearing(keep_tool_turns=True), TypeError, "keep_tool_turns"),
        (lambda: ToolResultClearing(keep_tool_turns="2"), TypeError, "keep_tool_turns"),
        (lambda: ToolResultClearing(), ValueError, "keep_tool_turns, keep_tool_tokens"),
    ],
)
def test_bad_clearing_values_are_refused_at_construction(
    make: Callable[[], object], error: type[Exception], names: str
) -> None:
    with pytest.raises(error, match=names):
        make()


def test_bad_values_are_refused_before_any_call(server: Server, thread: str) -> None:
    with BufferMemory(target=server.target) as m:
        m.add(TWO_TOOL_TURNS, thread_id=thread)
        # The service would answer INVALID_ARGUMENT (a MemoryServiceError):
        # these are the client's own errors, raised before the call.
        with pytest.raises(ValueError, match=r"^profile: unknown profile 'antropic'; expected"):
            m.get(thread_id=thread, profile="antropic")
        with pytest.raises(TypeError, match=r"^profile: expected a Profile"):
            m.get(thread_id=thread, profile=3)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match=r"^clear_tool_results: expected ToolResultClearing"):
            m.get(thread_id=thread, clear_tool_results={"keep_tool_turns": 1})  # type: ignore
        with pytest.raises(ValueError, match=r"^profile: unknown profile 'openai'"):
            asyncio.run(m.aget(thread_id=thread, profile="openai"))
        assert len(m.get(thread_id=thread)) == 5  # nothing changed
    with pytest.raises(ValueError, match=r"^profile: unknown profile"):
        WindowMemory(window=5, profile="claude", target=server.target)
    with pytest.raises(TypeError, match=r"^clear_tool_results: expected"):
        WindowMemory(window=5, clear_tool_results=2, target=server.target)  # type: ignore[arg-type]


def test_a_profile_the_client_knows_is_one_the_service_knows() -> None:
    # Every member maps to a proto value, and every proto value but
    # UNSPECIFIED has a member: the two lists cannot drift apart.
    from windlass_memory._shaping import profile_value

    numbers = {profile_value(p) for p in Profile}
    assert numbers == set(memory_pb2.Profile.values()) - {memory_pb2.PROFILE_UNSPECIFIED}
