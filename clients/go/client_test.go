package memory_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"testing"
	"time"

	memory "github.com/windlass-ai/windlass-memory/clients/go"
	memoryv1 "github.com/windlass-ai/windlass-memory/gen/go/windlass/memory/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

func TestFirstCalls(t *testing.T) {
	s := startServer(t, nil)
	c := dial(t, s.addr)
	ctx := testContext(t, 60*time.Second)

	added, err := c.AddWith(ctx, "first", []*memory.Message{
		memory.System("be brief"),
		memory.User("weather in Paris?"),
		memory.Assistant("", memory.Call("call-1", "get_weather", `{"city":"Paris"}`)),
		memory.ToolResult("call-1", "18 degrees"),
		memory.Assistant("18 degrees."),
	}, memory.WithStrategy(memory.Window(3, memory.ExcludeSystem())))
	if err != nil {
		t.Fatal(err)
	}
	if added.GetFirstSeq() != 1 || added.GetLastSeq() != 5 {
		t.Fatalf("seqs %d..%d, want 1..5", added.GetFirstSeq(), added.GetLastSeq())
	}
	got, err := c.Get(ctx, "first")
	if err != nil {
		t.Fatal(err)
	}
	var seqs []uint64
	for _, m := range got.GetMessages() {
		seqs = append(seqs, m.GetSeq())
	}
	// The newest 3, without the system message.
	if !slices.Equal(seqs, []uint64{3, 4, 5}) {
		t.Fatalf("window seqs %v, want [3 4 5]", seqs)
	}
	call := got.GetMessages()[0].GetToolCalls()[0]
	if call.GetId() != "call-1" || call.GetName() != "get_weather" || call.GetArguments() != `{"city":"Paris"}` {
		t.Fatalf("tool call came back as %v", call)
	}
	if got.GetMessages()[1].GetToolCallId() != "call-1" || got.GetMessages()[1].GetRole() != memoryv1.Role_ROLE_TOOL {
		t.Fatalf("tool result came back as %v", got.GetMessages()[1])
	}
	limited, err := c.Get(ctx, "first", memory.Limit(1))
	if err != nil || len(limited.GetMessages()) != 1 {
		t.Fatalf("Get with Limit(1): %v, %v", limited, err)
	}

	missing, err := c.Get(ctx, "never-written")
	if err != nil || missing.GetThread() != nil || len(missing.GetMessages()) != 0 {
		t.Fatalf("a missing thread: %v, %v", missing, err)
	}

	cleared, err := c.Clear(ctx, "first")
	if err != nil || cleared != 1 {
		t.Fatalf("Clear: %d, %v", cleared, err)
	}
	if got, _ := c.Get(ctx, "first"); len(got.GetMessages()) != 0 {
		t.Fatalf("after Clear the thread still has %d messages", len(got.GetMessages()))
	}
}

func TestRecallAndKeepStrategyGiveEachReaderItsOwnView(t *testing.T) {
	s := startServer(t, nil)
	c := dial(t, s.addr)
	ctx := testContext(t, 60*time.Second)

	if _, err := c.AddWith(ctx, "views", []*memory.Message{memory.User("one"), memory.User("two"), memory.User("three")},
		memory.WithStrategy(memory.Window(2))); err != nil {
		t.Fatal(err)
	}
	added, err := c.AddWith(ctx, "views", []*memory.Message{memory.User("four")}, memory.KeepStrategy(memory.Window(1)))
	if err != nil {
		t.Fatalf("Add with KeepStrategy: %v", err)
	}
	if w := added.GetThread().GetStrategy().GetWindow().GetWindow(); w != 2 {
		t.Fatalf("the thread's window is %d after KeepStrategy, want 2", w)
	}
	contents := func(opts ...memory.GetOption) []string {
		t.Helper()
		got, err := c.Get(ctx, "views", opts...)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, m := range got.GetMessages() {
			out = append(out, m.GetContent())
		}
		return out
	}
	if got := contents(memory.Recall(memory.Window(1))); !slices.Equal(got, []string{"four"}) {
		t.Fatalf("Recall(Window(1)): %v", got)
	}
	if got := contents(memory.Recall(memory.Buffer())); !slices.Equal(got, []string{"one", "two", "three", "four"}) {
		t.Fatalf("Recall(Buffer(0)): %v", got)
	}
	if got := contents(); !slices.Equal(got, []string{"three", "four"}) {
		t.Fatalf("Get without Recall: %v", got)
	}
	// Without KeepStrategy the other strategy is still a conflict.
	_, err = c.AddWith(ctx, "views", []*memory.Message{memory.User("five")}, memory.WithStrategy(memory.Window(1)))
	if !memory.IsStrategyConflict(err) {
		t.Fatalf("Add with another strategy: %v, want a strategy conflict", err)
	}
}

func TestStrategiesAreBuiltWithoutPointers(t *testing.T) {
	want := &memoryv1.Strategy{
		Kind: &memoryv1.Strategy_Summary{Summary: &memoryv1.SummaryStrategy{
			Window: proto.Uint32(4), SummarizeEvery: proto.Uint32(2), Model: "default",
		}},
		ExcludeSystem: true,
		MaxStored:     proto.Uint32(50),
	}
	got := memory.Summary(memory.SummaryWindow(4), memory.SummarizeEvery(2), memory.SummaryModel("default"),
		memory.ExcludeSystem(), memory.MaxStored(50))
	if !proto.Equal(got, want) {
		t.Fatalf("Summary(...) = %v, want %v", got, want)
	}
	buffer := memory.Buffer(memory.MaxMessages(7))
	if buffer.GetBuffer().GetMaxMessages() != 7 || buffer.GetBuffer().MaxMessages == nil {
		t.Fatalf("Buffer(MaxMessages(7)) = %v", buffer)
	}
	if memory.Buffer().GetBuffer() == nil || memory.Buffer().GetBuffer().MaxMessages != nil {
		t.Fatalf("Buffer() = %v, want an empty buffer strategy", memory.Buffer())
	}
}

func TestSummaryThreadWithTheExtractiveSummariser(t *testing.T) {
	s := startServer(t, nil)
	c := dial(t, s.addr)
	ctx := testContext(t, 60*time.Second)
	var msgs []*memory.Message
	for i := range 8 {
		msgs = append(msgs, memory.User(fmt.Sprintf("Fact number %d is that the sky is blue.", i)))
	}
	if _, err := c.AddWith(ctx, "sum", msgs, memory.WithStrategy(memory.Summary(memory.SummaryWindow(2), memory.SummarizeEvery(2)))); err != nil {
		t.Fatal(err)
	}
	got, err := c.Get(ctx, "sum")
	if err != nil {
		t.Fatal(err)
	}
	if got.GetSummary() == "" || got.GetThread().GetSummarizedThroughSeq() != 6 {
		t.Fatalf("summary %q through %d, want a summary through seq 6 (%v)", got.GetSummary(),
			got.GetThread().GetSummarizedThroughSeq(), got)
	}
}

func TestErrorsCarryTheirCode(t *testing.T) {
	s := startServer(t, nil)
	c := dial(t, s.addr)
	ctx := testContext(t, 60*time.Second)
	if _, err := c.AddWith(ctx, "e", []*memory.Message{memory.User("a")}, memory.WithStrategy(memory.Window(5))); err != nil {
		t.Fatal(err)
	}

	_, err := c.AddWith(ctx, "e", []*memory.Message{memory.User("b")}, memory.WithStrategy(memory.Buffer()))
	if !memory.IsStrategyConflict(err) || status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("another strategy: %v, want FAILED_PRECONDITION", err)
	}
	_, err = c.AddWith(ctx, "e", []*memory.Message{memory.User("b")}, memory.ExpectedLastSeq(7))
	if !memory.IsSeqConflict(err) {
		t.Fatalf("a wrong expected_last_seq: %v, want ABORTED", err)
	}
	_, err = c.AddWith(ctx, "bad", []*memory.Message{memory.User("b")}, memory.WithStrategy(memory.Window(0)))
	if !memory.IsInvalidArgument(err) {
		t.Fatalf("window 0: %v, want INVALID_ARGUMENT", err)
	}
	if _, err := c.Add(ctx, "e", &memory.Message{Content: "no role"}); memory.Code(err) != codes.InvalidArgument {
		t.Fatalf("a message without a role: %v, want INVALID_ARGUMENT", err)
	}
	// Nothing refused was stored; the matching expected_last_seq and
	// ReplaceStrategy go through.
	added, err := c.AddWith(ctx, "e", []*memory.Message{memory.User("b")}, memory.ExpectedLastSeq(1),
		memory.ReplaceStrategy(memory.Buffer()))
	if err != nil || added.GetFirstSeq() != 2 || added.GetThread().GetStrategy().GetBuffer() == nil {
		t.Fatalf("Add with ExpectedLastSeq(1) and ReplaceStrategy: %v, %v", added, err)
	}
}

func TestRequestIDMakesARepeatedAddAFirstCallReplay(t *testing.T) {
	s := startServer(t, nil)
	c := dial(t, s.addr)
	ctx := testContext(t, 60*time.Second)
	for range 2 {
		added, err := c.AddWith(ctx, "idem", []*memory.Message{memory.User("once")}, memory.RequestID("my-key-1"))
		if err != nil || added.GetLastSeq() != 1 {
			t.Fatalf("Add with a fixed RequestID: %v, %v", added, err)
		}
	}
}

func TestThreadsIteratesEveryPage(t *testing.T) {
	s := startServer(t, nil)
	c := dial(t, s.addr)
	ctx := testContext(t, 60*time.Second)
	var want []string
	for i := range 7 {
		id := fmt.Sprintf("thread-%02d", i)
		want = append(want, id)
		if _, err := c.Add(ctx, id, memory.User("hi")); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	for id, err := range c.Threads(ctx, 2) {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, id)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("Threads = %v, want %v", got, want)
	}
	// Breaking out of the loop stops it.
	n := 0
	for range c.Threads(ctx, 2) {
		if n++; n == 3 {
			break
		}
	}
	if n != 3 {
		t.Fatalf("break after 3 saw %d", n)
	}
	cleared, err := c.ClearAll(ctx)
	if err != nil || cleared != 7 {
		t.Fatalf("ClearAll: %d, %v", cleared, err)
	}
	for id, err := range c.Threads(ctx, 0) {
		t.Fatalf("after ClearAll Threads yields %q, %v", id, err)
	}
	// An error ends the iteration with the error.
	down := dial(t, startProxy(t, "").addr(), memory.WithRetry(1, time.Millisecond, time.Millisecond))
	var errs []error
	for _, err := range down.Threads(ctx, 0) {
		errs = append(errs, err)
	}
	if len(errs) != 1 || !memory.IsUnavailable(errs[0]) {
		t.Fatalf("a server that is down yields %v, want one UNAVAILABLE", errs)
	}
}

func TestTokenSelectsTheNamespace(t *testing.T) {
	s := startServer(t, []string{"WINDLASS_AUTH_TOKENS=token-a=ns-a,token-b=ns-b"})
	ctx := testContext(t, 60*time.Second)
	a := dial(t, s.addr, memory.WithToken("token-a"))
	b := dial(t, s.addr, memory.WithToken("token-b"))
	if _, err := a.Add(ctx, "mine", memory.User("secret")); err != nil {
		t.Fatal(err)
	}
	if got, err := b.Get(ctx, "mine"); err != nil || len(got.GetMessages()) != 0 {
		t.Fatalf("another namespace sees %v, %v", got, err)
	}
	if got, err := a.Get(ctx, "mine"); err != nil || len(got.GetMessages()) != 1 {
		t.Fatalf("the owner sees %v, %v", got, err)
	}
	_, err := dial(t, s.addr).Get(ctx, "mine")
	if memory.Code(err) != codes.Unauthenticated {
		t.Fatalf("no token: %v, want UNAUTHENTICATED", err)
	}
}

func TestDefaultTimeoutBoundsACallWithoutDeadline(t *testing.T) {
	// A listener that accepts and never answers: only the timeout ends the call.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			defer conn.Close()
		}
	}()
	c := dial(t, ln.Addr().String(), memory.WithTimeout(300*time.Millisecond))
	start := time.Now()
	_, err = c.Get(context.Background(), "t")
	if memory.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("Get against a silent server: %v, want DEADLINE_EXCEEDED", err)
	}
	if waited := time.Since(start); waited > 20*time.Second {
		t.Fatalf("the 300ms timeout took %v", waited)
	}
}

func TestDialRefusesBadOptions(t *testing.T) {
	if _, err := memory.Dial("127.0.0.1:1", memory.WithRetry(0, time.Second, time.Second)); err == nil {
		t.Fatal("WithRetry(0, ...) was accepted")
	}
	if _, err := memory.Dial("127.0.0.1:1", memory.WithTimeout(-time.Second)); err == nil {
		t.Fatal("a negative timeout was accepted")
	}
}

// countMessages reads the thread straight from the server.
func countMessages(t *testing.T, ctx context.Context, c *memory.Client, thread string) []string {
	t.Helper()
	got, err := c.Get(ctx, thread, memory.Limit(0))
	if err != nil {
		t.Fatal(err)
	}
	var contents []string
	for _, m := range got.GetMessages() {
		contents = append(contents, m.GetContent())
	}
	return contents
}

func TestAddRetriedAfterADroppedConnectionStoresOnce(t *testing.T) {
	s := startServer(t, nil)
	direct := dial(t, s.addr)
	for _, tc := range []struct {
		name string
		mode dropMode
	}{
		{"dropped after the server answered", dropAfterResponse},
		{"dropped after the request was forwarded", dropAfterRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testContext(t, 60*time.Second)
			p := startProxy(t, s.addr)
			c := dial(t, p.addr())
			thread := fmt.Sprintf("retry-%d", tc.mode)
			p.arm(tc.mode)
			added, err := c.Add(ctx, thread, memory.User("one"), memory.User("two"))
			if err != nil {
				t.Fatal(err)
			}
			accepts, drops := p.counts()
			if drops != 1 || accepts < 2 {
				t.Fatalf("the proxy dropped %d connections and accepted %d; want 1 drop and a retry on a new one", drops, accepts)
			}
			if added.GetFirstSeq() != 1 || added.GetLastSeq() != 2 {
				t.Fatalf("Add answered seqs %d..%d, want 1..2", added.GetFirstSeq(), added.GetLastSeq())
			}
			if got := countMessages(t, ctx, direct, thread); !slices.Equal(got, []string{"one", "two"}) {
				t.Fatalf("stored %q, want [one two] once", got)
			}
		})
	}

	// The control: the same drop, retried by hand with a new request_id each
	// time, stores the messages twice, so the test above can tell.
	t.Run("control without a reused request id", func(t *testing.T) {
		ctx := testContext(t, 60*time.Second)
		p := startProxy(t, s.addr)
		c := dial(t, p.addr())
		p.arm(dropAfterResponse)
		req := &memoryv1.AddRequest{ThreadId: "control", Messages: []*memory.Message{memory.User("one")}}
		_, err := c.Stub().Add(ctx, req)
		if !memory.IsUnavailable(err) {
			t.Fatalf("the dropped call: %v, want UNAVAILABLE", err)
		}
		if _, err := c.Stub().Add(ctx, req); err != nil {
			t.Fatal(err)
		}
		if got := countMessages(t, ctx, direct, "control"); len(got) != 2 {
			t.Fatalf("a plain retry stored %q; the drop must come after the server stored the Add", got)
		}
	})
}

func TestAddGivesUpAfterItsAttempts(t *testing.T) {
	p := startProxy(t, "") // down
	c := dial(t, p.addr(), memory.WithRetry(3, 10*time.Millisecond, 50*time.Millisecond))
	ctx := testContext(t, 60*time.Second)
	_, err := c.Add(ctx, "t", memory.User("x"))
	if !memory.IsUnavailable(err) {
		t.Fatalf("Add to a server that is down: %v, want UNAVAILABLE", err)
	}
	// It stops early when ctx is done, with the context's error.
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	_, err = c.Add(cancelled, "t", memory.User("x"))
	if !errors.Is(err, context.Canceled) && memory.Code(err) != codes.Canceled {
		t.Fatalf("Add with a cancelled ctx: %v", err)
	}
}
