"""The async twins: aadd, aget, aclear, athreads, asummary.

Run with asyncio.run, as an application would, and deliberately from more
than one event loop on the same memory object.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading

import grpc
import pytest

from conftest import FakeModel, Server
from windlass_memory import (
    BufferMemory,
    MemoryServiceError,
    Message,
    SummaryMemory,
    WindowMemory,
)


def test_async_twins_of_the_documented_examples(fresh_server: Server) -> None:
    async def scenario() -> None:
        m = WindowMemory(window=2, target=fresh_server.target)
        await m.aadd([Message.user("one"), Message.user("two"), Message.user("three")])
        assert [msg.content for msg in await m.aget()] == ["two", "three"]
        await m.aadd(Message.user("hi"), thread_id="a")
        assert (await m.aget(thread_id="a"))[0].content == "hi"
        assert await m.aget(thread_id="b") == []
        assert await m.athreads() == ["a", "default"]
        await m.aclear(thread_id="a")
        assert await m.athreads() == ["default"]
        await m.aclear()
        assert await m.athreads() == []
        m.close()

    asyncio.run(scenario())


def test_one_memory_object_serves_several_event_loops(fresh_server: Server) -> None:
    with BufferMemory(target=fresh_server.target) as m:
        asyncio.run(m.aadd(Message.user("from loop 1")))
        asyncio.run(m.aadd(Message.user("from loop 2")))
        recalled = asyncio.run(m.aget())
        assert [x.content for x in recalled] == ["from loop 1", "from loop 2"]


def test_concurrent_adds_keep_every_message(fresh_server: Server) -> None:
    async def scenario(m: BufferMemory) -> list[Message]:
        await asyncio.gather(*(m.aadd(Message.user(str(i))) for i in range(50)))
        return await m.aget()

    with BufferMemory(target=fresh_server.target) as m:
        recalled = asyncio.run(scenario(m))
    assert sorted(int(x.content) for x in recalled) == list(range(50))
    assert [x.seq for x in recalled] == list(range(1, 51))


def test_asummary(model_server: Server, fake_model: FakeModel) -> None:
    fake_model.replies = ["User greeted twice."]

    async def scenario() -> None:
        with SummaryMemory(window=2, summarize_every=2, target=model_server.target) as m:
            await m.aadd([Message.user(f"msg {i}") for i in range(6)])
            recalled = await m.aget()
            assert recalled[0].role.value == "system"
            assert await m.asummary() == "User greeted twice."

    asyncio.run(scenario())


def test_async_errors_are_memory_service_errors(server: Server) -> None:
    async def scenario() -> None:
        with BufferMemory(target=server.target) as m:
            await m.aadd(Message("tool", "no call id"), thread_id="async-bad")

    with pytest.raises(MemoryServiceError) as refused:
        asyncio.run(scenario())
    assert refused.value.code is grpc.StatusCode.INVALID_ARGUMENT


def test_cancelling_the_task_cancels_the_call() -> None:
    # A loopback socket that accepts connections and never speaks HTTP/2: the
    # call hangs until its 60 s deadline unless cancelling the task ends it.
    with socket.create_server(("127.0.0.1", 0)) as silent:
        target = f"127.0.0.1:{silent.getsockname()[1]}"
        connected = threading.Event()
        held: list[socket.socket] = []

        def accept() -> None:
            with contextlib.suppress(OSError):
                held.append(silent.accept()[0])
                connected.set()

        threading.Thread(target=accept, daemon=True).start()

        async def scenario() -> None:
            with BufferMemory(target=target, timeout=60) as m:
                task = asyncio.create_task(m.aget())
                # The call is under way once its connection is made.
                loop = asyncio.get_running_loop()
                assert await loop.run_in_executor(None, connected.wait, 10)
                assert not task.done()
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task

        try:
            asyncio.run(asyncio.wait_for(scenario(), timeout=20))
        finally:
            for conn in held:
                conn.close()
