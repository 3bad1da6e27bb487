package memory

import (
	"context"
	"iter"
	"time"

	memoryv1 "github.com/windlass-ai/windlass-memory/gen/go/windlass/memory/v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

// ForkResponse is what Fork made: the new Thread (its Parent names the
// origin), SharedCount (stored messages it holds from its parent, shared, not
// copied) and SummaryInherited.
type ForkResponse = memoryv1.ForkResponse

// ForkOption sets an optional field of Fork. IfLastSeq is one too.
type ForkOption interface{ applyFork(*memoryv1.ForkRequest) }

type forkOption func(*memoryv1.ForkRequest)

func (o forkOption) applyFork(r *memoryv1.ForkRequest) { o(r) }

// AtSeq makes the fork hold the parent's messages up to and including seq
// (default: all of them; 0: none).
func AtSeq(seq uint64) ForkOption {
	return forkOption(func(r *memoryv1.ForkRequest) { r.AtSeq = proto.Uint64(seq) })
}

// ForkStrategy gives the fork its own strategy instead of its parent's.
func ForkStrategy(s *Strategy) ForkOption {
	return forkOption(func(r *memoryv1.ForkRequest) { r.Strategy = s })
}

// ForkLabels gives the fork its own labels instead of its parent's.
func ForkLabels(labels map[string]string) ForkOption {
	return forkOption(func(r *memoryv1.ForkRequest) { r.Labels = labels })
}

// ForkTTL gives the fork its own time to live instead of its parent's; 0:
// none.
func ForkTTL(ttl time.Duration) ForkOption {
	return forkOption(func(r *memoryv1.ForkRequest) { r.Ttl = durationpb.New(ttl) })
}

// ForkRequestID sets the idempotency key instead of a random one: a Fork
// repeated with it answers the first fork (its current state), not
// ALREADY_EXISTS.
func ForkRequestID(id string) ForkOption {
	return forkOption(func(r *memoryv1.ForkRequest) { r.RequestId = id })
}

// Fork creates newThread holding thread's messages up to AtSeq (default:
// all), shared with the parent, not copied; then both change independently.
// The strategy, labels and ttl are the parent's unless given. Like AddWith it
// carries a random request_id (unless ForkRequestID) and is retried with it
// on UNAVAILABLE. Errors: NOT_FOUND (no parent), ALREADY_EXISTS
// (IsAlreadyExists: newThread is taken), ABORTED (IfLastSeq), OUT_OF_RANGE
// (AtSeq past the last seq), FAILED_PRECONDITION (messages up to AtSeq
// trimmed), RESOURCE_EXHAUSTED, INVALID_ARGUMENT (naming the field).
func (c *Client) Fork(ctx context.Context, thread, newThread string, opts ...ForkOption) (*ForkResponse, error) {
	req := &memoryv1.ForkRequest{ThreadId: thread, NewThreadId: newThread}
	for _, o := range opts {
		o.applyFork(req)
	}
	if err := checkClearing("strategy.clear_tool_results", req.GetStrategy().GetClearToolResults()); err != nil {
		return nil, err
	}
	if req.RequestId == "" {
		req.RequestId = newRequestID()
	}
	return retryUnavailable(ctx, c, func(ctx context.Context) (*ForkResponse, error) {
		return c.rpc.Fork(ctx, req)
	})
}

// ListOption narrows ListThreads.
type ListOption func(*memoryv1.ListThreadsRequest)

// ForksOf lists only the direct forks of thread (Thread.Parent.ThreadId).
func ForksOf(thread string) ListOption {
	return func(r *memoryv1.ListThreadsRequest) { r.ForksOf = thread }
}

// WithLabels lists only threads carrying every one of labels.
func WithLabels(labels map[string]string) ListOption {
	return func(r *memoryv1.ListThreadsRequest) { r.Labels = labels }
}

// PageSize reads pages of n threads (0: the server's default, 100).
func PageSize(n uint32) ListOption {
	return func(r *memoryv1.ListThreadsRequest) { r.PageSize = n }
}

// ListThreads iterates over the caller's threads in ascending byte order of
// their ids, each with its state (Parent shows a fork's origin), reading
// pages as the loop goes. A failed page is yielded as the error and ends the
// iteration.
//
//	for th, err := range c.ListThreads(ctx, memory.ForksOf("t1")) { ... }
func (c *Client) ListThreads(ctx context.Context, opts ...ListOption) iter.Seq2[*Thread, error] {
	return func(yield func(*Thread, error) bool) {
		req := &memoryv1.ListThreadsRequest{IncludeThreads: true}
		for _, o := range opts {
			o(req)
		}
		for {
			page, err := c.listPage(ctx, req)
			if err != nil {
				yield(nil, err)
				return
			}
			for _, th := range page.GetThreads() {
				if !yield(th, nil) {
					return
				}
			}
			if req.PageToken = page.GetNextPageToken(); req.PageToken == "" {
				return
			}
		}
	}
}

func (c *Client) listPage(ctx context.Context, req *memoryv1.ListThreadsRequest) (*memoryv1.ListThreadsResponse, error) {
	ctx, cancel := c.callContext(ctx)
	defer cancel()
	return c.rpc.ListThreads(ctx, req)
}
