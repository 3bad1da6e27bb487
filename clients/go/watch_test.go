package memory_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	memory "github.com/windlass-ai/windlass-memory/clients/go"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// watcher runs a Watch in the background and records what it yields.
type watcher struct {
	mu         sync.Mutex
	added      [][2]uint64 // MessagesAdded first..last, in order
	progress   int
	errs       []error
	reconnects atomic.Int64
	done       chan struct{}
	cancel     context.CancelFunc
}

func startWatcher(t *testing.T, c *memory.Client, f memory.WatchFilter) *watcher {
	ctx, cancel := context.WithCancel(context.Background())
	w := &watcher{done: make(chan struct{}), cancel: cancel}
	f.IncludeProgress = true
	f.OnReconnect = func(error, time.Duration) { w.reconnects.Add(1) }
	go func() {
		defer close(w.done)
		for ev, err := range c.Watch(ctx, f) {
			w.mu.Lock()
			switch {
			case err != nil:
				w.errs = append(w.errs, err)
			case ev.GetMessagesAdded() != nil:
				w.added = append(w.added, [2]uint64{ev.GetMessagesAdded().GetFirstSeq(), ev.GetMessagesAdded().GetLastSeq()})
			case ev.GetProgress() != nil:
				w.progress++
			}
			w.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-w.done
	})
	return w
}

func (w *watcher) snapshot() (added [][2]uint64, progress int, errs []error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.added), w.progress, slices.Clone(w.errs)
}

func (w *watcher) ended() bool {
	select {
	case <-w.done:
		return true
	default:
		return false
	}
}

// live waits for a progress event: the stream is open at the server, so what
// is added next is delivered.
func (w *watcher) live(t *testing.T) {
	_, before, _ := w.snapshot()
	eventually(t, 60*time.Second, "the watch stream is open", func() bool {
		_, n, _ := w.snapshot()
		return n > before
	})
}

func (w *watcher) waitAdded(t *testing.T, lastSeq uint64) {
	eventually(t, 60*time.Second, fmt.Sprintf("the watcher saw seq %d", lastSeq), func() bool {
		added, _, _ := w.snapshot()
		return len(added) > 0 && added[len(added)-1][1] >= lastSeq
	})
}

func addN(t *testing.T, ctx context.Context, c *memory.Client, thread string, from, to int) {
	t.Helper()
	for i := from; i <= to; i++ {
		added, err := c.Add(ctx, thread, memory.User(fmt.Sprintf("m%d", i)))
		if err != nil {
			t.Fatal(err)
		}
		if added.GetLastSeq() != uint64(i) {
			t.Fatalf("Add of m%d got seq %d", i, added.GetLastSeq())
		}
	}
}

func TestWatchResumesAcrossAServerRestartOnSQLite(t *testing.T) {
	db := filepath.Join(t.TempDir(), "memory.db")
	flags := []string{"--store", "sqlite:" + db, "--progress-interval-ms", "100"}
	first := startServer(t, nil, flags...)
	p := startProxy(t, first.addr)
	c := dial(t, p.addr())
	ctx := testContext(t, 120*time.Second)

	w := startWatcher(t, c, memory.WatchFilter{Threads: []string{"w"}})
	w.live(t)
	addN(t, ctx, dial(t, first.addr), "w", 1, 3)
	w.waitAdded(t, 3)

	// The server stops (the stream ends with UNAVAILABLE) and its address is
	// down until the next one has written events the watcher has not seen.
	p.setUpstream("")
	first.stop()
	eventually(t, 60*time.Second, "the watcher tries to reconnect", func() bool { return w.reconnects.Load() > 0 })
	second := startServer(t, nil, flags...)
	addN(t, ctx, dial(t, second.addr), "w", 4, 5)
	p.setUpstream(second.addr)
	w.waitAdded(t, 5)
	addN(t, ctx, dial(t, second.addr), "w", 6, 6)
	w.waitAdded(t, 6)

	added, _, errs := w.snapshot()
	want := [][2]uint64{{1, 1}, {2, 2}, {3, 3}, {4, 4}, {5, 5}, {6, 6}}
	if !slices.Equal(added, want) || len(errs) != 0 {
		t.Fatalf("the watcher saw %v (errors %v), want each of seqs 1..6 once, in order", added, errs)
	}
}

func TestWatchResumesAfterTheConnectionIsCut(t *testing.T) {
	s := startServer(t, nil, "--progress-interval-ms", "100")
	p := startProxy(t, s.addr)
	c := dial(t, p.addr())
	ctx := testContext(t, 120*time.Second)
	w := startWatcher(t, c, memory.WatchFilter{Threads: []string{"cut"}})
	w.live(t)
	addN(t, ctx, c, "cut", 1, 2)
	w.waitAdded(t, 2)
	for round := range 3 {
		p.setUpstream("")
		p.cut()
		reconnects := w.reconnects.Load()
		eventually(t, 60*time.Second, "the watcher notices", func() bool { return w.reconnects.Load() > reconnects })
		// Written while the watcher is away.
		last := 2 + 2*(round+1)
		addN(t, ctx, dial(t, s.addr), "cut", last-1, last)
		p.setUpstream(s.addr)
		w.waitAdded(t, uint64(last))
	}
	added, _, errs := w.snapshot()
	var seqs []uint64
	for _, a := range added {
		seqs = append(seqs, a[0])
	}
	if !slices.Equal(seqs, []uint64{1, 2, 3, 4, 5, 6, 7, 8}) || len(errs) != 0 {
		t.Fatalf("the watcher saw %v (errors %v), want 1..8 once each", seqs, errs)
	}
}

func TestWatchBacksOffWhileTheServerIsDown(t *testing.T) {
	p := startProxy(t, "") // accepts and closes every connection
	c := dial(t, p.addr(), memory.WithRetry(5, 100*time.Millisecond, 5*time.Second))
	w := startWatcher(t, c, memory.WatchFilter{})
	const window = 3 * time.Second
	time.Sleep(window) // the span the attempts are counted over, not a wait for an event
	reconnects := w.reconnects.Load()
	accepts, _ := p.counts()
	// With backoff from 100ms doubling (jitter takes at most half off) about
	// 6 attempts fit in 3s; a client without backoff makes thousands.
	if reconnects < 2 || reconnects > 30 || accepts > 30 {
		t.Fatalf("in %v the watcher reconnected %d times over %d connections; want a handful, not a busy loop",
			window, reconnects, accepts)
	}
	t.Logf("in %v: %d reconnects, %d connections", window, reconnects, accepts)

	// Cancelling the context ends the iteration, without an error.
	w.cancel()
	eventually(t, 10*time.Second, "the watch ends after cancel", w.ended)
	if _, _, errs := w.snapshot(); len(errs) != 0 {
		t.Fatalf("a cancelled watch yielded %v", errs)
	}
}

func TestWatchTooFarBehindAsksForAResync(t *testing.T) {
	s := startServer(t, nil, "--progress-interval-ms", "100", "--event-retention", "2")
	p := startProxy(t, s.addr)
	c := dial(t, p.addr())
	ctx := testContext(t, 120*time.Second)
	w := startWatcher(t, c, memory.WatchFilter{Threads: []string{"far"}})
	w.live(t)
	addN(t, ctx, c, "far", 1, 1)
	w.waitAdded(t, 1)

	// Away while more events are written than the server keeps.
	p.setUpstream("")
	p.cut()
	reconnects := w.reconnects.Load()
	eventually(t, 60*time.Second, "the watcher notices", func() bool { return w.reconnects.Load() > reconnects })
	direct := dial(t, s.addr)
	addN(t, ctx, direct, "far", 2, 6)
	addN(t, ctx, direct, "other", 1, 3) // the namespace's log, not just the thread's, moves on
	p.setUpstream(s.addr)
	eventually(t, 60*time.Second, "the watch ends", w.ended)

	added, _, errs := w.snapshot()
	if len(errs) != 1 || !errors.Is(errs[0], memory.ErrResyncRequired) || status.Code(errs[0]) != codes.OutOfRange {
		t.Fatalf("errors %v, want one wrapping ErrResyncRequired with code OUT_OF_RANGE", errs)
	}
	if !slices.Equal(added, [][2]uint64{{1, 1}}) {
		t.Fatalf("events before the resync error: %v, want only seq 1 (nothing skipped silently)", added)
	}
}

func TestWatchStopsOnOtherErrors(t *testing.T) {
	s := startServer(t, nil)
	c := dial(t, s.addr)
	var errs []error
	for _, err := range c.Watch(testContext(t, 60*time.Second), memory.WatchFilter{ResumeToken: "not a token"}) {
		errs = append(errs, err)
	}
	if len(errs) != 1 || !memory.IsInvalidArgument(errs[0]) {
		t.Fatalf("a malformed token yields %v, want one INVALID_ARGUMENT", errs)
	}
}

func TestWatchResumeTokenContinuesAfterItsEvent(t *testing.T) {
	s := startServer(t, nil)
	c := dial(t, s.addr)
	ctx := testContext(t, 60*time.Second)
	token := resumeTokenNow(t, ctx, c)
	addN(t, ctx, c, "tok", 1, 3)
	var seqs []uint64
	for ev, err := range c.Watch(ctx, memory.WatchFilter{ResumeToken: token, Threads: []string{"tok"}}) {
		if err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, ev.GetMessagesAdded().GetFirstSeq())
		if len(seqs) == 3 {
			break
		}
	}
	if !slices.Equal(seqs, []uint64{1, 2, 3}) {
		t.Fatalf("resumed at %v, want 1 2 3", seqs)
	}
}

// resumeTokenNow returns the resume token of the stream's start: the token
// of the initial state of a summary thread made for it, whose events are all
// written before it is read. What is added afterwards comes after the token.
func resumeTokenNow(t *testing.T, ctx context.Context, c *memory.Client) string {
	t.Helper()
	const thread = "resume-point"
	var msgs []*memory.Message
	for i := range 4 {
		msgs = append(msgs, memory.User(fmt.Sprintf("Fact %d: the sea is salty.", i)))
	}
	strategy := memory.WithStrategy(memory.Summary(memory.SummaryWindow(2), memory.SummarizeEvery(2)))
	if _, err := c.AddWith(ctx, thread, msgs, strategy); err != nil {
		t.Fatal(err)
	}
	// Get waits for the fold, so its event is written before the token is read.
	if got, err := c.Get(ctx, thread); err != nil || got.GetSummary() == "" {
		t.Fatalf("no summary to start from: %v, %v", got, err)
	}
	for ev, err := range c.Watch(ctx, memory.WatchFilter{Threads: []string{thread}, SendInitialState: true}) {
		if err != nil {
			t.Fatal(err)
		}
		return ev.GetResumeToken()
	}
	t.Fatal("the watch ended without its initial state")
	return ""
}
