package memory

import (
	"fmt"
	"strings"

	memoryv1 "github.com/windlass-ai/windlass-memory/gen/go/windlass/memory/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// Provider profiles and tool-output clearing: the Get options that shape a
// list for a model (the repository README, "Provider profiles" and
// "Clearing old tool output"). Get and AddWith check them before the call,
// so a bad value fails at once with an INVALID_ARGUMENT status naming the
// field, as the server's own would, and nothing is sent.

type (
	// Profile names a model provider whose request rules Get shapes its list to.
	Profile = memoryv1.Profile
	// ToolResultClearing says which old tool results Get returns as a placeholder.
	ToolResultClearing = memoryv1.ToolResultClearing
)

// The provider profiles for WithProfile.
const (
	// ProfileOpenAIChat: OpenAI Chat Completions; system messages stay where they are.
	ProfileOpenAIChat = memoryv1.Profile_PROFILE_OPENAI_CHAT
	// ProfileOpenAIResponses: OpenAI Responses input items; as ProfileOpenAIChat.
	ProfileOpenAIResponses = memoryv1.Profile_PROFILE_OPENAI_RESPONSES
	// ProfileAnthropic: Anthropic Messages; system messages first, a user
	// turn first, consecutive same-role messages merged.
	ProfileAnthropic = memoryv1.Profile_PROFILE_ANTHROPIC
	// ProfileGemini: Google Gemini; as ProfileAnthropic.
	ProfileGemini = memoryv1.Profile_PROFILE_GEMINI
	// ProfileBedrockConverse: Amazon Bedrock Converse; as ProfileAnthropic.
	ProfileBedrockConverse = memoryv1.Profile_PROFILE_BEDROCK_CONVERSE
)

// The server's limits (proto ToolResultClearing).
const (
	MaxKeepToolTurns  = 100_000
	MaxKeepToolTokens = 10_000_000
)

// ParseProfile reads a profile by name, as a configuration file or flag
// gives it: "anthropic", "bedrock_converse" or the proto's
// "PROFILE_ANTHROPIC", in any letter case.
func ParseProfile(name string) (Profile, error) {
	key := "PROFILE_" + strings.TrimPrefix(strings.ToUpper(strings.TrimSpace(name)), "PROFILE_")
	if v, ok := memoryv1.Profile_value[key]; ok && v != 0 {
		return Profile(v), nil
	}
	return 0, fmt.Errorf("memory: unknown profile %q; expected one of openai_chat, openai_responses, anthropic, gemini, bedrock_converse", name)
}

// WithProfile shapes this Get to a provider's request rules, after the
// strategy's cut and after tool-output clearing.
func WithProfile(p Profile) GetOption {
	return func(r *memoryv1.GetRequest) { r.Profile = p }
}

// ClearingOption sets a limit of a ToolResultClearing. At least one is needed.
type ClearingOption func(*ToolResultClearing)

// KeepToolTurns keeps the results of the newest n tool turns whole and
// clears older ones (0: every result is cleared). At most MaxKeepToolTurns.
func KeepToolTurns(n uint32) ClearingOption {
	return func(c *ToolResultClearing) { c.KeepToolTurns = proto.Uint32(n) }
}

// KeepToolTokens keeps results whole, newest first, while their tokens sum
// to at most n; that result and older ones are cleared. At most
// MaxKeepToolTokens.
func KeepToolTokens(n uint32) ClearingOption {
	return func(c *ToolResultClearing) { c.KeepToolTokens = proto.Uint32(n) }
}

func clearing(opts []ClearingOption) *ToolResultClearing {
	c := &ToolResultClearing{}
	for _, o := range opts {
		o(c)
	}
	return c
}

// ClearToolResults returns old tool results of this Get as a placeholder,
// replacing the strategy's clearing; GetResponse.GetClearedToolResults and
// GetClearedToolTokens say how many and what that saved.
func ClearToolResults(opts ...ClearingOption) GetOption {
	c := clearing(opts)
	return func(r *memoryv1.GetRequest) { r.ClearToolResults = c }
}

// ToolClearing is the strategy's tool-output clearing: every Get of the
// thread (or every Get that recalls with the strategy) applies it, unless
// the Get has ClearToolResults of its own.
func ToolClearing(opts ...ClearingOption) StrategyOption {
	c := clearing(opts)
	return func(s *Strategy) { s.ClearToolResults = c }
}

// checkGet refuses, before the call, a Get the server would refuse for its
// profile or clearing.
func checkGet(r *memoryv1.GetRequest) error {
	if _, known := memoryv1.Profile_name[int32(r.GetProfile())]; !known {
		return status.Errorf(codes.InvalidArgument, "profile: unknown value %d", r.GetProfile())
	}
	if err := checkClearing("clear_tool_results", r.GetClearToolResults()); err != nil {
		return err
	}
	return checkClearing("recall.clear_tool_results", r.GetRecall().GetClearToolResults())
}

func checkClearing(field string, c *ToolResultClearing) error {
	switch {
	case c == nil:
		return nil
	case c.KeepToolTurns == nil && c.KeepToolTokens == nil:
		return status.Errorf(codes.InvalidArgument, "%s: set KeepToolTurns, KeepToolTokens or both", field)
	case c.GetKeepToolTurns() > MaxKeepToolTurns:
		return status.Errorf(codes.InvalidArgument, "%s.keep_tool_turns: at most %d, got %d", field, MaxKeepToolTurns, c.GetKeepToolTurns())
	case c.GetKeepToolTokens() > MaxKeepToolTokens:
		return status.Errorf(codes.InvalidArgument, "%s.keep_tool_tokens: at most %d, got %d", field, MaxKeepToolTokens, c.GetKeepToolTokens())
	}
	return nil
}
