"""Conversation memory backed by the windlass-memory service.

A drop-in for the original in-process module: the same classes, constructor
parameters and methods, with threads kept in the service::

    from windlass_memory import Message, WindowMemory

    m = WindowMemory(window=2, target="127.0.0.1:50051")
    m.add([Message.user("one"), Message.user("two"), Message.user("three")])
    [msg.content for msg in m.get()]  # ['two', 'three']

Also: ``watch()`` / ``awatch()``, Watch streams that resume after a broken
connection with backoff (:class:`ResyncRequired` when they cannot), and
``to_openai`` / ``from_openai`` / ``to_anthropic`` / ``from_anthropic``, and the
Get options ``profile`` (:class:`Profile`) and ``clear_tool_results``
(:class:`ToolResultClearing`).
"""

from ._buffer import DEFAULT_THREAD, BufferMemory
from ._errors import MemoryServiceError, ResyncRequired
from ._fork import ForkOrigin, ForkResult, Thread
from ._formats import from_anthropic, from_openai, to_anthropic, to_openai
from ._memory import SummaryMemory, WindowMemory
from ._rewind import RewindResult
from ._shaping import History, Profile, ToolResultClearing
from ._transport import DEFAULT_TARGET
from ._types import Message, MessageLike, Role, ToolCall
from ._watch import AsyncWatchStream, Backoff, WatchEvent, WatchStream

__all__ = [
    "AsyncWatchStream",
    "Backoff",
    "ForkOrigin",
    "ForkResult",
    "ResyncRequired",
    "RewindResult",
    "WatchEvent",
    "WatchStream",
    "DEFAULT_TARGET",
    "DEFAULT_THREAD",
    "BufferMemory",
    "History",
    "MemoryServiceError",
    "Message",
    "MessageLike",
    "Profile",
    "Role",
    "SummaryMemory",
    "Thread",
    "ToolCall",
    "ToolResultClearing",
    "WindowMemory",
    "from_anthropic",
    "from_openai",
    "to_anthropic",
    "to_openai",
]
