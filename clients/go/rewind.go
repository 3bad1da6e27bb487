package memory

import (
	"context"

	memoryv1 "github.com/windlass-ai/windlass-memory/gen/go/windlass/memory/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// RewindResponse is what Rewind dropped: the thread after it, RemovedCount
// and SummaryDropped.
type RewindResponse = memoryv1.RewindResponse

// RewindOption sets an optional field of Rewind.
type RewindOption interface{ applyRewind(*memoryv1.RewindRequest) }

type rewindOption func(*memoryv1.RewindRequest)

func (o rewindOption) applyRewind(r *memoryv1.RewindRequest) { o(r) }

// LastSeqGuard is IfLastSeq: an option of both Rewind and Fork.
type LastSeqGuard uint64

func (g LastSeqGuard) applyRewind(r *memoryv1.RewindRequest) {
	r.ExpectedLastSeq = proto.Uint64(uint64(g))
}

func (g LastSeqGuard) applyFork(r *memoryv1.ForkRequest) {
	r.ExpectedLastSeq = proto.Uint64(uint64(g))
}

// IfLastSeq makes Rewind or Fork fail (IsSeqConflict, ABORTED) and change
// nothing unless the thread's last seq is still seq: a message added
// meanwhile is never dropped, and a fork holds exactly what was read.
func IfLastSeq(seq uint64) LastSeqGuard { return LastSeqGuard(seq) }

// RewindRequestID sets the idempotency key instead of a random one: a Rewind
// repeated with it answers the first one's response and drops nothing more.
func RewindRequestID(id string) RewindOption {
	return rewindOption(func(r *memoryv1.RewindRequest) { r.RequestId = id })
}

// popAttempts bounds how often Pop reads again after losing to an Add.
const popAttempts = 3

// Rewind drops thread's messages after toSeq (last seq - 1: the newest one);
// the next Add reuses their seqs. Like AddWith it carries a random
// request_id (unless RewindRequestID) and is retried with it on UNAVAILABLE.
// Errors: NOT_FOUND (no thread), ABORTED (IfLastSeq), OUT_OF_RANGE (toSeq
// past the last seq), FAILED_PRECONDITION (messages after toSeq no longer
// all stored), INVALID_ARGUMENT (naming the field).
func (c *Client) Rewind(ctx context.Context, thread string, toSeq uint64, opts ...RewindOption) (*RewindResponse, error) {
	req := &memoryv1.RewindRequest{ThreadId: thread, ToSeq: toSeq}
	for _, o := range opts {
		o.applyRewind(req)
	}
	if req.RequestId == "" {
		req.RequestId = newRequestID()
	}
	return retryUnavailable(ctx, c, func(ctx context.Context) (*RewindResponse, error) {
		return c.rpc.Rewind(ctx, req)
	})
}

// Pop removes and returns thread's newest stored message (nil, nil when it
// has none), whatever its strategy. It reads the newest message, then
// rewinds to the seq before it with IfLastSeq, so a message added in between
// is never dropped unseen: on that ABORTED it reads again, up to 3 times,
// then returns the ABORTED error.
func (c *Client) Pop(ctx context.Context, thread string) (*Message, error) {
	for attempt := 1; ; attempt++ {
		got, err := c.Get(ctx, thread, Recall(Buffer()), Limit(1))
		if err != nil || len(got.GetMessages()) == 0 {
			return nil, err
		}
		newest := got.GetMessages()[len(got.GetMessages())-1]
		_, err = c.Rewind(ctx, thread, newest.GetSeq()-1, IfLastSeq(got.GetThread().GetLastSeq()))
		if err == nil {
			return newest, nil
		}
		if status.Code(err) != codes.Aborted || attempt >= popAttempts {
			return nil, err
		}
	}
}

// retryUnavailable makes call (within the client's default timeout) and
// repeats it while the server is UNAVAILABLE, with backoff (WithRetry); the
// request must carry a request_id so a repeat is answered, not applied twice.
func retryUnavailable[T any](ctx context.Context, c *Client, call func(context.Context) (T, error)) (T, error) {
	ctx, cancel := c.callContext(ctx)
	defer cancel()
	wait := c.retry.start()
	for attempt := 1; ; attempt++ {
		resp, err := call(ctx)
		if status.Code(err) != codes.Unavailable || attempt >= c.retry.attempts {
			return resp, err
		}
		if !sleep(ctx, wait.delay()) {
			return resp, err
		}
	}
}
