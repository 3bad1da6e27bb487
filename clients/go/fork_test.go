package memory_test

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	memory "github.com/windlass-ai/windlass-memory/clients/go"
	"google.golang.org/grpc/codes"
)

func TestForkHoldsTheParentMessagesUpToAtSeqAndThenDiverges(t *testing.T) {
	s := startServer(t, nil)
	c := dial(t, s.addr)
	ctx := testContext(t, 60*time.Second)
	addUsers(t, c, ctx, "fk", "1", "2", "3", "4")

	resp, err := c.Fork(ctx, "fk", "fk-f", memory.AtSeq(2))
	if err != nil {
		t.Fatal(err)
	}
	th := resp.GetThread()
	if resp.GetSharedCount() != 2 || resp.GetSummaryInherited() || th.GetLastSeq() != 2 {
		t.Fatalf("Fork answered %v, want 2 shared, last seq 2", resp)
	}
	if p := th.GetParent(); p.GetThreadId() != "fk" || p.GetAtSeq() != 2 || p.GetForkTime() == nil {
		t.Fatalf("parent %v, want fk at 2 with a fork time", p)
	}
	addUsers(t, c, ctx, "fk-f", "fork 3")
	if _, err := c.Rewind(ctx, "fk", 1); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(contentsOf(t, c, ctx, "fk-f"), ","); got != "1,2,fork 3" {
		t.Fatalf("fork: %s, want 1,2,fork 3", got)
	}
	if _, err := c.Clear(ctx, "fk"); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(contentsOf(t, c, ctx, "fk-f"), ","); got != "1,2,fork 3" {
		t.Fatalf("fork after the parent's Clear: %s", got)
	}
}

func TestForkErrorsCreateNothing(t *testing.T) {
	s := startServer(t, nil)
	c := dial(t, s.addr)
	ctx := testContext(t, 60*time.Second)
	if _, err := c.Fork(ctx, "fe", "fe-f"); memory.Code(err) != codes.NotFound {
		t.Fatalf("Fork of no thread: %v, want NOT_FOUND", err)
	}
	addUsers(t, c, ctx, "fe", "1")
	addUsers(t, c, ctx, "fe-taken", "x")
	if _, err := c.Fork(ctx, "fe", "fe-taken"); !memory.IsAlreadyExists(err) {
		t.Fatalf("Fork onto a live thread: %v, want ALREADY_EXISTS", err)
	}
	if _, err := c.Fork(ctx, "fe", "fe-f", memory.AtSeq(5)); memory.Code(err) != codes.OutOfRange {
		t.Fatalf("Fork past last seq: %v, want OUT_OF_RANGE", err)
	}
	if _, err := c.Fork(ctx, "fe", "fe-f", memory.IfLastSeq(7)); !memory.IsSeqConflict(err) {
		t.Fatalf("Fork with a stale last seq: %v, want ABORTED", err)
	}
	if _, err := c.Fork(ctx, "fe", ""); !memory.IsInvalidArgument(err) || !strings.Contains(err.Error(), "new_thread_id") {
		t.Fatalf("Fork without new id: %v, want INVALID_ARGUMENT naming new_thread_id", err)
	}
	for th, err := range c.ListThreads(ctx, memory.ForksOf("fe")) {
		t.Fatalf("a refused Fork left %v, %v", th, err)
	}
}

func TestForkRetriedWithItsRequestIDReturnsTheFirstFork(t *testing.T) {
	s := startServer(t, nil)
	c := dial(t, s.addr)
	ctx := testContext(t, 60*time.Second)
	addUsers(t, c, ctx, "fi", "1", "2")
	if _, err := c.Fork(ctx, "fi", "fi-f", memory.ForkRequestID("once")); err != nil {
		t.Fatal(err)
	}
	addUsers(t, c, ctx, "fi-f", "3")
	again, err := c.Fork(ctx, "fi", "fi-f", memory.ForkRequestID("once"))
	if err != nil || again.GetSharedCount() != 2 || again.GetThread().GetLastSeq() != 3 {
		t.Fatalf("replay: %v, %v; want 2 shared, the fork's current last seq 3", again, err)
	}
	if _, err := c.Fork(ctx, "fi", "fi-f"); !memory.IsAlreadyExists(err) {
		t.Fatalf("another request id: %v, want ALREADY_EXISTS", err)
	}
}

func TestForkTakesTheGivenStrategyLabelsAndTTL(t *testing.T) {
	s := startServer(t, nil)
	c := dial(t, s.addr)
	ctx := testContext(t, 60*time.Second)
	addUsers(t, c, ctx, "fo", "1", "2", "3")
	resp, err := c.Fork(ctx, "fo", "fo-f", memory.ForkStrategy(memory.Window(2)),
		memory.ForkLabels(map[string]string{"team": "a"}), memory.ForkTTL(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	th := resp.GetThread()
	if th.GetStrategy().GetWindow() == nil || th.GetLabels()["team"] != "a" || th.GetTtl().AsDuration() != time.Hour {
		t.Fatalf("fork %v, want a window strategy, team=a, ttl 1h", th)
	}
}

func TestListThreadsForksOfListsDirectForksWithTheirOrigin(t *testing.T) {
	s := startServer(t, nil)
	c := dial(t, s.addr)
	ctx := testContext(t, 60*time.Second)
	addUsers(t, c, ctx, "fl", "1", "2")
	for _, f := range []struct {
		parent, id string
		opts       []memory.ForkOption
	}{
		{"fl", "fl-b", []memory.ForkOption{memory.AtSeq(1), memory.ForkLabels(map[string]string{"k": "b"})}},
		{"fl", "fl-a", nil},
		{"fl-a", "fl-a2", nil},
	} {
		if _, err := c.Fork(ctx, f.parent, f.id, f.opts...); err != nil {
			t.Fatal(err)
		}
	}
	list := func(opts ...memory.ListOption) []string {
		var out []string
		for th, err := range c.ListThreads(ctx, opts...) {
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, th.GetThreadId()+"@"+itoa(th.GetParent().GetAtSeq()))
		}
		return out
	}
	if got := list(memory.ForksOf("fl"), memory.PageSize(1)); !slices.Equal(got, []string{"fl-a@2", "fl-b@1"}) {
		t.Fatalf("forks of fl: %v", got)
	}
	if got := list(memory.ForksOf("fl"), memory.WithLabels(map[string]string{"k": "b"})); !slices.Equal(got, []string{"fl-b@1"}) {
		t.Fatalf("forks of fl labelled k=b: %v", got)
	}
}

func TestWatchSeesThreadForkedThenTheForksAdds(t *testing.T) {
	s := startServer(t, nil, "--progress-interval-ms", "100")
	c := dial(t, s.addr)
	ctx := testContext(t, 60*time.Second)
	addUsers(t, c, ctx, "fw", "1", "2")
	watchCtx, stop := context.WithCancel(ctx)
	defer stop()
	events := make(chan *memory.Event, 16)
	go func() {
		defer close(events)
		f := memory.WatchFilter{Threads: []string{"fw-f"}, IncludeProgress: true}
		for ev, err := range c.Watch(watchCtx, f) {
			if err != nil {
				return
			}
			events <- ev
		}
	}()
	next := func() *memory.Event {
		for {
			select {
			case ev := <-events:
				if ev.GetProgress() == nil {
					return ev
				}
			case <-ctx.Done():
				t.Fatal("no event within the test's deadline")
				return nil
			}
		}
	}
	for ev := range events {
		if ev.GetProgress() != nil {
			break
		}
	}
	if _, err := c.Fork(ctx, "fw", "fw-f", memory.AtSeq(1)); err != nil {
		t.Fatal(err)
	}
	addUsers(t, c, ctx, "fw-f", "2b")
	forked := next()
	if f := forked.GetThreadForked(); f == nil || f.GetParentThreadId() != "fw" || f.GetAtSeq() != 1 || f.GetSharedCount() != 1 {
		t.Fatalf("first event %v, want ThreadForked from fw at 1, 1 shared", forked)
	}
	if a := next().GetMessagesAdded(); a == nil || a.GetFirstSeq() != 2 || a.GetLastSeq() != 2 {
		t.Fatalf("second event %v, want MessagesAdded 2..2", a)
	}
}

func itoa(n uint64) string { return strconv.FormatUint(n, 10) }
