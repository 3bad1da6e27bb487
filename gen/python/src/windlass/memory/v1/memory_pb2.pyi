import datetime

from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Role(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ROLE_UNSPECIFIED: _ClassVar[Role]
    ROLE_SYSTEM: _ClassVar[Role]
    ROLE_USER: _ClassVar[Role]
    ROLE_ASSISTANT: _ClassVar[Role]
    ROLE_TOOL: _ClassVar[Role]

class Profile(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PROFILE_UNSPECIFIED: _ClassVar[Profile]
    PROFILE_OPENAI_CHAT: _ClassVar[Profile]
    PROFILE_OPENAI_RESPONSES: _ClassVar[Profile]
    PROFILE_ANTHROPIC: _ClassVar[Profile]
    PROFILE_GEMINI: _ClassVar[Profile]
    PROFILE_BEDROCK_CONVERSE: _ClassVar[Profile]

class SummaryPlacement(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SUMMARY_PLACEMENT_UNSPECIFIED: _ClassVar[SummaryPlacement]
    SUMMARY_PLACEMENT_SYSTEM: _ClassVar[SummaryPlacement]
    SUMMARY_PLACEMENT_USER: _ClassVar[SummaryPlacement]
    SUMMARY_PLACEMENT_NONE: _ClassVar[SummaryPlacement]

class EventType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    EVENT_TYPE_UNSPECIFIED: _ClassVar[EventType]
    EVENT_TYPE_SUMMARY_UPDATED: _ClassVar[EventType]
    EVENT_TYPE_MESSAGES_ADDED: _ClassVar[EventType]
    EVENT_TYPE_THREAD_CLEARED: _ClassVar[EventType]
    EVENT_TYPE_SUMMARY_FAILED: _ClassVar[EventType]
    EVENT_TYPE_THREAD_REWOUND: _ClassVar[EventType]
    EVENT_TYPE_THREAD_FORKED: _ClassVar[EventType]
ROLE_UNSPECIFIED: Role
ROLE_SYSTEM: Role
ROLE_USER: Role
ROLE_ASSISTANT: Role
ROLE_TOOL: Role
PROFILE_UNSPECIFIED: Profile
PROFILE_OPENAI_CHAT: Profile
PROFILE_OPENAI_RESPONSES: Profile
PROFILE_ANTHROPIC: Profile
PROFILE_GEMINI: Profile
PROFILE_BEDROCK_CONVERSE: Profile
SUMMARY_PLACEMENT_UNSPECIFIED: SummaryPlacement
SUMMARY_PLACEMENT_SYSTEM: SummaryPlacement
SUMMARY_PLACEMENT_USER: SummaryPlacement
SUMMARY_PLACEMENT_NONE: SummaryPlacement
EVENT_TYPE_UNSPECIFIED: EventType
EVENT_TYPE_SUMMARY_UPDATED: EventType
EVENT_TYPE_MESSAGES_ADDED: EventType
EVENT_TYPE_THREAD_CLEARED: EventType
EVENT_TYPE_SUMMARY_FAILED: EventType
EVENT_TYPE_THREAD_REWOUND: EventType
EVENT_TYPE_THREAD_FORKED: EventType

class ToolCall(_message.Message):
    __slots__ = ("id", "name", "arguments")
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    id: str
    name: str
    arguments: str
    def __init__(self, id: _Optional[str] = ..., name: _Optional[str] = ..., arguments: _Optional[str] = ...) -> None: ...

class ChatMessage(_message.Message):
    __slots__ = ("role", "content", "name", "tool_calls", "tool_call_id", "metadata", "seq", "create_time", "tokens")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ROLE_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALLS_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_ID_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    role: Role
    content: str
    name: str
    tool_calls: _containers.RepeatedCompositeFieldContainer[ToolCall]
    tool_call_id: str
    metadata: _containers.ScalarMap[str, str]
    seq: int
    create_time: _timestamp_pb2.Timestamp
    tokens: int
    def __init__(self, role: _Optional[_Union[Role, str]] = ..., content: _Optional[str] = ..., name: _Optional[str] = ..., tool_calls: _Optional[_Iterable[_Union[ToolCall, _Mapping]]] = ..., tool_call_id: _Optional[str] = ..., metadata: _Optional[_Mapping[str, str]] = ..., seq: _Optional[int] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., tokens: _Optional[int] = ...) -> None: ...

class Strategy(_message.Message):
    __slots__ = ("buffer", "window", "summary", "exclude_system", "max_stored", "clear_tool_results")
    BUFFER_FIELD_NUMBER: _ClassVar[int]
    WINDOW_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    EXCLUDE_SYSTEM_FIELD_NUMBER: _ClassVar[int]
    MAX_STORED_FIELD_NUMBER: _ClassVar[int]
    CLEAR_TOOL_RESULTS_FIELD_NUMBER: _ClassVar[int]
    buffer: BufferStrategy
    window: WindowStrategy
    summary: SummaryStrategy
    exclude_system: bool
    max_stored: int
    clear_tool_results: ToolResultClearing
    def __init__(self, buffer: _Optional[_Union[BufferStrategy, _Mapping]] = ..., window: _Optional[_Union[WindowStrategy, _Mapping]] = ..., summary: _Optional[_Union[SummaryStrategy, _Mapping]] = ..., exclude_system: _Optional[bool] = ..., max_stored: _Optional[int] = ..., clear_tool_results: _Optional[_Union[ToolResultClearing, _Mapping]] = ...) -> None: ...

class ToolResultClearing(_message.Message):
    __slots__ = ("keep_tool_turns", "keep_tool_tokens")
    KEEP_TOOL_TURNS_FIELD_NUMBER: _ClassVar[int]
    KEEP_TOOL_TOKENS_FIELD_NUMBER: _ClassVar[int]
    keep_tool_turns: int
    keep_tool_tokens: int
    def __init__(self, keep_tool_turns: _Optional[int] = ..., keep_tool_tokens: _Optional[int] = ...) -> None: ...

class BufferStrategy(_message.Message):
    __slots__ = ("max_messages",)
    MAX_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    max_messages: int
    def __init__(self, max_messages: _Optional[int] = ...) -> None: ...

class WindowStrategy(_message.Message):
    __slots__ = ("window", "max_tokens", "token_encoding")
    WINDOW_FIELD_NUMBER: _ClassVar[int]
    MAX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TOKEN_ENCODING_FIELD_NUMBER: _ClassVar[int]
    window: int
    max_tokens: int
    token_encoding: str
    def __init__(self, window: _Optional[int] = ..., max_tokens: _Optional[int] = ..., token_encoding: _Optional[str] = ...) -> None: ...

class SummaryStrategy(_message.Message):
    __slots__ = ("window", "summarize_every", "model", "max_tokens", "token_encoding", "summary_placement")
    WINDOW_FIELD_NUMBER: _ClassVar[int]
    SUMMARIZE_EVERY_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    MAX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TOKEN_ENCODING_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_PLACEMENT_FIELD_NUMBER: _ClassVar[int]
    window: int
    summarize_every: int
    model: str
    max_tokens: int
    token_encoding: str
    summary_placement: SummaryPlacement
    def __init__(self, window: _Optional[int] = ..., summarize_every: _Optional[int] = ..., model: _Optional[str] = ..., max_tokens: _Optional[int] = ..., token_encoding: _Optional[str] = ..., summary_placement: _Optional[_Union[SummaryPlacement, str]] = ...) -> None: ...

class Thread(_message.Message):
    __slots__ = ("thread_id", "strategy", "last_seq", "summarized_through_seq", "create_time", "update_time", "labels", "ttl", "expire_time", "parent")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    STRATEGY_FIELD_NUMBER: _ClassVar[int]
    LAST_SEQ_FIELD_NUMBER: _ClassVar[int]
    SUMMARIZED_THROUGH_SEQ_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    UPDATE_TIME_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    TTL_FIELD_NUMBER: _ClassVar[int]
    EXPIRE_TIME_FIELD_NUMBER: _ClassVar[int]
    PARENT_FIELD_NUMBER: _ClassVar[int]
    thread_id: str
    strategy: Strategy
    last_seq: int
    summarized_through_seq: int
    create_time: _timestamp_pb2.Timestamp
    update_time: _timestamp_pb2.Timestamp
    labels: _containers.ScalarMap[str, str]
    ttl: _duration_pb2.Duration
    expire_time: _timestamp_pb2.Timestamp
    parent: ForkOrigin
    def __init__(self, thread_id: _Optional[str] = ..., strategy: _Optional[_Union[Strategy, _Mapping]] = ..., last_seq: _Optional[int] = ..., summarized_through_seq: _Optional[int] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., update_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., labels: _Optional[_Mapping[str, str]] = ..., ttl: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., expire_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., parent: _Optional[_Union[ForkOrigin, _Mapping]] = ...) -> None: ...

class ForkOrigin(_message.Message):
    __slots__ = ("thread_id", "at_seq", "fork_time", "parent_create_time")
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    AT_SEQ_FIELD_NUMBER: _ClassVar[int]
    FORK_TIME_FIELD_NUMBER: _ClassVar[int]
    PARENT_CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    thread_id: str
    at_seq: int
    fork_time: _timestamp_pb2.Timestamp
    parent_create_time: _timestamp_pb2.Timestamp
    def __init__(self, thread_id: _Optional[str] = ..., at_seq: _Optional[int] = ..., fork_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., parent_create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class AddRequest(_message.Message):
    __slots__ = ("thread_id", "messages", "strategy", "replace_strategy", "request_id", "expected_last_seq", "keep_strategy", "labels", "ttl")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    STRATEGY_FIELD_NUMBER: _ClassVar[int]
    REPLACE_STRATEGY_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_LAST_SEQ_FIELD_NUMBER: _ClassVar[int]
    KEEP_STRATEGY_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    TTL_FIELD_NUMBER: _ClassVar[int]
    thread_id: str
    messages: _containers.RepeatedCompositeFieldContainer[ChatMessage]
    strategy: Strategy
    replace_strategy: bool
    request_id: str
    expected_last_seq: int
    keep_strategy: bool
    labels: _containers.ScalarMap[str, str]
    ttl: _duration_pb2.Duration
    def __init__(self, thread_id: _Optional[str] = ..., messages: _Optional[_Iterable[_Union[ChatMessage, _Mapping]]] = ..., strategy: _Optional[_Union[Strategy, _Mapping]] = ..., replace_strategy: _Optional[bool] = ..., request_id: _Optional[str] = ..., expected_last_seq: _Optional[int] = ..., keep_strategy: _Optional[bool] = ..., labels: _Optional[_Mapping[str, str]] = ..., ttl: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class AddResponse(_message.Message):
    __slots__ = ("thread", "first_seq", "last_seq")
    THREAD_FIELD_NUMBER: _ClassVar[int]
    FIRST_SEQ_FIELD_NUMBER: _ClassVar[int]
    LAST_SEQ_FIELD_NUMBER: _ClassVar[int]
    thread: Thread
    first_seq: int
    last_seq: int
    def __init__(self, thread: _Optional[_Union[Thread, _Mapping]] = ..., first_seq: _Optional[int] = ..., last_seq: _Optional[int] = ...) -> None: ...

class GetRequest(_message.Message):
    __slots__ = ("thread_id", "limit", "query", "allow_stale", "max_tokens", "recall", "profile", "clear_tool_results")
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    QUERY_FIELD_NUMBER: _ClassVar[int]
    ALLOW_STALE_FIELD_NUMBER: _ClassVar[int]
    MAX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    RECALL_FIELD_NUMBER: _ClassVar[int]
    PROFILE_FIELD_NUMBER: _ClassVar[int]
    CLEAR_TOOL_RESULTS_FIELD_NUMBER: _ClassVar[int]
    thread_id: str
    limit: int
    query: str
    allow_stale: bool
    max_tokens: int
    recall: Strategy
    profile: Profile
    clear_tool_results: ToolResultClearing
    def __init__(self, thread_id: _Optional[str] = ..., limit: _Optional[int] = ..., query: _Optional[str] = ..., allow_stale: _Optional[bool] = ..., max_tokens: _Optional[int] = ..., recall: _Optional[_Union[Strategy, _Mapping]] = ..., profile: _Optional[_Union[Profile, str]] = ..., clear_tool_results: _Optional[_Union[ToolResultClearing, _Mapping]] = ...) -> None: ...

class GetResponse(_message.Message):
    __slots__ = ("messages", "summary", "thread", "degraded", "degraded_reason", "tokens", "max_tokens", "over_budget", "cleared_tool_results", "cleared_tool_tokens")
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    THREAD_FIELD_NUMBER: _ClassVar[int]
    DEGRADED_FIELD_NUMBER: _ClassVar[int]
    DEGRADED_REASON_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    MAX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    OVER_BUDGET_FIELD_NUMBER: _ClassVar[int]
    CLEARED_TOOL_RESULTS_FIELD_NUMBER: _ClassVar[int]
    CLEARED_TOOL_TOKENS_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[ChatMessage]
    summary: str
    thread: Thread
    degraded: bool
    degraded_reason: str
    tokens: int
    max_tokens: int
    over_budget: bool
    cleared_tool_results: int
    cleared_tool_tokens: int
    def __init__(self, messages: _Optional[_Iterable[_Union[ChatMessage, _Mapping]]] = ..., summary: _Optional[str] = ..., thread: _Optional[_Union[Thread, _Mapping]] = ..., degraded: _Optional[bool] = ..., degraded_reason: _Optional[str] = ..., tokens: _Optional[int] = ..., max_tokens: _Optional[int] = ..., over_budget: _Optional[bool] = ..., cleared_tool_results: _Optional[int] = ..., cleared_tool_tokens: _Optional[int] = ...) -> None: ...

class ClearRequest(_message.Message):
    __slots__ = ("thread_id", "all")
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    ALL_FIELD_NUMBER: _ClassVar[int]
    thread_id: str
    all: bool
    def __init__(self, thread_id: _Optional[str] = ..., all: _Optional[bool] = ...) -> None: ...

class ClearResponse(_message.Message):
    __slots__ = ("cleared_threads",)
    CLEARED_THREADS_FIELD_NUMBER: _ClassVar[int]
    cleared_threads: int
    def __init__(self, cleared_threads: _Optional[int] = ...) -> None: ...

class RewindRequest(_message.Message):
    __slots__ = ("thread_id", "to_seq", "expected_last_seq", "request_id")
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    TO_SEQ_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_LAST_SEQ_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    thread_id: str
    to_seq: int
    expected_last_seq: int
    request_id: str
    def __init__(self, thread_id: _Optional[str] = ..., to_seq: _Optional[int] = ..., expected_last_seq: _Optional[int] = ..., request_id: _Optional[str] = ...) -> None: ...

class RewindResponse(_message.Message):
    __slots__ = ("thread", "removed_count", "summary_dropped")
    THREAD_FIELD_NUMBER: _ClassVar[int]
    REMOVED_COUNT_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_DROPPED_FIELD_NUMBER: _ClassVar[int]
    thread: Thread
    removed_count: int
    summary_dropped: bool
    def __init__(self, thread: _Optional[_Union[Thread, _Mapping]] = ..., removed_count: _Optional[int] = ..., summary_dropped: _Optional[bool] = ...) -> None: ...

class ForkRequest(_message.Message):
    __slots__ = ("thread_id", "new_thread_id", "at_seq", "expected_last_seq", "request_id", "strategy", "labels", "ttl")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    NEW_THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    AT_SEQ_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_LAST_SEQ_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    STRATEGY_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    TTL_FIELD_NUMBER: _ClassVar[int]
    thread_id: str
    new_thread_id: str
    at_seq: int
    expected_last_seq: int
    request_id: str
    strategy: Strategy
    labels: _containers.ScalarMap[str, str]
    ttl: _duration_pb2.Duration
    def __init__(self, thread_id: _Optional[str] = ..., new_thread_id: _Optional[str] = ..., at_seq: _Optional[int] = ..., expected_last_seq: _Optional[int] = ..., request_id: _Optional[str] = ..., strategy: _Optional[_Union[Strategy, _Mapping]] = ..., labels: _Optional[_Mapping[str, str]] = ..., ttl: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class ForkResponse(_message.Message):
    __slots__ = ("thread", "shared_count", "summary_inherited")
    THREAD_FIELD_NUMBER: _ClassVar[int]
    SHARED_COUNT_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_INHERITED_FIELD_NUMBER: _ClassVar[int]
    thread: Thread
    shared_count: int
    summary_inherited: bool
    def __init__(self, thread: _Optional[_Union[Thread, _Mapping]] = ..., shared_count: _Optional[int] = ..., summary_inherited: _Optional[bool] = ...) -> None: ...

class ListThreadsRequest(_message.Message):
    __slots__ = ("page_size", "page_token", "labels", "forks_of", "include_threads")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    FORKS_OF_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_THREADS_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    labels: _containers.ScalarMap[str, str]
    forks_of: str
    include_threads: bool
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ..., forks_of: _Optional[str] = ..., include_threads: _Optional[bool] = ...) -> None: ...

class ListThreadsResponse(_message.Message):
    __slots__ = ("thread_ids", "next_page_token", "threads")
    THREAD_IDS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    THREADS_FIELD_NUMBER: _ClassVar[int]
    thread_ids: _containers.RepeatedScalarFieldContainer[str]
    next_page_token: str
    threads: _containers.RepeatedCompositeFieldContainer[Thread]
    def __init__(self, thread_ids: _Optional[_Iterable[str]] = ..., next_page_token: _Optional[str] = ..., threads: _Optional[_Iterable[_Union[Thread, _Mapping]]] = ...) -> None: ...

class WatchRequest(_message.Message):
    __slots__ = ("thread_ids", "event_types", "resume_token", "send_initial_state")
    THREAD_IDS_FIELD_NUMBER: _ClassVar[int]
    EVENT_TYPES_FIELD_NUMBER: _ClassVar[int]
    RESUME_TOKEN_FIELD_NUMBER: _ClassVar[int]
    SEND_INITIAL_STATE_FIELD_NUMBER: _ClassVar[int]
    thread_ids: _containers.RepeatedScalarFieldContainer[str]
    event_types: _containers.RepeatedScalarFieldContainer[EventType]
    resume_token: str
    send_initial_state: bool
    def __init__(self, thread_ids: _Optional[_Iterable[str]] = ..., event_types: _Optional[_Iterable[_Union[EventType, str]]] = ..., resume_token: _Optional[str] = ..., send_initial_state: _Optional[bool] = ...) -> None: ...

class WatchResponse(_message.Message):
    __slots__ = ("resume_token", "thread_id", "time", "summary_updated", "messages_added", "thread_cleared", "summary_failed", "progress", "thread_rewound", "thread_forked")
    RESUME_TOKEN_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_UPDATED_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_ADDED_FIELD_NUMBER: _ClassVar[int]
    THREAD_CLEARED_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FAILED_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    THREAD_REWOUND_FIELD_NUMBER: _ClassVar[int]
    THREAD_FORKED_FIELD_NUMBER: _ClassVar[int]
    resume_token: str
    thread_id: str
    time: _timestamp_pb2.Timestamp
    summary_updated: SummaryUpdated
    messages_added: MessagesAdded
    thread_cleared: ThreadCleared
    summary_failed: SummaryFailed
    progress: Progress
    thread_rewound: ThreadRewound
    thread_forked: ThreadForked
    def __init__(self, resume_token: _Optional[str] = ..., thread_id: _Optional[str] = ..., time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., summary_updated: _Optional[_Union[SummaryUpdated, _Mapping]] = ..., messages_added: _Optional[_Union[MessagesAdded, _Mapping]] = ..., thread_cleared: _Optional[_Union[ThreadCleared, _Mapping]] = ..., summary_failed: _Optional[_Union[SummaryFailed, _Mapping]] = ..., progress: _Optional[_Union[Progress, _Mapping]] = ..., thread_rewound: _Optional[_Union[ThreadRewound, _Mapping]] = ..., thread_forked: _Optional[_Union[ThreadForked, _Mapping]] = ...) -> None: ...

class SummaryUpdated(_message.Message):
    __slots__ = ("summary", "summarized_through_seq", "folded_count")
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    SUMMARIZED_THROUGH_SEQ_FIELD_NUMBER: _ClassVar[int]
    FOLDED_COUNT_FIELD_NUMBER: _ClassVar[int]
    summary: str
    summarized_through_seq: int
    folded_count: int
    def __init__(self, summary: _Optional[str] = ..., summarized_through_seq: _Optional[int] = ..., folded_count: _Optional[int] = ...) -> None: ...

class MessagesAdded(_message.Message):
    __slots__ = ("first_seq", "last_seq")
    FIRST_SEQ_FIELD_NUMBER: _ClassVar[int]
    LAST_SEQ_FIELD_NUMBER: _ClassVar[int]
    first_seq: int
    last_seq: int
    def __init__(self, first_seq: _Optional[int] = ..., last_seq: _Optional[int] = ...) -> None: ...

class ThreadCleared(_message.Message):
    __slots__ = ("reason",)
    REASON_FIELD_NUMBER: _ClassVar[int]
    reason: str
    def __init__(self, reason: _Optional[str] = ...) -> None: ...

class SummaryFailed(_message.Message):
    __slots__ = ("reason", "attempt")
    REASON_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    reason: str
    attempt: int
    def __init__(self, reason: _Optional[str] = ..., attempt: _Optional[int] = ...) -> None: ...

class ThreadRewound(_message.Message):
    __slots__ = ("to_seq", "removed_count", "summary_dropped")
    TO_SEQ_FIELD_NUMBER: _ClassVar[int]
    REMOVED_COUNT_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_DROPPED_FIELD_NUMBER: _ClassVar[int]
    to_seq: int
    removed_count: int
    summary_dropped: bool
    def __init__(self, to_seq: _Optional[int] = ..., removed_count: _Optional[int] = ..., summary_dropped: _Optional[bool] = ...) -> None: ...

class ThreadForked(_message.Message):
    __slots__ = ("parent_thread_id", "at_seq", "shared_count", "summary_inherited")
    PARENT_THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    AT_SEQ_FIELD_NUMBER: _ClassVar[int]
    SHARED_COUNT_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_INHERITED_FIELD_NUMBER: _ClassVar[int]
    parent_thread_id: str
    at_seq: int
    shared_count: int
    summary_inherited: bool
    def __init__(self, parent_thread_id: _Optional[str] = ..., at_seq: _Optional[int] = ..., shared_count: _Optional[int] = ..., summary_inherited: _Optional[bool] = ...) -> None: ...

class Progress(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...
