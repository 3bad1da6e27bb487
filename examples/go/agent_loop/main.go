// Command agent_loop is an agent loop that keeps its conversation in
// windlass-memory, using the generated Go client (gen/go).
//
// Each turn it adds the user's message, recalls the context a model would get
// (a running summary plus the recent turns) and adds the assistant's reply,
// canned here: no model is called. Meanwhile a goroutine streams the thread's
// summary updates with Watch, resuming after the last event it saw when the
// stream breaks.
//
// Run a server (npm start: gRPC on 127.0.0.1:50051, extractive summariser),
// then from examples/go:
//
//	go run ./agent_loop [-target HOST:PORT] [-thread ID]
//
// The target can also come from WINDLASS_MEMORY_TARGET.
package main

import (
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	memoryv1 "github.com/windlass-ai/windlass-memory/gen/go/windlass/memory/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// conversation is the scripted user turns and the replies a model would have
// written.
var conversation = []struct{ user, reply string }{
	{"I'd like to plan a weekend in Lisbon.", "Happy to help. When are you going?"},
	{"The second weekend of May, two adults.", "Noted: 9-11 May, two adults."},
	{"We like seafood and walking.", "Alfama and Cais do Sodre suit you; I'll list restaurants."},
	{"Budget is about 150 euros a night.", "I'll keep hotels near 150 euros a night."},
	{"Can we add a day trip?", "Sintra is 40 minutes by train; I'll add it for Saturday."},
	{"What should we pack?", "Comfortable shoes and a light jacket: May evenings are cool."},
}

func main() {
	defaultTarget := os.Getenv("WINDLASS_MEMORY_TARGET")
	if defaultTarget == "" {
		defaultTarget = "127.0.0.1:50051"
	}
	target := flag.String("target", defaultTarget, "gRPC address of windlass-memory (default: $WINDLASS_MEMORY_TARGET or 127.0.0.1:50051)")
	threadID := flag.String("thread", "agent-loop-"+strings.ToLower(rand.Text()[:8]), "thread id")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *target, *threadID); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, target, threadID string) error {
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("connect to %s: %w", target, err)
	}
	defer conn.Close()
	memory := memoryv1.NewMemoryServiceClient(conn)

	watchCtx, stopWatching := context.WithCancel(ctx)
	defer stopWatching()
	watcher := &summaryWatcher{client: memory, threadID: threadID}
	watchDone := make(chan error, 1)
	go func() { watchDone <- watcher.run(watchCtx) }()

	// Keep the 4 newest messages verbatim; fold the overflow every 2
	// messages. An empty model: the server's default summariser.
	strategy := &memoryv1.Strategy{Kind: &memoryv1.Strategy_Summary{Summary: &memoryv1.SummaryStrategy{
		Window:         proto.Uint32(4),
		SummarizeEvery: proto.Uint32(2),
	}}}
	add := func(role memoryv1.Role, content string) error {
		_, err := memory.Add(ctx, &memoryv1.AddRequest{
			ThreadId: threadID,
			Messages: []*memoryv1.ChatMessage{{Role: role, Content: content}},
			Strategy: strategy,
			// Makes the Add safe to retry: the server appends a repeated id
			// once.
			RequestId: rand.Text(),
		})
		return err
	}

	fmt.Printf("thread %s on %s\n", threadID, target)
	for i, turn := range conversation {
		if err := add(memoryv1.Role_ROLE_USER, turn.user); err != nil {
			return fmt.Errorf("add user turn: %w", err)
		}
		recalled, err := memory.Get(ctx, &memoryv1.GetRequest{ThreadId: threadID})
		if err != nil {
			return fmt.Errorf("get: %w", err)
		}
		verbatim := len(recalled.GetMessages())
		shape := ""
		if recalled.GetSummary() != "" {
			shape, verbatim = "summary + ", verbatim-1
		}
		fmt.Printf("turn %d: user: %s\n        context for the model: %d messages (%s%d verbatim)\n        assistant: %s\n",
			i+1, turn.user, len(recalled.GetMessages()), shape, verbatim, turn.reply)
		if err := add(memoryv1.Role_ROLE_ASSISTANT, turn.reply); err != nil {
			return fmt.Errorf("add reply: %w", err)
		}
	}

	final, err := memory.Get(ctx, &memoryv1.GetRequest{ThreadId: threadID})
	if err != nil {
		return fmt.Errorf("get: %w", err)
	}
	// One write, so the watcher's lines cannot land inside it.
	var out strings.Builder
	out.WriteString("final context:\n")
	for _, m := range final.GetMessages() {
		role := strings.ToLower(strings.TrimPrefix(m.GetRole().String(), "ROLE_"))
		// Whole: the summary message's first line is only its heading.
		lines := strings.Split(m.GetContent(), "\n")
		fmt.Fprintf(&out, "  %9s: %s\n", role, lines[0])
		for _, line := range lines[1:] {
			fmt.Fprintf(&out, "             %s\n", line)
		}
	}
	fmt.Print(out.String())
	// Every fold the server made is streamed; wait until the watcher has
	// printed the newest, so its output is complete.
	through := final.GetThread().GetSummarizedThroughSeq()
	if !watcher.waitFor(ctx, through, 5*time.Second) {
		fmt.Printf("[watch] no update through seq %d within 5 s\n", through)
	}
	stopWatching()
	if err := <-watchDone; err != nil {
		return fmt.Errorf("watch: %w", err)
	}
	return nil
}

// summaryWatcher prints a thread's summary updates and records how far they
// reach.
type summaryWatcher struct {
	client   memoryv1.MemoryServiceClient
	threadID string
	through  atomic.Uint64 // summarized_through_seq of the newest update printed
}

// run watches until ctx ends. A broken stream is resumed after the last event
// received; a token the server can no longer resume from starts the watch
// again from the current state rather than silently missing updates.
func (w *summaryWatcher) run(ctx context.Context) error {
	resumeToken := ""
	for {
		err := w.watch(ctx, &resumeToken)
		code := status.Code(err)
		switch {
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, io.EOF) || code == codes.Unavailable:
			fmt.Printf("[watch] stream ended (%v); resuming\n", err)
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(time.Second):
			}
		case resumeToken != "" && (code == codes.OutOfRange || code == codes.InvalidArgument):
			fmt.Printf("[watch] cannot resume (%s); watching from now\n", status.Convert(err).Message())
			resumeToken = ""
		default:
			return err
		}
	}
}

// watch streams events until the stream ends, keeping *resumeToken at the
// last event received.
func (w *summaryWatcher) watch(ctx context.Context, resumeToken *string) error {
	stream, err := w.client.Watch(ctx, &memoryv1.WatchRequest{
		ThreadIds: []string{w.threadID},
		EventTypes: []memoryv1.EventType{
			memoryv1.EventType_EVENT_TYPE_SUMMARY_UPDATED,
			memoryv1.EventType_EVENT_TYPE_SUMMARY_FAILED,
		},
		ResumeToken: *resumeToken,
		// On a fresh start, the summary as it is now, so an update written
		// before the stream was open is not missed.
		SendInitialState: *resumeToken == "",
	})
	if err != nil {
		return err
	}
	for {
		event, err := stream.Recv()
		if err != nil {
			return err
		}
		*resumeToken = event.GetResumeToken()
		switch e := event.GetEvent().(type) {
		case *memoryv1.WatchResponse_SummaryUpdated:
			u := e.SummaryUpdated
			fmt.Printf("[watch] summary updated through seq %d (%d messages folded):\n",
				u.GetSummarizedThroughSeq(), u.GetFoldedCount())
			for _, line := range strings.Split(u.GetSummary(), "\n") {
				fmt.Printf("[watch]   %s\n", line)
			}
			w.through.Store(u.GetSummarizedThroughSeq())
		case *memoryv1.WatchResponse_SummaryFailed:
			f := e.SummaryFailed
			fmt.Printf("[watch] summary failed (attempt %d): %s\n", f.GetAttempt(), f.GetReason())
		}
	}
}

// waitFor reports whether an update reaching seq was printed within timeout.
func (w *summaryWatcher) waitFor(ctx context.Context, seq uint64, timeout time.Duration) bool {
	deadline := time.After(timeout)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for w.through.Load() < seq {
		select {
		case <-ctx.Done():
			return false
		case <-deadline:
			return false
		case <-tick.C:
		}
	}
	return true
}
