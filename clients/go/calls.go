package memory

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"iter"

	memoryv1 "github.com/windlass-ai/windlass-memory/gen/go/windlass/memory/v1"
	"google.golang.org/protobuf/proto"
)

// AddOption sets an optional field of Add.
type AddOption func(*memoryv1.AddRequest)

// WithStrategy is the strategy of a new thread. For an existing thread with
// another strategy Add fails (IsStrategyConflict) unless ReplaceStrategy.
func WithStrategy(s *Strategy) AddOption {
	return func(r *memoryv1.AddRequest) { r.Strategy = s }
}

// ReplaceStrategy gives the thread strategy s; its messages stay.
func ReplaceStrategy(s *Strategy) AddOption {
	return func(r *memoryv1.AddRequest) { r.Strategy, r.ReplaceStrategy = s, true }
}

// KeepStrategy is WithStrategy for a new thread only: an existing thread
// keeps its own strategy and Add does not fail with a strategy conflict. For
// readers that each shape the thread their own way (see Recall).
func KeepStrategy(s *Strategy) AddOption {
	return func(r *memoryv1.AddRequest) { r.Strategy, r.KeepStrategy = s, true }
}

// ExpectedLastSeq makes Add fail (IsSeqConflict) unless the thread's last seq
// is seq (0: the thread does not exist).
func ExpectedLastSeq(seq uint64) AddOption {
	return func(r *memoryv1.AddRequest) { r.ExpectedLastSeq = proto.Uint64(seq) }
}

// RequestID sets the idempotency key instead of a random one, so that a retry
// of your own (after a crash, say) is not stored twice. At most 128 bytes.
func RequestID(id string) AddOption {
	return func(r *memoryv1.AddRequest) { r.RequestId = id }
}

// Add appends msgs to thread (created on first use) with the server's default
// strategy for a new thread. See AddWith.
func (c *Client) Add(ctx context.Context, thread string, msgs ...*Message) (*AddResponse, error) {
	return c.AddWith(ctx, thread, msgs)
}

// AddWith appends msgs to thread. The call carries a random request_id
// (unless RequestID) and is retried with that same id when the server is
// UNAVAILABLE, with exponential backoff and jitter (see WithRetry), so a
// retry after a connection lost mid-call is stored once. It stops early when
// ctx is done.
func (c *Client) AddWith(ctx context.Context, thread string, msgs []*Message, opts ...AddOption) (*AddResponse, error) {
	req := &memoryv1.AddRequest{ThreadId: thread, Messages: msgs}
	for _, o := range opts {
		o(req)
	}
	if err := checkClearing("strategy.clear_tool_results", req.GetStrategy().GetClearToolResults()); err != nil {
		return nil, err
	}
	if req.RequestId == "" {
		req.RequestId = newRequestID()
	}
	return retryUnavailable(ctx, c, func(ctx context.Context) (*AddResponse, error) {
		return c.rpc.Add(ctx, req)
	})
}

func newRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on supported platforms.
	return hex.EncodeToString(b[:])
}

// GetOption sets an optional field of Get.
type GetOption func(*memoryv1.GetRequest)

// Limit overrides the strategy's size for this call (window, max messages or
// summary window); 0 means all (for summary: the summary and the messages it
// does not cover).
func Limit(n uint32) GetOption {
	return func(r *memoryv1.GetRequest) { r.Limit = proto.Uint32(n) }
}

// AllowStale makes Get of a summary thread return at once with the current
// summary instead of waiting for a fold that is due or running.
func AllowStale() GetOption {
	return func(r *memoryv1.GetRequest) { r.AllowStale = true }
}

// Recall shapes this Get with strategy s instead of the thread's, without
// changing the thread's: e.g. Recall(Window(5)) reads the newest five of any
// thread. A summary recall on a thread without a summary returns its window
// part. Limit still overrides its size.
func Recall(s *Strategy) GetOption {
	return func(r *memoryv1.GetRequest) { r.Recall = s }
}

// Get returns thread shaped by its strategy (or Recall), oldest message first, ready to
// send to a model (WithProfile and ClearToolResults shape it further). A
// thread that does not exist has no messages and a nil Thread; that is not
// an error. A profile or clearing the server would refuse is refused before
// the call, with an INVALID_ARGUMENT status naming the field.
func (c *Client) Get(ctx context.Context, thread string, opts ...GetOption) (*GetResponse, error) {
	req := &memoryv1.GetRequest{ThreadId: thread}
	for _, o := range opts {
		o(req)
	}
	if err := checkGet(req); err != nil {
		return nil, err
	}
	ctx, cancel := c.callContext(ctx)
	defer cancel()
	return c.rpc.Get(ctx, req)
}

// Clear forgets thread; it returns how many threads existed and were
// cleared (0 or 1).
func (c *Client) Clear(ctx context.Context, thread string) (uint32, error) {
	return c.clear(ctx, &memoryv1.ClearRequest{ThreadId: thread})
}

// ClearAll forgets every thread of the caller's namespace and returns how
// many there were.
func (c *Client) ClearAll(ctx context.Context) (uint32, error) {
	return c.clear(ctx, &memoryv1.ClearRequest{All: true})
}

func (c *Client) clear(ctx context.Context, req *memoryv1.ClearRequest) (uint32, error) {
	ctx, cancel := c.callContext(ctx)
	defer cancel()
	resp, err := c.rpc.Clear(ctx, req)
	return resp.GetClearedThreads(), err
}

// Threads iterates over the ids of the caller's threads in ascending byte
// order, reading pages of pageSize (0: the server's default, 100) as the loop
// goes. A failed page is yielded as the error and ends the iteration.
//
//	for id, err := range c.Threads(ctx, 0) { ... }
func (c *Client) Threads(ctx context.Context, pageSize uint32) iter.Seq2[string, error] {
	return func(yield func(string, error) bool) {
		token := ""
		for {
			page, err := c.threadsPage(ctx, pageSize, token)
			if err != nil {
				yield("", err)
				return
			}
			for _, id := range page.GetThreadIds() {
				if !yield(id, nil) {
					return
				}
			}
			if token = page.GetNextPageToken(); token == "" {
				return
			}
		}
	}
}

func (c *Client) threadsPage(ctx context.Context, pageSize uint32, token string) (*memoryv1.ListThreadsResponse, error) {
	ctx, cancel := c.callContext(ctx)
	defer cancel()
	return c.rpc.ListThreads(ctx, &memoryv1.ListThreadsRequest{PageSize: pageSize, PageToken: token})
}
