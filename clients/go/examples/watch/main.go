// Watch: print what happens to the threads, resuming by itself when the
// connection drops or the server restarts. Pass the last token it printed as
// -resume to continue after it, even from another process.
//
//	go run ./examples/watch -target 127.0.0.1:50051 [-resume TOKEN] [-events N]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"time"

	memory "github.com/windlass-ai/windlass-memory/clients/go"
)

func main() {
	target := flag.String("target", "127.0.0.1:50051", "the server's gRPC address")
	resume := flag.String("resume", "", "resume token to continue after (empty: from now)")
	limit := flag.Int("events", 0, "stop after this many events (0: until Ctrl-C)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	c, err := memory.Dial(*target, memory.WithInsecure())
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	filter := memory.WatchFilter{
		ResumeToken: *resume,
		OnReconnect: func(err error, delay time.Duration) {
			log.Printf("watch: %v; reconnecting in %v", err, delay)
		},
	}
	seen := 0
	for ev, err := range c.Watch(ctx, filter) {
		if errors.Is(err, memory.ErrResyncRequired) {
			// Events were missed: re-read the threads you care about with
			// Get, then watch again from now (filter.ResumeToken = "").
			log.Fatal("too far behind: re-read with Get and watch from now")
		}
		if err != nil {
			log.Fatal(err)
		}
		switch {
		case ev.GetMessagesAdded() != nil:
			a := ev.GetMessagesAdded()
			fmt.Printf("%s: messages %d..%d added\n", ev.GetThreadId(), a.GetFirstSeq(), a.GetLastSeq())
		case ev.GetSummaryUpdated() != nil:
			fmt.Printf("%s: summary through seq %d\n", ev.GetThreadId(), ev.GetSummaryUpdated().GetSummarizedThroughSeq())
		case ev.GetThreadCleared() != nil:
			fmt.Printf("%s: cleared\n", ev.GetThreadId())
		case ev.GetSummaryFailed() != nil:
			fmt.Printf("%s: summary failed: %s\n", ev.GetThreadId(), ev.GetSummaryFailed().GetReason())
		}
		// Save this to continue after this event later (-resume).
		fmt.Println("resume token:", ev.GetResumeToken())
		if seen++; *limit > 0 && seen == *limit {
			return
		}
	}
}
