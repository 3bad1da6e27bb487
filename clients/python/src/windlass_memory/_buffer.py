"""BufferMemory: the memory object's channel, strategy and calls.

The base of WindowMemory and SummaryMemory (``_memory``): the constructor
parameters they share, the Add, Get, Clear and ListThreads calls, sync and
async, and the channel's lifetime. Rewind and pop come from
:class:`RewindMethods` (``_rewind``), watch from :class:`WatchMethods`
(``_watching``); the requests are built in ``_requests``, the channel opened
in ``_transport``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import grpc
from windlass.memory.v1 import memory_pb2, memory_pb2_grpc

from ._errors import MemoryServiceError
from ._requests import (
    add_request,
    check_int,
    clear_request,
    get_request,
    ignore_lost_race,
    list_threads_request,
    recalled_history,
)
from ._fork import ForkMethods
from ._rewind import RewindMethods
from ._shaping import History, ProfileLike, ToolResultClearing, clearing_proto, profile_value
from ._transport import await_call, bearer_metadata, open_channel, resolve_target
from ._types import MessageLike
from ._watching import WatchMethods

DEFAULT_THREAD = "default"

_T = TypeVar("_T")
_Self = TypeVar("_Self", bound="BufferMemory")


class BufferMemory(RewindMethods, ForkMethods, WatchMethods):
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
        check_int("max_messages", max_messages, optional=True)
        # Checked first: a bad value fails here, not at the first call.
        self._profile = None if profile is None else profile_value(profile)
        self._clearing = None if clear_tool_results is None else clearing_proto(clear_tool_results)
        self.profile = profile
        self.clear_tool_results = clear_tool_results
        check_int("max_stored", max_stored)
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
        self.target = resolve_target(target)
        self._metadata = bearer_metadata(token)
        self._owns_channel = channel is None
        self._channel = channel if channel is not None else open_channel(self.target, credentials)
        self._stub = memory_pb2_grpc.MemoryServiceStub(self._channel)

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

    # ---- requests, shared by the sync and async methods ----

    def _add_request(
        self, messages: MessageLike | Sequence[MessageLike], thread_id: str
    ) -> memory_pb2.AddRequest | None:
        return add_request(messages, thread_id, self._strategy(), self.replace_strategy)

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
        # This object's own window, ceiling and exclude_system, whatever
        # strategy the thread was created with: the original's objects each
        # applied their own.
        return get_request(
            thread_id, query, limit, self._strategy(), self._profile, profile, clear_tool_results
        )

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
        return await await_call(call)

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
                    ignore_lost_race(error)

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
                    ignore_lost_race(error)

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
        return recalled_history(thread_id, response)

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
        return recalled_history(thread_id, await self._acall(self._stub.Get, request))

    def clear(self, *, thread_id: str | None = None) -> None:
        """Forget one thread, or, with ``thread_id=None``, every thread.

        "Every thread" is every thread of the caller's namespace in the
        service, not only those this object added to.
        """
        self._call(self._stub.Clear, clear_request(thread_id))

    async def aclear(self, *, thread_id: str | None = None) -> None:
        """Forget one thread, or, with ``thread_id=None``, every thread."""
        await self._acall(self._stub.Clear, clear_request(thread_id))

    def threads(self) -> list[str]:
        """Return the ids of the namespace's threads, sorted."""
        ids: list[str] = []
        token = ""
        while True:
            page = self._call(self._stub.ListThreads, list_threads_request(token))
            ids.extend(page.thread_ids)
            token = page.next_page_token
            if not token:
                return ids

    async def athreads(self) -> list[str]:
        """Return the ids of the namespace's threads, sorted."""
        ids: list[str] = []
        token = ""
        while True:
            page = await self._acall(self._stub.ListThreads, list_threads_request(token))
            ids.extend(page.thread_ids)
            token = page.next_page_token
            if not token:
                return ids

    # ---- lifetime ----

    def close(self) -> None:
        """Close the channel this object made (not one passed in)."""
        if self._owns_channel:
            self._channel.close()

    def __enter__(self: _Self) -> _Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
