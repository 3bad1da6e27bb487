"""The original module's documented examples, run through the service.

First all of them as the original's documentation writes them (doctests, the
import lines switched to the drop-in's), in order, in one process, against
one server, as a program that uses the original would run them: its objects
share the threads "default", "a" and "b" there, and each must still read
with its own window. Then each on a server of its own, with closer checks.
"""

from __future__ import annotations

import doctest
import json

import pytest

from conftest import FakeModel, Server
from windlass_memory import BufferMemory, Message, Role, SummaryMemory, WindowMemory

# The examples of windlass.providers.memory.conversation's documentation, in
# its order (module, BufferMemory, WindowMemory, SummaryMemory), verbatim but
# for the imports: windlass_memory for windlass.core.types, and the FakeLLM
# defined below for windlass.providers.llm.fake.
ORIGINAL_EXAMPLES = """
>>> from windlass_memory import Message, WindowMemory
>>> m = WindowMemory(window=2)
>>> m.add([Message.user("one"), Message.user("two"), Message.user("three")])
>>> [msg.content for msg in m.get()]
['two', 'three']

>>> from windlass_memory import BufferMemory, Message
>>> m = BufferMemory()
>>> m.add(Message.user("hi"), thread_id="a")
>>> m.get(thread_id="a")[0].content
'hi'
>>> m.get(thread_id="b")
[]

>>> from windlass_memory import Message, WindowMemory
>>> m = WindowMemory(window=1)
>>> m.add([Message.user("a"), Message.user("b")])
>>> [x.content for x in m.get()]
['b']

>>> from windlass_memory import Message, SummaryMemory
>>> m = SummaryMemory(
...     llm=FakeLLM(responses=["User greeted twice."]),
...     window=2,
...     summarize_every=2,
... )
>>> m.add([Message.user(f"msg {i}") for i in range(6)])
>>> recalled = m.get()
>>> recalled[0].role.value
'system'
"""


def test_the_original_examples_in_order_in_one_process_on_one_server(
    model_server: Server, fake_model: FakeModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The examples name no target: the objects take it from the environment.
    monkeypatch.setenv("WINDLASS_MEMORY_TARGET", model_server.target)

    class FakeLLM:
        """The original's scripted model: its replies go to the fake model the server calls."""

        def __init__(self, *, responses: list[str]) -> None:
            self.responses = responses
            fake_model.replies = list(responses)

    namespace: dict[str, object] = {"FakeLLM": FakeLLM}
    test = doctest.DocTestParser().get_doctest(
        ORIGINAL_EXAMPLES, namespace, "windlass.providers.memory.conversation", None, 0
    )
    assert len(test.examples) == 18
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    runner.run(test, clear_globs=False)
    assert runner.summarize(verbose=False) == doctest.TestResults(failed=0, attempted=18)

    # Beyond what the documentation prints, the last Get is the original's
    # whole result: the summary the model wrote, then the newest two messages.
    recalled = test.globs["recalled"]
    assert isinstance(recalled, list)
    assert [(m.role.value, m.content) for m in recalled] == [
        ("system", "Summary of the earlier conversation:\nUser greeted twice."),
        ("user", "msg 4"),
        ("user", "msg 5"),
    ]
    assert len(fake_model.requests) == 1
    # Every example's object still reads its own view of the shared "default".
    with WindowMemory(window=1) as one, WindowMemory(window=2) as two, BufferMemory() as whole:
        assert [x.content for x in one.get()] == ["msg 5"]
        assert [x.content for x in two.get()] == ["msg 4", "msg 5"]
        assert len(whole.get()) == 11


def test_module_example_window_of_two(fresh_server: Server) -> None:
    with WindowMemory(window=2, target=fresh_server.target) as m:
        m.add([Message.user("one"), Message.user("two"), Message.user("three")])
        assert [msg.content for msg in m.get()] == ["two", "three"]


def test_buffer_memory_example(fresh_server: Server) -> None:
    with BufferMemory(target=fresh_server.target) as m:
        m.add(Message.user("hi"), thread_id="a")
        assert m.get(thread_id="a")[0].content == "hi"
        assert m.get(thread_id="b") == []


def test_window_memory_example(fresh_server: Server) -> None:
    with WindowMemory(window=1, target=fresh_server.target) as m:
        m.add([Message.user("a"), Message.user("b")])
        assert [x.content for x in m.get()] == ["b"]


@pytest.mark.parametrize("window", [0, -1])
def test_window_memory_refuses_a_window_that_is_not_positive(window: int) -> None:
    # Raised by the constructor, before any call, as in the original.
    with pytest.raises(ValueError, match="window must be positive"):
        WindowMemory(window=window, target="127.0.0.1:1")


def test_summary_memory_example(model_server: Server, fake_model: FakeModel) -> None:
    fake_model.replies = ["User greeted twice."]
    with SummaryMemory(
        llm=None,  # the server's default summariser: here the fake model
        window=2,
        summarize_every=2,
        target=model_server.target,
    ) as m:
        m.add([Message.user(f"msg {i}") for i in range(6)])
        recalled = m.get()
        assert recalled[0].role.value == "system"
        assert recalled[0].content == "Summary of the earlier conversation:\nUser greeted twice."
        # README, Semantics (deliberate difference): with this example the result is the original's: the
        # summary, then messages 4 and 5.
        assert [msg.content for msg in recalled[1:]] == ["msg 4", "msg 5"]
        assert m.summary() == "User greeted twice."
        assert len(fake_model.requests) == 1
        prompt = json.dumps(fake_model.requests[0]["messages"])
        assert "msg 0" in prompt and "msg 3" in prompt and "msg 4" not in prompt


def test_summary_memory_names_a_configured_summariser(
    model_server: Server, fake_model: FakeModel
) -> None:
    fake_model.replies = ["never asked"]
    # "extractive" is built into every server, whatever its default.
    with SummaryMemory(
        llm="extractive", window=2, summarize_every=2, target=model_server.target
    ) as m:
        m.add([Message.user(f"msg {i}") for i in range(6)], thread_id="x")
        recalled = m.get(thread_id="x")
        assert recalled[0].role is Role.SYSTEM
        assert "msg 0" in m.summary("x")
        assert fake_model.requests == []
