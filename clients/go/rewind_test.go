package memory_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	memory "github.com/windlass-ai/windlass-memory/clients/go"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func contentsOf(t *testing.T, c *memory.Client, ctx context.Context, thread string) []string {
	t.Helper()
	got, err := c.Get(ctx, thread, memory.Recall(memory.Buffer()))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range got.GetMessages() {
		out = append(out, m.GetContent())
	}
	return out
}

func addUsers(t *testing.T, c *memory.Client, ctx context.Context, thread string, texts ...string) {
	t.Helper()
	var msgs []*memory.Message
	for _, s := range texts {
		msgs = append(msgs, memory.User(s))
	}
	if _, err := c.AddWith(ctx, thread, msgs); err != nil {
		t.Fatal(err)
	}
}

func TestRewindDropsTheMessagesAfterToSeq(t *testing.T) {
	s := startServer(t, nil)
	c := dial(t, s.addr)
	ctx := testContext(t, 60*time.Second)
	addUsers(t, c, ctx, "rw", "1", "2", "3", "4")

	resp, err := c.Rewind(ctx, "rw", 2)
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetRemovedCount() != 2 || resp.GetThread().GetLastSeq() != 2 || resp.GetSummaryDropped() {
		t.Fatalf("Rewind answered %v, want 2 removed, last seq 2", resp)
	}
	if got := strings.Join(contentsOf(t, c, ctx, "rw"), ","); got != "1,2" {
		t.Fatalf("after Rewind: %s, want 1,2", got)
	}
	again, err := c.Rewind(ctx, "rw", 1, memory.RewindRequestID("once"))
	if err != nil || again.GetRemovedCount() != 1 {
		t.Fatalf("Rewind to 1: %v, %v", again, err)
	}
	replay, err := c.Rewind(ctx, "rw", 1, memory.RewindRequestID("once"))
	if err != nil || replay.GetRemovedCount() != 1 || replay.GetThread().GetLastSeq() != 1 {
		t.Fatalf("replayed Rewind: %v, %v; want the first response", replay, err)
	}
}

func TestRewindErrorsNameTheFieldAndChangeNothing(t *testing.T) {
	s := startServer(t, nil)
	c := dial(t, s.addr)
	ctx := testContext(t, 60*time.Second)
	if _, err := c.Rewind(ctx, "none", 0); status.Code(err) != codes.NotFound {
		t.Fatalf("Rewind of no thread: %v, want NOT_FOUND", err)
	}
	addUsers(t, c, ctx, "rw-err", "1", "2")
	_, err := c.Rewind(ctx, "rw-err", 1, memory.IfLastSeq(1))
	if !memory.IsSeqConflict(err) || !strings.HasPrefix(status.Convert(err).Message(), "expected_last_seq:") {
		t.Fatalf("Rewind with a stale IfLastSeq: %v, want ABORTED on expected_last_seq", err)
	}
	if _, err := c.Rewind(ctx, "rw-err", 5); status.Code(err) != codes.OutOfRange {
		t.Fatalf("Rewind past last seq: %v, want OUT_OF_RANGE", err)
	}
	_, err = c.Rewind(ctx, "rw-err", 0, memory.RewindRequestID(strings.Repeat("r", 129)))
	if !memory.IsInvalidArgument(err) || !strings.HasPrefix(status.Convert(err).Message(), "request_id:") {
		t.Fatalf("Rewind with a long request id: %v, want INVALID_ARGUMENT on request_id", err)
	}
	if got := strings.Join(contentsOf(t, c, ctx, "rw-err"), ","); got != "1,2" {
		t.Fatalf("after refused Rewinds: %s, want 1,2", got)
	}
}

func TestPopTakesTheNewestUntilNoneIsLeft(t *testing.T) {
	s := startServer(t, nil)
	c := dial(t, s.addr)
	ctx := testContext(t, 60*time.Second)
	if _, err := c.AddWith(ctx, "pop", []*memory.Message{memory.User("a"), memory.User("b")},
		memory.WithStrategy(memory.Window(1))); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"b", "a"} {
		m, err := c.Pop(ctx, "pop")
		if err != nil || m.GetContent() != want {
			t.Fatalf("Pop: %v, %v; want %q", m, err, want)
		}
	}
	if m, err := c.Pop(ctx, "pop"); m != nil || err != nil {
		t.Fatalf("Pop of an empty thread: %v, %v; want nil, nil", m, err)
	}
	if m, err := c.Pop(ctx, "no-such-thread"); m != nil || err != nil {
		t.Fatalf("Pop of no thread: %v, %v; want nil, nil", m, err)
	}
}

func TestConcurrentPopsNeverDropAMessageUnseen(t *testing.T) {
	s := startServer(t, nil)
	c := dial(t, s.addr)
	ctx := testContext(t, 60*time.Second)
	addUsers(t, c, ctx, "pops", "1", "2", "3", "4", "5", "6")
	var (
		mu    sync.Mutex
		taken []string
		wg    sync.WaitGroup
	)
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m, err := c.Pop(context.WithoutCancel(ctx), "pops")
			if err != nil && !memory.IsSeqConflict(err) {
				t.Errorf("Pop: %v", err)
			}
			if m != nil {
				mu.Lock()
				taken = append(taken, m.GetContent())
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	left := contentsOf(t, c, ctx, "pops")
	if len(taken) == 0 || len(taken)+len(left) != 6 {
		t.Fatalf("popped %v, left %v: a message was lost or popped twice", taken, left)
	}
	seen := map[string]bool{}
	for _, s := range append(taken, left...) {
		if seen[s] {
			t.Fatalf("%q both popped and left, or popped twice: %v / %v", s, taken, left)
		}
		seen[s] = true
	}
}

func TestWatchFiltersOnThreadRewound(t *testing.T) {
	s := startServer(t, nil, "--progress-interval-ms", "100")
	c := dial(t, s.addr)
	ctx := testContext(t, 60*time.Second)
	watchCtx, stop := context.WithCancel(ctx)
	defer stop()
	events := make(chan *memory.Event, 16)
	go func() {
		defer close(events)
		f := memory.WatchFilter{Threads: []string{"rw-watch"}, Types: []memory.EventType{memory.EventThreadRewound}, IncludeProgress: true}
		for ev, err := range c.Watch(watchCtx, f) {
			if err != nil {
				return
			}
			events <- ev
		}
	}()
	next := func() *memory.Event {
		select {
		case ev := <-events:
			return ev
		case <-ctx.Done():
			t.Fatal("no event within the test's deadline")
			return nil
		}
	}
	for next().GetProgress() == nil {
	}
	addUsers(t, c, ctx, "rw-watch", "1", "2", "3")
	if _, err := c.Rewind(ctx, "rw-watch", 1); err != nil {
		t.Fatal(err)
	}
	ev := next()
	for ev.GetProgress() != nil {
		ev = next()
	}
	r := ev.GetThreadRewound()
	if r == nil || r.GetToSeq() != 1 || r.GetRemovedCount() != 2 || ev.GetThreadId() != "rw-watch" {
		t.Fatalf("got %v, want ThreadRewound to seq 1, 2 removed (MessagesAdded filtered out)", ev)
	}
}
