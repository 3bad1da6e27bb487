"""The message types of the client: plain data, like the original module's."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum
from typing import Any, Protocol


class Role(str, Enum):
    """Who wrote a message. The values are the original module's role names."""

    SYSTEM = "system"
    USER = "user"
    ASSISTANT = "assistant"
    TOOL = "tool"


class MessageLike(Protocol):
    """Anything :meth:`BufferMemory.add` accepts as a message.

    :class:`Message`, and the original module's message type: a ``role``
    (a :class:`Role`, another enum whose values are role names, or a name),
    ``content``, and optionally ``name``, ``tool_calls`` (objects with ``id``,
    ``name`` and ``arguments`` as JSON text or a mapping), ``tool_call_id``
    and ``metadata``.
    """

    @property
    def role(self) -> Any: ...

    @property
    def content(self) -> str | None: ...


@dataclass(frozen=True, init=False)
class ToolCall:
    """A tool invocation requested by an assistant message.

    ``arguments`` is JSON text, as models produce it and the service stores it;
    a mapping given instead is encoded with :func:`json.dumps`.
    """

    id: str
    name: str
    arguments: str

    def __init__(self, id: str, name: str, arguments: str | Mapping[str, Any] = "{}") -> None:
        object.__setattr__(self, "id", id)
        object.__setattr__(self, "name", name)
        object.__setattr__(
            self, "arguments", arguments if isinstance(arguments, str) else json.dumps(arguments)
        )

    def parsed_arguments(self) -> Any:
        """The arguments decoded from JSON (raises ValueError if they are not JSON)."""
        return json.loads(self.arguments)


@dataclass(frozen=True, init=False)
class Message:
    """One chat message, as sent to and returned by the memory service.

    Build them with the role constructors, as with the original module::

        Message.user("hi")
        Message.assistant("", tool_calls=[ToolCall("c1", "search", {"q": "x"})])
        Message.tool('{"hits": 3}', tool_call_id="c1")

    ``seq`` and ``create_time`` are filled in by the service on messages it
    returns (``seq`` is 0 on new messages and on the summary message); they
    take no part in equality, so a message read back equals the one added.
    """

    role: Role
    content: str
    name: str | None
    tool_calls: tuple[ToolCall, ...]
    tool_call_id: str | None
    metadata: Mapping[str, str] = field(hash=False)
    seq: int = field(compare=False)
    create_time: datetime | None = field(compare=False)

    def __init__(
        self,
        role: Role | str,
        content: str = "",
        *,
        name: str | None = None,
        tool_calls: Iterable[ToolCall] = (),
        tool_call_id: str | None = None,
        metadata: Mapping[str, str] | None = None,
        seq: int = 0,
        create_time: datetime | None = None,
    ) -> None:
        # Frozen: fields are set through object.__setattr__, once. A role may
        # be given by name ("user"), as the original's callers may pass it.
        set_field = object.__setattr__
        set_field(self, "role", Role(role))
        set_field(self, "content", content)
        set_field(self, "name", name)
        set_field(self, "tool_calls", tuple(tool_calls))
        set_field(self, "tool_call_id", tool_call_id)
        set_field(self, "metadata", dict(metadata or {}))
        set_field(self, "seq", seq)
        set_field(self, "create_time", create_time)

    @classmethod
    def system(cls, content: str, *, name: str | None = None) -> Message:
        return cls(Role.SYSTEM, content, name=name)

    @classmethod
    def user(cls, content: str, *, name: str | None = None) -> Message:
        return cls(Role.USER, content, name=name)

    @classmethod
    def assistant(
        cls,
        content: str = "",
        *,
        tool_calls: Iterable[ToolCall] = (),
        name: str | None = None,
    ) -> Message:
        return cls(Role.ASSISTANT, content, name=name, tool_calls=tuple(tool_calls))

    @classmethod
    def tool(cls, content: str, *, tool_call_id: str, name: str | None = None) -> Message:
        return cls(Role.TOOL, content, name=name, tool_call_id=tool_call_id)
