"""Provider profiles and tool-output clearing: the Get options that shape a list for a model.

Both are read-time views the service applies (README, *Provider profiles*
and *Clearing old tool output*): nothing stored changes. The values are
checked here, before any call, so a typo fails at once with the argument's
name instead of as an INVALID_ARGUMENT from the service.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any

from windlass.memory.v1 import memory_pb2

from ._types import Message

# The service's limits (proto ToolResultClearing), so a value it would refuse
# is refused here with the same bound.
MAX_KEEP_TOOL_TURNS = 100_000
MAX_KEEP_TOOL_TOKENS = 10_000_000


class Profile(str, Enum):
    """A model provider whose request rules :meth:`~BufferMemory.get` shapes its list to.

    Pass a member or its value (``"anthropic"``); the proto's names
    (``"PROFILE_ANTHROPIC"``) and any letter case are accepted too.
    """

    OPENAI_CHAT = "openai_chat"
    OPENAI_RESPONSES = "openai_responses"
    ANTHROPIC = "anthropic"
    GEMINI = "gemini"
    BEDROCK_CONVERSE = "bedrock_converse"


ProfileLike = Profile | str

_PROFILE_NAMES = ", ".join(repr(p.value) for p in Profile)


def profile_value(profile: Any, name: str = "profile") -> int:
    """The proto enum number of ``profile`` (a :class:`Profile` or one of its names)."""
    if isinstance(profile, Profile):
        return int(memory_pb2.Profile.Value(f"PROFILE_{profile.name}"))
    if not isinstance(profile, str):
        raise TypeError(
            f"{name}: expected a Profile or one of {_PROFILE_NAMES}, not {type(profile).__name__}"
        )
    key = profile.strip().lower().removeprefix("profile_")
    try:
        return profile_value(Profile(key), name)
    except ValueError:
        raise ValueError(
            f"{name}: unknown profile {profile!r}; expected one of {_PROFILE_NAMES}"
        ) from None


@dataclass(frozen=True)
class ToolResultClearing:
    """Return old tool results as a short placeholder instead of their content.

    ``keep_tool_turns``: the results of the newest this many tool turns stay
    whole (0: every result is cleared). ``keep_tool_tokens``: results stay
    whole, newest first, while their tokens sum to at most this. With both, a
    result is cleared when either says so; at least one must be set. Invalid
    values raise at construction, naming the field.
    """

    keep_tool_turns: int | None = None
    keep_tool_tokens: int | None = None

    def __post_init__(self) -> None:
        if self.keep_tool_turns is None and self.keep_tool_tokens is None:
            raise ValueError("ToolResultClearing: set keep_tool_turns, keep_tool_tokens or both")
        _check_limit("keep_tool_turns", self.keep_tool_turns, MAX_KEEP_TOOL_TURNS)
        _check_limit("keep_tool_tokens", self.keep_tool_tokens, MAX_KEEP_TOOL_TOKENS)

    def to_proto(self) -> memory_pb2.ToolResultClearing:
        return memory_pb2.ToolResultClearing(
            keep_tool_turns=self.keep_tool_turns, keep_tool_tokens=self.keep_tool_tokens
        )


def clearing_proto(value: Any, name: str = "clear_tool_results") -> memory_pb2.ToolResultClearing:
    """``value`` (a :class:`ToolResultClearing`) as the proto message; TypeError otherwise."""
    if not isinstance(value, ToolResultClearing):
        raise TypeError(
            f"{name}: expected ToolResultClearing(keep_tool_turns=..., keep_tool_tokens=...) "
            f"or None, not {type(value).__name__}"
        )
    return value.to_proto()


def _check_limit(name: str, value: Any, most: int) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name}: expected int or None, not {type(value).__name__}")
    if not 0 <= value <= most:
        raise ValueError(f"{name}: must be between 0 and {most}, got {value}")


class History(list[Message]):
    """The messages :meth:`~BufferMemory.get` returned (a list), with what the service reported.

    ``tokens``: the messages' token count (placeholders counted as sent).
    ``cleared_tool_results``: how many tool results came back as a
    placeholder; ``cleared_tool_tokens``: the tokens that saved.
    """

    tokens: int
    cleared_tool_results: int
    cleared_tool_tokens: int

    def __init__(self, messages: list[Message], response: memory_pb2.GetResponse) -> None:
        super().__init__(messages)
        self.tokens = response.tokens
        self.cleared_tool_results = response.cleared_tool_results
        self.cleared_tool_tokens = response.cleared_tool_tokens
