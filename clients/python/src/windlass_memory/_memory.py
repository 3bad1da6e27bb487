"""BufferMemory, WindowMemory and SummaryMemory, backed by the memory service.

Each class keeps the constructor parameters and methods of the original
in-process module and sends them to the service: the parameters become a
``Strategy``, the methods become RPCs. Threads live in the service, so every
memory object, process and replica that names a thread sees the same
messages. As the original's objects each applied their own window, each
object here reads with its own strategy (``GetRequest.recall``), and its
Adds create a thread with it but never impose it on an existing thread
(``keep_strategy``), except that a SummaryMemory makes a buffer or window
thread a summary thread: only a summary thread has a summary to give it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

import grpc
from windlass.memory.v1 import memory_pb2, memory_pb2_grpc

from ._convert import ACCEPTED, from_chat_message, to_chat_message
from ._errors import MemoryServiceError
from ._rewind import RewindMethods
from ._shaping import History, ProfileLike, ToolResultClearing, clearing_proto, profile_value
from ._types import MessageLike
from ._watch import AsyncWatchStream, Backoff, WatchStream, watch_request

DEFAULT_THREAD = "default"
DEFAULT_TARGET = "127.0.0.1:50051"
TARGET_ENV = "WINDLASS_MEMORY_TARGET"

_log = logging.getLogger("windlass_memory")
_T = TypeVar("_T")
_Self = TypeVar("_Self", bound="BufferMemory")

# gRPC retries these calls itself when they fail with UNAVAILABLE (a server
# restarting or shutting down, a connection lost). That is safe for Add only
# because every Add and Rewind carries a request_id: the server answers a repeated one
# with the first call's response and appends nothing.
_SERVICE_CONFIG = json.dumps(
    {
        "methodConfig": [
            {
                "name": [
                    {"service": "windlass.memory.v1.MemoryService", "method": method}
                    for method in ("Add", "Get", "Clear", "ListThreads", "Rewind")
                ],
                "retryPolicy": {
                    "maxAttempts": 4,
                    "initialBackoff": "0.2s",
                    "maxBackoff": "2s",
                    "backoffMultiplier": 2,
                    "retryableStatusCodes": ["UNAVAILABLE"],
                },
            }
        ]
    }
)
_LIST_PAGE_SIZE = 1000
# After an outage gRPC waits ever longer between connection attempts (up to
# 120 s by default), failing every call meanwhile: a server back after a
# restart would stay unreachable for minutes. Capped here at the Watch's own
# longest backoff, so calls and Watch come back within seconds.
_RECONNECT_OPTIONS = (
    ("grpc.initial_reconnect_backoff_ms", 200),
    ("grpc.min_reconnect_backoff_ms", 200),
    ("grpc.max_reconnect_backoff_ms", 5000),
)


class BufferMemory(RewindMethods):
    """Stores the complete transcript of each thread in the memory service.

    Args:
        max_messages: Ceiling on how many messages :meth:`get` returns (the
            newest). ``None`` returns everything.
        max_stored: Hard ceiling on messages the service keeps per thread;
            the oldest are dropped.
        return_system: ``False`` leaves system messages out of :meth:`get`
            (the strategy's ``exclude_system``).
        target: ``host:port`` of the service's gRPC port. Default: the
            ``WINDLASS_MEMORY_TARGET`` environment variable, else
            ``127.0.0.1:50051`` (what ``npm start`` serves).
        channel: A ``grpc.Channel`` to use instead of one made from
            ``target``; it is not closed by :meth:`close`.
        credentials: ``grpc.ChannelCredentials`` for TLS (e.g.
            ``grpc.ssl_channel_credentials()``); default plaintext.
        token: Bearer token, when the service has auth configured; it picks
            the namespace the threads live in.
        timeout: Seconds each call may take (a summary Get may wait for a
            fold that is due); ``None`` for no deadline.
        replace_strategy: Make the service adopt this object's strategy for a
            thread created with another one, instead of refusing the Add with
            FAILED_PRECONDITION. The thread's messages stay.
        profile: Shape every :meth:`get` to a model provider's request rules
            (a :class:`Profile` or its name: ``"openai_chat"``,
            ``"openai_responses"``, ``"anthropic"``, ``"gemini"``,
            ``"bedrock_converse"``); ``get(profile=...)`` overrides it.
        clear_tool_results: A :class:`ToolResultClearing`: part of this
            object's strategy, so every :meth:`get` returns old tool results
            as a placeholder; ``get(clear_tool_results=...)`` overrides it.

    Unlike the original, threads are shared: two memory objects (or
    processes) naming one thread see the same messages, and the thread keeps
    the strategy of its first Add. Calls that fail raise
    :class:`MemoryServiceError`.
    """

    def __init__(
        self,
        *,
        max_messages: int | None = None,
        max_stored: int = 1000,
        return_system: bool = True,
        target: str | None = None,
        channel: grpc.Channel | None = None,
        credentials: grpc.ChannelCredentials | None = None,
        token: str | None = None,
        timeout: float | None = 30.0,
        replace_strategy: bool = False,
        profile: ProfileLike | None = None,
        clear_tool_results: ToolResultClearing | None = None,
    ) -> None:
        _check_int("max_messages", max_messages, optional=True)
        # Checked first: a bad value fails here, not at the first call.
        self._profile = None if profile is None else profile_value(profile)
        self._clearing = None if clear_tool_results is None else clearing_proto(clear_tool_results)
        self.profile = profile
        self.clear_tool_results = clear_tool_results
        _check_int("max_stored", max_stored)
        if timeout is not None and (
            isinstance(timeout, bool) or not isinstance(timeout, (int, float))
        ):
            raise TypeError(
                f"timeout: expected seconds (a number) or None, not {type(timeout).__name__}"
            )
        if target is not None and not isinstance(target, str):
            raise TypeError(f"target: expected 'host:port' (str), not {type(target).__name__}")
        if max_messages is not None and max_messages < 0:
            raise ValueError("max_messages must not be negative")
        if max_stored <= 0:
            raise ValueError("max_stored must be positive")
        self.max_messages = max_messages
        self.max_stored = max_stored
        self.return_system = return_system
        self.replace_strategy = replace_strategy
        self.timeout = timeout
        self.target = target or os.environ.get(TARGET_ENV) or DEFAULT_TARGET
        self._metadata: tuple[tuple[str, str], ...] = (
            (("authorization", f"Bearer {token}"),) if token else ()
        )
        self._owns_channel = channel is None
        if channel is None:
            options = [("grpc.service_config", _SERVICE_CONFIG), *_RECONNECT_OPTIONS]
            channel = (
                grpc.secure_channel(self.target, credentials, options=options)
                if credentials is not None
                else grpc.insecure_channel(self.target, options=options)
            )
        self._channel = channel
        self._stub = memory_pb2_grpc.MemoryServiceStub(channel)

    # What every kind of strategy this object sends has.
    def _common_strategy(self) -> dict[str, Any]:
        return {
            "exclude_system": not self.return_system,
            "max_stored": self.max_stored,
            "clear_tool_results": self._clearing,
        }

    # The strategy every Add sends; subclasses fill in the kind.
    def _strategy(self) -> memory_pb2.Strategy:
        return memory_pb2.Strategy(
            buffer=memory_pb2.BufferStrategy(max_messages=self.max_messages),
            **self._common_strategy(),
        )

    # ---- requests and responses, shared by the sync and async methods ----

    def _add_request(
        self, messages: MessageLike | Sequence[MessageLike], thread_id: str
    ) -> memory_pb2.AddRequest | None:
        _check_thread_id(thread_id)
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
            strategy=self._strategy(),
            replace_strategy=self.replace_strategy,
            keep_strategy=not self.replace_strategy,
            request_id=uuid.uuid4().hex,
        )

    def _upgrade_request(self, response: memory_pb2.AddResponse) -> memory_pb2.AddRequest | None:
        """The Add that gives the thread this object's strategy when its view needs it; None: none.

        Buffer and window objects read their own view of any thread, so they
        never need one (SummaryMemory overrides this).
        """
        return None

    def _get_request(
        self,
        thread_id: str,
        query: str | None,
        limit: int | None,
        profile: ProfileLike | None = None,
        clear_tool_results: ToolResultClearing | None = None,
    ) -> memory_pb2.GetRequest:
        _check_thread_id(thread_id)
        if query is not None and not isinstance(query, str):
            raise TypeError(f"query: expected str or None, not {type(query).__name__}")
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)):
            raise TypeError(f"limit: expected int or None, not {type(limit).__name__}")
        # This object's own window, ceiling and exclude_system, whatever
        # strategy the thread was created with: the original's objects each
        # applied their own.
        request = memory_pb2.GetRequest(
            thread_id=thread_id, query=query or "", recall=self._strategy()
        )
        chosen_profile = self._profile if profile is None else profile_value(profile)
        if chosen_profile is not None:
            request.profile = chosen_profile  # type: ignore[assignment]
        if clear_tool_results is not None:
            request.clear_tool_results.CopyFrom(clearing_proto(clear_tool_results))
        if limit is not None:
            # A negative size meant "everything" (window) or "no recent
            # messages" (summary) in the original, as 0 does here.
            request.limit = max(0, limit)
        return request

    @staticmethod
    def _recall(thread_id: str, response: memory_pb2.GetResponse) -> History:
        if response.degraded:
            # The original logged and skipped a failed summary; the service
            # says so in the response, and so does this log line.
            _log.warning(
                "thread %r: summary not up to date, plain window returned: %s",
                thread_id,
                response.degraded_reason,
            )
        return History([from_chat_message(message) for message in response.messages], response)

    @staticmethod
    def _clear_request(thread_id: str | None) -> memory_pb2.ClearRequest:
        if thread_id is None:
            return memory_pb2.ClearRequest(all=True)
        _check_thread_id(thread_id)
        return memory_pb2.ClearRequest(thread_id=thread_id)

    def _call(self, method: Callable[..., _T], request: Any) -> _T:
        try:
            return method(request, timeout=self.timeout, metadata=self._metadata)
        except grpc.RpcError as error:
            raise MemoryServiceError.from_rpc_error(error) from error

    async def _acall(self, method: Any, request: Any) -> Any:
        # The sync channel's futures, not grpc.aio: an aio channel belongs to
        # the event loop it was first used on, and a memory object, like the
        # original, may be used from several loops (asyncio.run per request).
        call = method.future(request, timeout=self.timeout, metadata=self._metadata)
        return await _await_call(call)

    # ---- the original's methods ----

    def add(
        self, messages: MessageLike | Sequence[MessageLike], *, thread_id: str = DEFAULT_THREAD
    ) -> None:
        """Append messages to a thread (created with this object's strategy).

        ``messages``: one message or a list: :class:`Message`, the original
        module's messages (anything with ``role`` and ``content``), or OpenAI
        Chat Completions dicts (``{"role": "user", "content": "hi"}``, tool
        calls included). Anything else raises TypeError naming the argument.
        """
        request = self._add_request(messages, thread_id)
        if request is not None:
            upgrade = self._upgrade_request(self._call(self._stub.Add, request))
            if upgrade is not None:
                try:
                    self._call(self._stub.Add, upgrade)
                except MemoryServiceError as error:
                    _ignore_lost_race(error)

    async def aadd(
        self, messages: MessageLike | Sequence[MessageLike], *, thread_id: str = DEFAULT_THREAD
    ) -> None:
        """Append messages to a thread (created with this object's strategy)."""
        request = self._add_request(messages, thread_id)
        if request is not None:
            upgrade = self._upgrade_request(await self._acall(self._stub.Add, request))
            if upgrade is not None:
                try:
                    await self._acall(self._stub.Add, upgrade)
                except MemoryServiceError as error:
                    _ignore_lost_race(error)

    def get(
        self,
        *,
        thread_id: str = DEFAULT_THREAD,
        query: str | None = None,
        limit: int | None = None,
        profile: ProfileLike | None = None,
        clear_tool_results: ToolResultClearing | None = None,
    ) -> History:
        """Return the thread as this object's strategy shapes it, oldest first.

        This object's window, ``max_messages`` and ``return_system`` apply,
        whatever strategy the thread was created with. ``limit`` overrides
        the size for this call; ``query`` is ignored (recall is
        recency-based). ``profile`` and ``clear_tool_results`` override the
        object's for this call. A thread that does not exist returns ``[]``.
        The result is a list, a :class:`History` that also says how many
        tool results were cleared.
        """
        request = self._get_request(thread_id, query, limit, profile, clear_tool_results)
        response = self._call(self._stub.Get, request)
        return self._recall(thread_id, response)

    async def aget(
        self,
        *,
        thread_id: str = DEFAULT_THREAD,
        query: str | None = None,
        limit: int | None = None,
        profile: ProfileLike | None = None,
        clear_tool_results: ToolResultClearing | None = None,
    ) -> History:
        """Return the thread as this object's strategy shapes it, oldest first."""
        request = self._get_request(thread_id, query, limit, profile, clear_tool_results)
        return self._recall(thread_id, await self._acall(self._stub.Get, request))

    def clear(self, *, thread_id: str | None = None) -> None:
        """Forget one thread, or, with ``thread_id=None``, every thread.

        "Every thread" is every thread of the caller's namespace in the
        service, not only those this object added to.
        """
        self._call(self._stub.Clear, self._clear_request(thread_id))

    async def aclear(self, *, thread_id: str | None = None) -> None:
        """Forget one thread, or, with ``thread_id=None``, every thread."""
        await self._acall(self._stub.Clear, self._clear_request(thread_id))

    def threads(self) -> list[str]:
        """Return the ids of the namespace's threads, sorted."""
        ids: list[str] = []
        token = ""
        while True:
            page = self._call(
                self._stub.ListThreads,
                memory_pb2.ListThreadsRequest(page_size=_LIST_PAGE_SIZE, page_token=token),
            )
            ids.extend(page.thread_ids)
            token = page.next_page_token
            if not token:
                return ids

    async def athreads(self) -> list[str]:
        """Return the ids of the namespace's threads, sorted."""
        ids: list[str] = []
        token = ""
        while True:
            page = await self._acall(
                self._stub.ListThreads,
                memory_pb2.ListThreadsRequest(page_size=_LIST_PAGE_SIZE, page_token=token),
            )
            ids.extend(page.thread_ids)
            token = page.next_page_token
            if not token:
                return ids

    # ---- Watch ----

    def watch(
        self,
        thread_ids: str | Sequence[str] | None = None,
        *,
        event_types: Sequence[str] | None = None,
        resume_token: str = "",
        send_initial_state: bool = False,
        include_progress: bool = False,
        backoff: Backoff | None = None,
    ) -> WatchStream:
        """Stream events of threads (all of the namespace's with ``None``), resuming by itself.

        Iterate the result (a :class:`WatchStream`, also a context manager)::

            with memory.watch("t1", event_types=["summary_updated"]) as events:
                for event in events:
                    print(event.summary)

        After UNAVAILABLE, RESOURCE_EXHAUSTED or an end of stream the Watch is
        opened again with the last event's resume token, after a pause that
        grows exponentially (``backoff``, default :class:`Backoff`). An empty
        ``resume_token`` watches from now; ``send_initial_state`` first sends
        the current summary of each watched thread that has one.

        Raises:
            ResyncRequired: the server no longer has the events after the
                token (OUT_OF_RANGE): re-read with ``get``, watch again from now.
            MemoryServiceError: an error a retry cannot fix.
        """
        request = watch_request(thread_ids, event_types, resume_token, send_initial_state)

        def open_watch(req: memory_pb2.WatchRequest) -> Any:
            # No deadline: a Watch lasts until it is closed.
            return self._stub.Watch(req, metadata=self._metadata)

        return WatchStream(open_watch, request, backoff or Backoff(), include_progress)

    def awatch(
        self,
        thread_ids: str | Sequence[str] | None = None,
        *,
        event_types: Sequence[str] | None = None,
        resume_token: str = "",
        send_initial_state: bool = False,
        include_progress: bool = False,
        backoff: Backoff | None = None,
    ) -> AsyncWatchStream:
        """:meth:`watch` for ``async for``; cancelling the awaiting task closes the stream."""
        return AsyncWatchStream(
            self.watch(
                thread_ids,
                event_types=event_types,
                resume_token=resume_token,
                send_initial_state=send_initial_state,
                include_progress=include_progress,
                backoff=backoff,
            )
        )

    # ---- lifetime ----

    def close(self) -> None:
        """Close the channel this object made (not one passed in)."""
        if self._owns_channel:
            self._channel.close()

    def __enter__(self: _Self) -> _Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class WindowMemory(BufferMemory):
    """Keeps a sliding window of recent messages.

    Args:
        window: How many messages :meth:`get` returns, counted in messages,
            not turns. A window that would start on a tool result widens
            backwards to the assistant message that made the call.
        **config: Forwarded to :class:`BufferMemory` (``max_messages`` is
            ignored, as in the original).

    Raises:
        ValueError: If ``window`` is not positive.
    """

    def __init__(self, *, window: int = 20, **config: Any) -> None:
        _check_int("window", window)
        if window <= 0:
            raise ValueError("window must be positive")
        config.pop("max_messages", None)
        super().__init__(max_messages=window, **config)
        self.window = window

    def _strategy(self) -> memory_pb2.Strategy:
        return memory_pb2.Strategy(
            window=memory_pb2.WindowStrategy(window=self.window),
            **self._common_strategy(),
        )


class SummaryMemory(BufferMemory):
    """Keeps recent turns verbatim and a running summary of everything older.

    The service writes the summary, in the background after the Add that makes
    a fold due, so :meth:`get` does not normally wait for a model call.

    Args:
        llm: Which summariser the service uses: the name of one configured on
            the server (``"extractive"``, built in; ``"openai"``, when the
            server has ``--openai-base-url``); ``None`` or a model object of
            the original's (``FakeLLM(...)``, ``Windlass.llm(...)``): the
            server's default. The service writes the summaries with the
            summarisers configured on the server, so a model object is kept
            as ``self.llm`` but never called.
        window: How many recent messages to keep verbatim.
        summarize_every: Summarise once this many messages have overflowed
            the window (at least 1).
        **config: Forwarded to :class:`BufferMemory` (``max_messages`` is
            ignored, as in the original).

    Unlike the original, messages that overflowed but are not summarised yet
    are returned verbatim, so none is in neither the summary nor the list.
    Adding to a buffer or window thread makes it a summary thread with this
    object's strategy (other objects keep reading their own view of it).
    """

    def __init__(
        self,
        *,
        llm: object = None,
        window: int = 10,
        summarize_every: int = 6,
        **config: Any,
    ) -> None:
        _check_int("window", window)
        _check_int("summarize_every", summarize_every)
        if window < 0:
            raise ValueError("window must not be negative")
        config.pop("max_messages", None)
        super().__init__(max_messages=None, **config)
        self.llm = llm
        self.window = window
        self.summarize_every = max(1, summarize_every)

    def _strategy(self) -> memory_pb2.Strategy:
        return memory_pb2.Strategy(
            summary=memory_pb2.SummaryStrategy(
                window=self.window,
                summarize_every=self.summarize_every,
                # A model object of the original's cannot travel: the
                # server's default summariser stands in for it.
                model=self.llm if isinstance(self.llm, str) else "",
            ),
            **self._common_strategy(),
        )

    def _upgrade_request(self, response: memory_pb2.AddResponse) -> memory_pb2.AddRequest | None:
        # A buffer or window thread has no summary, so this object's view
        # (the summary, then the recent turns) needs the thread to become a
        # summary thread. Nothing is lost for other objects: they read their
        # own buffer or window of a summary thread. Conditional on the thread
        # not having moved on, so two summary objects racing cannot flip it
        # back and forth; a lost race is left to the next Add.
        if not response.HasField("thread"):
            return None
        if response.thread.strategy.WhichOneof("kind") == "summary":
            return None
        return memory_pb2.AddRequest(
            thread_id=response.thread.thread_id,
            strategy=self._strategy(),
            replace_strategy=True,
            expected_last_seq=response.thread.last_seq,
            request_id=uuid.uuid4().hex,
        )

    def summary(self, thread_id: str = DEFAULT_THREAD) -> str:
        """Return the current summary of a thread, or ``""``.

        Waits, like :meth:`get`, for a fold that is due or running (at this
        object's window), so the summary covers every message that should be
        folded by now.
        """
        response = self._call(self._stub.Get, self._get_request(thread_id, None, None))
        return str(response.summary)

    async def asummary(self, thread_id: str = DEFAULT_THREAD) -> str:
        """Return the current summary of a thread, or ``""``."""
        response = await self._acall(self._stub.Get, self._get_request(thread_id, None, None))
        return str(response.summary)


def _ignore_lost_race(error: MemoryServiceError) -> None:
    """An upgrade that lost to another Add (ABORTED) is tried again by the next Add."""
    if error.code is not grpc.StatusCode.ABORTED:
        raise error


def _check_int(name: str, value: Any, *, optional: bool = False) -> None:
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int):
        expected = "int or None" if optional else "int"
        raise TypeError(f"{name}: expected {expected}, not {type(value).__name__}")


def _check_thread_id(thread_id: Any) -> None:
    if not isinstance(thread_id, str):
        raise TypeError(f"thread_id: expected str, not {type(thread_id).__name__}")


async def _await_call(call: Any) -> Any:
    """Awaits a gRPC future on the running event loop; cancelling cancels the RPC."""
    loop = asyncio.get_running_loop()
    finished: asyncio.Future[None] = loop.create_future()

    def wake(_: Any) -> None:
        if not finished.done():
            finished.set_result(None)

    def on_done(_: Any) -> None:
        # Runs on a gRPC thread (or at once, if the call already ended): hand
        # the wake-up to the loop's own thread.
        try:
            loop.call_soon_threadsafe(wake, None)
        except RuntimeError:
            pass  # the loop closed while the call ran: nobody is waiting

    call.add_done_callback(on_done)
    try:
        await finished
    except asyncio.CancelledError:
        call.cancel()
        raise
    try:
        return call.result()
    except grpc.RpcError as error:
        raise MemoryServiceError.from_rpc_error(error) from error
