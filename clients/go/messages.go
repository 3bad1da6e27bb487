package memory

import (
	memoryv1 "github.com/windlass-ai/windlass-memory/gen/go/windlass/memory/v1"
	"google.golang.org/protobuf/proto"
)

// The generated types, under shorter names.
type (
	// Message is one chat message of a thread.
	Message = memoryv1.ChatMessage
	// ToolCall is one function call requested by an assistant message.
	ToolCall = memoryv1.ToolCall
	// Strategy says how Get shapes a thread.
	Strategy = memoryv1.Strategy
	// Thread describes a stored thread.
	Thread = memoryv1.Thread
	// AddResponse reports where Add stored the messages.
	AddResponse = memoryv1.AddResponse
	// GetResponse is a thread shaped by its strategy.
	GetResponse = memoryv1.GetResponse
	// Event is one Watch event; its oneof getters (GetMessagesAdded,
	// GetSummaryUpdated, …) say what happened.
	Event = memoryv1.WatchResponse
	// EventType selects events in a WatchFilter.
	EventType = memoryv1.EventType
)

// Event types for WatchFilter.Types.
const (
	EventSummaryUpdated = memoryv1.EventType_EVENT_TYPE_SUMMARY_UPDATED
	EventMessagesAdded  = memoryv1.EventType_EVENT_TYPE_MESSAGES_ADDED
	EventThreadCleared  = memoryv1.EventType_EVENT_TYPE_THREAD_CLEARED
	EventSummaryFailed  = memoryv1.EventType_EVENT_TYPE_SUMMARY_FAILED
	EventThreadRewound  = memoryv1.EventType_EVENT_TYPE_THREAD_REWOUND
	EventThreadForked   = memoryv1.EventType_EVENT_TYPE_THREAD_FORKED
)

// System is a system message (instructions for the model).
func System(content string) *Message {
	return &Message{Role: memoryv1.Role_ROLE_SYSTEM, Content: content}
}

// User is a user message.
func User(content string) *Message {
	return &Message{Role: memoryv1.Role_ROLE_USER, Content: content}
}

// Assistant is an assistant message, with the tool calls it makes, if any.
func Assistant(content string, calls ...*ToolCall) *Message {
	return &Message{Role: memoryv1.Role_ROLE_ASSISTANT, Content: content, ToolCalls: calls}
}

// Call is a tool call for Assistant: its id, the tool's name and the
// arguments as JSON text.
func Call(id, name, argumentsJSON string) *ToolCall {
	return &ToolCall{Id: id, Name: name, Arguments: argumentsJSON}
}

// ToolResult is the tool message answering the call with id callID.
func ToolResult(callID, content string) *Message {
	return &Message{Role: memoryv1.Role_ROLE_TOOL, ToolCallId: callID, Content: content}
}

// StrategyOption sets what every strategy has (ExcludeSystem, MaxStored).
// It is accepted by Buffer, Window and Summary.
type StrategyOption func(*Strategy)

func (o StrategyOption) applyBuffer(s *Strategy)  { o(s) }
func (o StrategyOption) applySummary(s *Strategy) { o(s) }

// BufferOption configures Buffer: MaxMessages or a StrategyOption.
type BufferOption interface{ applyBuffer(*Strategy) }

// SummaryOption configures Summary: SummaryWindow, SummarizeEvery,
// SummaryModel or a StrategyOption.
type SummaryOption interface{ applySummary(*Strategy) }

type bufferOption func(*memoryv1.BufferStrategy)

func (o bufferOption) applyBuffer(s *Strategy) { o(s.GetBuffer()) }

type summaryOption func(*memoryv1.SummaryStrategy)

func (o summaryOption) applySummary(s *Strategy) { o(s.GetSummary()) }

// ExcludeSystem leaves system messages out of Get.
func ExcludeSystem() StrategyOption { return func(s *Strategy) { s.ExcludeSystem = true } }

// MaxStored caps the messages kept per thread (the oldest are dropped
// beyond it). Server default 1000; 0 is refused.
func MaxStored(n uint32) StrategyOption { return func(s *Strategy) { s.MaxStored = proto.Uint32(n) } }

// Buffer keeps and returns the whole thread.
func Buffer(opts ...BufferOption) *Strategy {
	s := &Strategy{Kind: &memoryv1.Strategy_Buffer{Buffer: &memoryv1.BufferStrategy{}}}
	for _, o := range opts {
		o.applyBuffer(s)
	}
	return s
}

// MaxMessages makes Get of a Buffer thread return only the newest n (0: all).
func MaxMessages(n uint32) BufferOption {
	return bufferOption(func(b *memoryv1.BufferStrategy) { b.MaxMessages = proto.Uint32(n) })
}

// Window returns the newest n messages, never starting on an orphaned tool
// result. n must be at least 1.
func Window(n uint32, opts ...StrategyOption) *Strategy {
	s := &Strategy{Kind: &memoryv1.Strategy_Window{Window: &memoryv1.WindowStrategy{Window: proto.Uint32(n)}}}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Summary keeps recent messages verbatim and folds older ones into a running
// summary. Unset options take the server's defaults (window 10, fold every 6,
// the default summariser).
func Summary(opts ...SummaryOption) *Strategy {
	s := &Strategy{Kind: &memoryv1.Strategy_Summary{Summary: &memoryv1.SummaryStrategy{}}}
	for _, o := range opts {
		o.applySummary(s)
	}
	return s
}

// SummaryWindow is how many recent messages stay verbatim.
func SummaryWindow(n uint32) SummaryOption {
	return summaryOption(func(s *memoryv1.SummaryStrategy) { s.Window = proto.Uint32(n) })
}

// SummarizeEvery folds once at least n messages lie outside the window.
func SummarizeEvery(n uint32) SummaryOption {
	return summaryOption(func(s *memoryv1.SummaryStrategy) { s.SummarizeEvery = proto.Uint32(n) })
}

// SummaryModel names a summariser configured on the server.
func SummaryModel(name string) SummaryOption {
	return summaryOption(func(s *memoryv1.SummaryStrategy) { s.Model = name })
}
