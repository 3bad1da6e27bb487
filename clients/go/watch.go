package memory

import (
	"context"
	"errors"
	"io"
	"iter"
	"time"

	memoryv1 "github.com/windlass-ai/windlass-memory/gen/go/windlass/memory/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// WatchFilter says what Watch streams and from where.
type WatchFilter struct {
	// Only these threads; empty: every thread of the namespace.
	Threads []string
	// Only these event types; empty: all.
	Types []EventType
	// Continue after the event that carried this token (saved from
	// Event.ResumeToken); empty: from now on.
	ResumeToken string
	// First send one summary-updated event per watched thread that has a
	// summary (on the first connection only, not on resumes).
	SendInitialState bool
	// Also yield the server's progress events (idle keep-alives that only
	// move the resume token on). Watch always uses them to resume.
	IncludeProgress bool
	// Called before each reconnect with the error that ended the stream and
	// the backoff delay about to be waited, e.g. to log it.
	OnReconnect func(err error, delay time.Duration)
}

// Watch streams the namespace's events in order. It resumes by itself from
// the last event's resume token when the stream ends with UNAVAILABLE (server
// down or restarting, connection lost), RESOURCE_EXHAUSTED (the stream fell
// behind, or too many watchers for now) or an end without status, waiting
// between attempts with exponential backoff and jitter (WithRetry's initial
// and max delay, for as long as ctx lasts), so no event is lost or repeated.
//
// When the token is older than the history the server keeps (OUT_OF_RANGE)
// it yields an error wrapping ErrResyncRequired and stops: events were missed,
// so re-read with Get and watch again without a token. Any other error is
// yielded and ends the iteration. It ends without an error when ctx is done
// or the loop breaks; either closes the stream.
//
//	for ev, err := range c.Watch(ctx, memory.WatchFilter{Threads: []string{"t1"}}) {
//		if errors.Is(err, memory.ErrResyncRequired) { ... re-read ... }
//		if err != nil { return err }
//		fmt.Println(ev.GetThreadId(), ev.GetResumeToken())
//	}
func (c *Client) Watch(ctx context.Context, f WatchFilter) iter.Seq2[*Event, error] {
	return func(yield func(*Event, error) bool) {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel() // closes the stream when the caller's loop breaks
		token, initial := f.ResumeToken, f.SendInitialState
		wait := c.retry.start()
		for {
			err := c.watchOnce(ctx, f, &token, &initial, wait, yield)
			if err == errStopped || ctx.Err() != nil {
				return
			}
			switch status.Code(err) {
			case codes.Unavailable, codes.ResourceExhausted:
			case codes.OutOfRange:
				yield(nil, resyncRequired(err))
				return
			default:
				if err != io.EOF {
					yield(nil, err)
					return
				}
			}
			delay := wait.delay()
			if f.OnReconnect != nil {
				f.OnReconnect(err, delay)
			}
			if !sleep(ctx, delay) {
				return
			}
		}
	}
}

var errStopped = errors.New("the caller stopped the iteration")

// watchOnce runs one stream until it fails; every event received moves token
// on and resets the backoff (the server answered, so it is up).
func (c *Client) watchOnce(ctx context.Context, f WatchFilter, token *string, initial *bool,
	wait *backoff, yield func(*Event, error) bool,
) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.rpc.Watch(ctx, &memoryv1.WatchRequest{
		ThreadIds:        f.Threads,
		EventTypes:       f.Types,
		ResumeToken:      *token,
		SendInitialState: *initial,
	})
	if err != nil {
		return err
	}
	for {
		ev, err := stream.Recv()
		if err != nil {
			return err
		}
		*token, *initial = ev.GetResumeToken(), false
		wait.reset()
		if ev.GetProgress() != nil && !f.IncludeProgress {
			continue
		}
		if !yield(ev, nil) {
			return errStopped
		}
	}
}
