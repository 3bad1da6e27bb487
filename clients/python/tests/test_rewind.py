"""rewind / pop against a live server: what is dropped, the errors, concurrency."""

from __future__ import annotations

import asyncio
import uuid

import grpc
import pytest

from conftest import Server
from windlass_memory import BufferMemory, MemoryServiceError, Message, RewindResult, SummaryMemory


@pytest.fixture
def thread() -> str:
    return f"rw-{uuid.uuid4().hex}"


def contents(messages: list[Message]) -> list[str]:
    return [m.content for m in messages]


def test_rewind_drops_the_messages_after_to_seq(server: Server, thread: str) -> None:
    with BufferMemory(target=server.target) as m:
        m.add([Message.user(str(i)) for i in range(1, 5)], thread_id=thread)
        result = m.rewind(thread, 2)
        assert result == RewindResult(thread, last_seq=2, removed_count=2, summary_dropped=False)
        assert contents(m.get(thread_id=thread)) == ["1", "2"]
        m.add(Message.user("3b"), thread_id=thread)
        assert [(x.seq, x.content) for x in m.get(thread_id=thread)][-1] == (3, "3b")


def test_expected_last_seq_mismatch_is_aborted_and_drops_nothing(
    server: Server, thread: str
) -> None:
    with BufferMemory(target=server.target) as m:
        m.add([Message.user("1"), Message.user("2")], thread_id=thread)
        with pytest.raises(MemoryServiceError) as raised:
            m.rewind(thread, 1, expected_last_seq=1)
        assert raised.value.code is grpc.StatusCode.ABORTED
        assert raised.value.details.startswith("expected_last_seq:")
        assert contents(m.get(thread_id=thread)) == ["1", "2"]
        assert m.rewind(thread, 1, expected_last_seq=2).removed_count == 1


def test_a_retried_request_id_drops_nothing_more(server: Server, thread: str) -> None:
    with BufferMemory(target=server.target) as m:
        m.add([Message.user(str(i)) for i in range(1, 5)], thread_id=thread)
        first = m.rewind(thread, 3, request_id="once")
        again = m.rewind(thread, 3, request_id="once")
        assert first.removed_count == again.removed_count == 1
        assert contents(m.get(thread_id=thread)) == ["1", "2", "3"]


def test_errors_name_the_field_and_change_nothing(server: Server, thread: str) -> None:
    with BufferMemory(target=server.target) as m:
        with pytest.raises(MemoryServiceError) as raised:
            m.rewind(thread, 0)
        assert raised.value.code is grpc.StatusCode.NOT_FOUND
        m.add(Message.user("1"), thread_id=thread)
        with pytest.raises(MemoryServiceError) as raised:
            m.rewind(thread, 5)
        assert raised.value.code is grpc.StatusCode.OUT_OF_RANGE
        assert raised.value.details.startswith("to_seq:")
        with pytest.raises(ValueError, match="to_seq"):
            m.rewind(thread, -1)
        with pytest.raises(TypeError, match="expected_last_seq"):
            m.rewind(thread, 0, expected_last_seq="1")  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="thread_id"):
            m.rewind(None, 0)  # type: ignore[arg-type]
        assert contents(m.get(thread_id=thread)) == ["1"]


def test_pop_returns_the_newest_message_until_none_is_left(server: Server, thread: str) -> None:
    with BufferMemory(max_messages=1, target=server.target) as m:
        m.add(
            [Message.user("q"), Message.assistant("a", tool_calls=[]), Message.user("q2")],
            thread_id=thread,
        )
        popped = m.pop(thread_id=thread)
        assert popped == Message.user("q2") and popped.seq == 3
        assert m.pop(thread_id=thread) == Message.assistant("a")
        assert m.pop(thread_id=thread) == Message.user("q")
        assert m.pop(thread_id=thread) is None
        assert m.pop(thread_id=f"{thread}-none") is None


def test_rewind_below_the_summary_drops_it(model_server: Server, fake_model, thread: str) -> None:
    fake_model.replies = ["the summary"]
    with SummaryMemory(window=2, summarize_every=2, target=model_server.target) as m:
        m.add([Message.user(str(i)) for i in range(1, 5)], thread_id=thread)
        assert m.summary(thread) == "the summary"
        result = m.rewind(thread, 1)
        assert result.summary_dropped and result.removed_count == 3
        assert contents(m.get(thread_id=thread)) == ["1"]


def test_async_rewind_and_pop(server: Server, thread: str) -> None:
    async def scenario() -> None:
        with BufferMemory(target=server.target) as m:
            await m.aadd([Message.user("1"), Message.user("2"), Message.user("3")], thread_id=thread)
            assert (await m.arewind(thread, 2)).last_seq == 2
            assert (await m.apop(thread_id=thread)) == Message.user("2")
            assert contents(await m.aget(thread_id=thread)) == ["1"]

    asyncio.run(scenario())


def test_concurrent_pops_each_take_a_different_message(server: Server, thread: str) -> None:
    with BufferMemory(target=server.target) as m:
        m.add([Message.user(str(i)) for i in range(1, 7)], thread_id=thread)

    async def pop_all() -> list[Message | BaseException | None]:
        memories = [BufferMemory(target=server.target) for _ in range(3)]
        try:
            pops = (x.apop(thread_id=thread) for x in memories)
            return await asyncio.gather(*pops, return_exceptions=True)
        finally:
            for x in memories:
                x.close()

    popped = asyncio.run(pop_all())
    # Each pop either took its own message or lost every try to the others
    # (ABORTED after 3 tries); none dropped a message it did not return.
    with BufferMemory(target=server.target) as m:
        left = contents(m.get(thread_id=thread))
    taken = [p.content for p in popped if isinstance(p, Message)]
    lost = [p for p in popped if not isinstance(p, Message)]
    assert all(isinstance(e, MemoryServiceError) and e.code is grpc.StatusCode.ABORTED for e in lost)
    assert taken, "every pop lost every race"
    assert sorted(taken + left) == ["1", "2", "3", "4", "5", "6"]
    assert left == ["1", "2", "3", "4", "5", "6"][: len(left)]


def test_newest_reads_stored_messages_past_the_objects_view(
    model_server: Server, fake_model, thread: str
) -> None:
    fake_model.replies = ["folded"]
    with SummaryMemory(window=1, summarize_every=1, target=model_server.target) as m:
        m.add([Message.user(str(i)) for i in range(1, 5)], thread_id=thread)
        assert contents(m.get(thread_id=thread))[1:] == ["4"]  # the summary, then the window
        assert contents(m.newest(3, thread_id=thread)) == ["2", "3", "4"]
        assert [x.seq for x in m.newest(10, thread_id=thread)] == [1, 2, 3, 4]
        assert m.newest(0, thread_id=thread) == []
        assert asyncio.run(m.anewest(1, thread_id=thread)) == [Message.user("4")]
        with pytest.raises(ValueError, match="count"):
            m.newest(-1, thread_id=thread)
