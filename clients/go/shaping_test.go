package memory_test

import (
	"regexp"
	"strings"
	"testing"
	"time"

	memory "github.com/windlass-ai/windlass-memory/clients/go"
	memoryv1 "github.com/windlass-ai/windlass-memory/gen/go/windlass/memory/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// outOfShape starts on an assistant turn, has two user messages in a row
// and a system message last: no provider with alternating turns takes it.
func outOfShape() []*memory.Message {
	return []*memory.Message{
		memory.Assistant("Hello, how can I help?"),
		memory.User("Hi."),
		memory.User("What is the weather in Oslo?"),
		memory.Assistant("", memory.Call("w1", "weather", `{"city":"Oslo"}`)),
		memory.ToolResult("w1", "rain, 8 C"),
		memory.System("Answer in one line."),
	}
}

const (
	report2024 = "Revenue grew in every quarter of 2024, led by the northern region, while costs stayed flat and margins widened."
	report2025 = "Revenue fell in the first half of 2025, as orders from the southern region slowed, and recovered in the second half, when costs fell."
)

func twoToolTurns() []*memory.Message {
	return []*memory.Message{
		memory.User("Compare the two reports."),
		memory.Assistant("", memory.Call("r1", "read_report", `{"year":2024}`)),
		memory.ToolResult("r1", report2024),
		memory.Assistant("", memory.Call("r2", "read_report", `{"year":2025}`)),
		memory.ToolResult("r2", report2025),
	}
}

func contents(got *memory.GetResponse) []string {
	var out []string
	for _, m := range got.GetMessages() {
		out = append(out, strings.ToLower(strings.TrimPrefix(m.GetRole().String(), "ROLE_"))+":"+m.GetContent())
	}
	return out
}

func TestProfilesShapeTheList(t *testing.T) {
	s := startServer(t, nil)
	c := dial(t, s.addr)
	ctx := testContext(t, 60*time.Second)
	if _, err := c.Add(ctx, "profiles", outOfShape()...); err != nil {
		t.Fatal(err)
	}
	plain, err := c.Get(ctx, "profiles")
	if err != nil || len(plain.GetMessages()) != 6 {
		t.Fatalf("no profile: %v, %v; want the 6 stored", contents(plain), err)
	}
	chat, err := c.Get(ctx, "profiles", memory.WithProfile(memory.ProfileOpenAIChat))
	if err != nil || strings.Join(contents(chat), "|") != strings.Join(contents(plain), "|") {
		t.Fatalf("openai_chat: %v, %v; want the stored order", contents(chat), err)
	}
	want := []string{"system:Answer in one line.", "user:Hi.\n\nWhat is the weather in Oslo?", "assistant:", "tool:rain, 8 C"}
	for _, p := range []memory.Profile{memory.ProfileAnthropic, memory.ProfileGemini, memory.ProfileBedrockConverse} {
		got, err := c.Get(ctx, "profiles", memory.WithProfile(p))
		if err != nil || strings.Join(contents(got), "|") != strings.Join(want, "|") {
			t.Fatalf("%v: %q, %v; want %q", p, contents(got), err, want)
		}
	}
}

var placeholder = regexp.MustCompile(`^\[tool result cleared: read_report call r1, \d+ tokens\]$`)

func TestClearToolResultsReturnsPlaceholdersAndCounts(t *testing.T) {
	s := startServer(t, nil)
	c := dial(t, s.addr)
	ctx := testContext(t, 60*time.Second)
	if _, err := c.AddWith(ctx, "clear", twoToolTurns(), memory.WithStrategy(memory.Window(20))); err != nil {
		t.Fatal(err)
	}
	whole, err := c.Get(ctx, "clear")
	if err != nil || whole.GetClearedToolResults() != 0 || whole.GetClearedToolTokens() != 0 {
		t.Fatalf("no clearing: %v cleared, %v", whole.GetClearedToolResults(), err)
	}
	got, err := c.Get(ctx, "clear", memory.ClearToolResults(memory.KeepToolTurns(1)))
	if err != nil {
		t.Fatal(err)
	}
	msgs := got.GetMessages()
	if !placeholder.MatchString(msgs[2].GetContent()) || msgs[2].GetToolCallId() != "r1" || msgs[4].GetContent() != report2025 {
		t.Fatalf("KeepToolTurns(1): %q", contents(got))
	}
	if got.GetClearedToolResults() != 1 || got.GetClearedToolTokens() == 0 ||
		got.GetTokens() != whole.GetTokens()-got.GetClearedToolTokens() {
		t.Fatalf("counts: %d cleared, %d saved, tokens %d of %d", got.GetClearedToolResults(),
			got.GetClearedToolTokens(), got.GetTokens(), whole.GetTokens())
	}
	most, err := c.Get(ctx, "clear", memory.ClearToolResults(memory.KeepToolTurns(memory.MaxKeepToolTurns),
		memory.KeepToolTokens(memory.MaxKeepToolTokens)))
	if err != nil || most.GetClearedToolResults() != 0 {
		t.Fatalf("the largest limits: %v cleared, %v", most.GetClearedToolResults(), err)
	}
}

func TestToolClearingInTheStrategyAppliesToEveryGet(t *testing.T) {
	s := startServer(t, nil)
	c := dial(t, s.addr)
	ctx := testContext(t, 60*time.Second)
	msgs := append([]*memory.Message{memory.Assistant("Welcome back.")}, twoToolTurns()...)
	strategy := memory.Window(20, memory.ToolClearing(memory.KeepToolTurns(0)))
	if _, err := c.AddWith(ctx, "strategy", msgs, memory.WithStrategy(strategy)); err != nil {
		t.Fatal(err)
	}
	every, err := c.Get(ctx, "strategy")
	if err != nil || every.GetClearedToolResults() != 2 || every.GetThread().GetStrategy().GetClearToolResults() == nil {
		t.Fatalf("the strategy's clearing: %d cleared, %v", every.GetClearedToolResults(), err)
	}
	kept, err := c.Get(ctx, "strategy", memory.ClearToolResults(memory.KeepToolTokens(10_000)))
	if err != nil || kept.GetClearedToolResults() != 0 {
		t.Fatalf("a Get's own clearing: %d cleared, %v", kept.GetClearedToolResults(), err)
	}
	shaped, err := c.Get(ctx, "strategy", memory.WithProfile(memory.ProfileAnthropic))
	if err != nil || shaped.GetMessages()[0].GetContent() != "Compare the two reports." || shaped.GetClearedToolResults() != 2 {
		t.Fatalf("with a profile: %q, %v", contents(shaped), err)
	}
	// A Recall strategy's clearing applies the same way.
	recalled, err := c.Get(ctx, "strategy", memory.Recall(memory.Buffer(memory.ToolClearing(memory.KeepToolTurns(1)))))
	if err != nil || recalled.GetClearedToolResults() != 1 {
		t.Fatalf("recall's clearing: %d cleared, %v", recalled.GetClearedToolResults(), err)
	}
}

func TestBadShapingIsRefusedBeforeTheCall(t *testing.T) {
	// Nothing listens on port 9: a request that were sent would fail with
	// UNAVAILABLE, not INVALID_ARGUMENT.
	c := dial(t, "127.0.0.1:9", memory.WithTimeout(2*time.Second))
	ctx := testContext(t, 30*time.Second)
	for _, tc := range []struct {
		name  string
		opt   memory.GetOption
		field string
	}{
		{"unknown profile", memory.WithProfile(memory.Profile(99)), "profile: unknown value 99"},
		{"no limit", memory.ClearToolResults(), "clear_tool_results: set KeepToolTurns"},
		{"too many turns", memory.ClearToolResults(memory.KeepToolTurns(memory.MaxKeepToolTurns + 1)), "clear_tool_results.keep_tool_turns: at most 100000"},
		{"too many tokens", memory.ClearToolResults(memory.KeepToolTokens(memory.MaxKeepToolTokens + 1)), "clear_tool_results.keep_tool_tokens: at most 10000000"},
		{"recall's clearing", memory.Recall(memory.Window(5, memory.ToolClearing())), "recall.clear_tool_results: set"},
	} {
		_, err := c.Get(ctx, "t", tc.opt)
		if !memory.IsInvalidArgument(err) || !strings.Contains(status.Convert(err).Message(), tc.field) {
			t.Errorf("%s: %v; want INVALID_ARGUMENT naming %q", tc.name, err, tc.field)
		}
	}
	_, err := c.AddWith(ctx, "t", []*memory.Message{memory.User("a")},
		memory.WithStrategy(memory.Summary(memory.ToolClearing(memory.KeepToolTokens(memory.MaxKeepToolTokens+1)))))
	if !memory.IsInvalidArgument(err) || !strings.Contains(err.Error(), "strategy.clear_tool_results.keep_tool_tokens") {
		t.Errorf("AddWith: %v; want INVALID_ARGUMENT naming strategy.clear_tool_results.keep_tool_tokens", err)
	}
	if _, err := c.Get(ctx, "t"); status.Code(err) != codes.Unavailable && status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("a Get that is sent: %v; want it to fail reaching the server", err)
	}
}

func TestParseProfileReadsEveryDocumentedSpelling(t *testing.T) {
	for name, want := range map[string]memory.Profile{
		"anthropic": memory.ProfileAnthropic, "PROFILE_ANTHROPIC": memory.ProfileAnthropic,
		"Bedrock_Converse": memory.ProfileBedrockConverse, "openai_chat": memory.ProfileOpenAIChat,
		"openai_responses": memory.ProfileOpenAIResponses, " gemini ": memory.ProfileGemini,
	} {
		if got, err := memory.ParseProfile(name); err != nil || got != want {
			t.Errorf("ParseProfile(%q) = %v, %v; want %v", name, got, err, want)
		}
	}
	for _, name := range []string{"", "unspecified", "PROFILE_UNSPECIFIED", "antropic", "openai"} {
		if _, err := memory.ParseProfile(name); err == nil || !strings.Contains(err.Error(), "unknown profile") {
			t.Errorf("ParseProfile(%q): %v; want an unknown-profile error", name, err)
		}
	}
	// Every profile of the proto has a name ParseProfile reads.
	for number, name := range memoryv1.Profile_name {
		if number == 0 {
			continue
		}
		if got, err := memory.ParseProfile(strings.TrimPrefix(name, "PROFILE_")); err != nil || int32(got) != number {
			t.Errorf("ParseProfile(%q) = %v, %v", name, got, err)
		}
	}
}
