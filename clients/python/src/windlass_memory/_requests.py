"""The requests a memory object sends and what it makes of the responses.

Shared by the sync and async methods; no calls here. Every argument is
checked before anything is sent, and a bad one raises TypeError or ValueError
naming it.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from windlass.memory.v1 import memory_pb2

from ._convert import ACCEPTED, from_chat_message, to_chat_message
from ._errors import MemoryServiceError
from ._rewind import is_lost_race
from ._shaping import History, ProfileLike, ToolResultClearing, clearing_proto, profile_value
from ._types import MessageLike

LIST_PAGE_SIZE = 1000

_log = logging.getLogger("windlass_memory")


def add_request(
    messages: MessageLike | Sequence[MessageLike],
    thread_id: str,
    strategy: memory_pb2.Strategy,
    replace_strategy: bool,
) -> memory_pb2.AddRequest | None:
    """The Add of ``messages`` to ``thread_id``; None when there are none to add."""
    check_thread_id(thread_id)
    # One message (ours, anything with a role, an OpenAI dict) or a
    # sequence of them. A str is a sequence too, of characters: refused.
    if isinstance(messages, (str, bytes)):
        raise TypeError(
            f"messages: expected {ACCEPTED} or a list of them, not {type(messages).__name__} "
            "(wrap text in Message.user(...))"
        )
    if isinstance(messages, Mapping) or hasattr(messages, "role"):
        items: list[Any] = [messages]
        names = ["messages"]
    elif isinstance(messages, Iterable):
        items = list(messages)
        names = [f"messages[{i}]" for i in range(len(items))]
    else:
        raise TypeError(
            f"messages: expected {ACCEPTED} or a list of them, not {type(messages).__name__}"
        )
    if not items:
        return None  # the original: adding nothing is a no-op
    return memory_pb2.AddRequest(
        thread_id=thread_id,
        messages=[to_chat_message(item, name) for item, name in zip(items, names, strict=True)],
        strategy=strategy,
        replace_strategy=replace_strategy,
        keep_strategy=not replace_strategy,
        request_id=uuid.uuid4().hex,
    )


def get_request(
    thread_id: str,
    query: str | None,
    limit: int | None,
    recall: memory_pb2.Strategy,
    default_profile: Any,
    profile: ProfileLike | None = None,
    clear_tool_results: ToolResultClearing | None = None,
) -> memory_pb2.GetRequest:
    """The Get of ``thread_id`` read with ``recall``, the reading object's own strategy.

    ``default_profile``: the object's profile value (``None``: none);
    ``profile`` and ``clear_tool_results``: the call's overrides, if any.
    """
    check_thread_id(thread_id)
    if query is not None and not isinstance(query, str):
        raise TypeError(f"query: expected str or None, not {type(query).__name__}")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)):
        raise TypeError(f"limit: expected int or None, not {type(limit).__name__}")
    request = memory_pb2.GetRequest(thread_id=thread_id, query=query or "", recall=recall)
    chosen_profile = default_profile if profile is None else profile_value(profile)
    if chosen_profile is not None:
        request.profile = chosen_profile  # type: ignore[assignment]
    if clear_tool_results is not None:
        request.clear_tool_results.CopyFrom(clearing_proto(clear_tool_results))
    if limit is not None:
        # A negative size meant "everything" (window) or "no recent
        # messages" (summary) in the original, as 0 does here.
        request.limit = max(0, limit)
    return request


def recalled_history(thread_id: str, response: memory_pb2.GetResponse) -> History:
    """A Get's messages as a :class:`History`; a degraded summary is logged."""
    if response.degraded:
        # The original logged and skipped a failed summary; the service
        # says so in the response, and so does this log line.
        _log.warning(
            "thread %r: summary not up to date, plain window returned: %s",
            thread_id,
            response.degraded_reason,
        )
    return History([from_chat_message(message) for message in response.messages], response)


def clear_request(thread_id: str | None) -> memory_pb2.ClearRequest:
    """The Clear of one thread, or of every thread with ``None``."""
    if thread_id is None:
        return memory_pb2.ClearRequest(all=True)
    check_thread_id(thread_id)
    return memory_pb2.ClearRequest(thread_id=thread_id)


def list_threads_request(page_token: str) -> memory_pb2.ListThreadsRequest:
    return memory_pb2.ListThreadsRequest(page_size=LIST_PAGE_SIZE, page_token=page_token)


def ignore_lost_race(error: MemoryServiceError) -> None:
    """An upgrade that lost to another Add (ABORTED) is tried again by the next Add."""
    if not is_lost_race(error):
        raise error


def check_int(name: str, value: Any, *, optional: bool = False) -> None:
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int):
        expected = "int or None" if optional else "int"
        raise TypeError(f"{name}: expected {expected}, not {type(value).__name__}")


def check_thread_id(thread_id: Any) -> None:
    if not isinstance(thread_id, str):
        raise TypeError(f"thread_id: expected str, not {type(thread_id).__name__}")
