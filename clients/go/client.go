// Package memory is the Go client of windlass-memory, a conversation-memory
// service. It wraps the generated gRPC stubs (gen/go) with what every caller
// otherwise writes by hand: Add with an idempotency key and retries, paging
// through threads, a Watch that resumes after a dropped stream with backoff,
// and constructors for messages and strategies.
//
//	c, err := memory.Dial("127.0.0.1:50051", memory.WithInsecure())
//	if err != nil { ... }
//	defer c.Close()
//	_, err = c.Add(ctx, "t1", memory.User("hello"))
package memory

import (
	"context"
	"crypto/tls"
	"errors"
	"time"

	memoryv1 "github.com/windlass-ai/windlass-memory/gen/go/windlass/memory/v1"
	"google.golang.org/grpc"
	grpcbackoff "google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// Client talks to one windlass-memory server. It is safe for concurrent use.
type Client struct {
	conn    *grpc.ClientConn
	rpc     memoryv1.MemoryServiceClient
	timeout time.Duration
	retry   backoffPolicy
}

type config struct {
	creds       credentials.TransportCredentials
	token       string
	timeout     time.Duration
	retry       backoffPolicy
	dialOptions []grpc.DialOption
}

// Option configures Dial.
type Option func(*config)

// WithInsecure connects without TLS (a server on localhost or behind a
// TLS-terminating proxy).
func WithInsecure() Option {
	return func(c *config) { c.creds = insecure.NewCredentials() }
}

// WithTLS connects with TLS using cfg; nil means the system's root
// certificates. TLS is the default when neither WithTLS nor WithInsecure is
// given.
func WithTLS(cfg *tls.Config) Option {
	return func(c *config) {
		if cfg == nil {
			cfg = &tls.Config{MinVersion: tls.VersionTLS12}
		}
		c.creds = credentials.NewTLS(cfg)
	}
}

// WithToken sends "authorization: Bearer token" with every call (the server's
// WINDLASS_AUTH_TOKENS maps it to a namespace).
func WithToken(token string) Option {
	return func(c *config) { c.token = token }
}

// WithTimeout bounds each unary call (Add with its retries, Get, Clear, one
// page of Threads) whose context has no deadline of its own. Default 30s; 0
// turns it off. Watch streams are never bounded by it.
func WithTimeout(d time.Duration) Option {
	return func(c *config) { c.timeout = d }
}

// WithRetry sets how Add retries UNAVAILABLE (at most attempts calls in all,
// 1 turns retries off) and the backoff of Add retries and Watch reconnects:
// exponential from initial, capped at maxDelay, with jitter. Defaults: 5 attempts,
// 100ms, 5s.
func WithRetry(attempts int, initial, maxDelay time.Duration) Option {
	return func(c *config) {
		c.retry = backoffPolicy{attempts: attempts, initial: initial, max: maxDelay}
	}
}

// WithDialOptions passes options through to grpc.NewClient (interceptors,
// keepalive, a custom dialer, …). They are applied after the client's own.
func WithDialOptions(opts ...grpc.DialOption) Option {
	return func(c *config) { c.dialOptions = append(c.dialOptions, opts...) }
}

// Dial creates a client for target ("host:port" or any grpc-go target). Like
// grpc.NewClient it does not connect yet: the first call does.
func Dial(target string, opts ...Option) (*Client, error) {
	cfg := config{
		timeout: 30 * time.Second,
		retry:   backoffPolicy{attempts: 5, initial: 100 * time.Millisecond, max: 5 * time.Second},
	}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.retry.attempts < 1 || cfg.retry.initial <= 0 || cfg.retry.max < cfg.retry.initial {
		return nil, errors.New("memory: WithRetry needs attempts >= 1 and 0 < initial <= max")
	}
	if cfg.timeout < 0 {
		return nil, errors.New("memory: WithTimeout needs a duration >= 0")
	}
	if cfg.creds == nil {
		cfg.creds = credentials.NewTLS(&tls.Config{MinVersion: tls.VersionTLS12})
	}
	dialOptions := []grpc.DialOption{
		grpc.WithTransportCredentials(cfg.creds),
		// grpc-go's reconnect backoff grows to 2 minutes by default; cap it
		// at the client's own, so a Watch resumes soon after an outage.
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: connectBackoff(cfg.retry.max), MinConnectTimeout: 20 * time.Second}),
	}
	if cfg.token != "" {
		dialOptions = append(dialOptions, grpc.WithPerRPCCredentials(bearer(cfg.token)))
	}
	conn, err := grpc.NewClient(target, append(dialOptions, cfg.dialOptions...)...)
	if err != nil {
		return nil, err
	}
	return &Client{conn: conn, rpc: memoryv1.NewMemoryServiceClient(conn), timeout: cfg.timeout, retry: cfg.retry}, nil
}

func connectBackoff(maxDelay time.Duration) grpcbackoff.Config {
	b := grpcbackoff.DefaultConfig
	b.MaxDelay = max(maxDelay, b.BaseDelay)
	return b
}

// Close closes the connection; calls in flight end with CANCELED.
func (c *Client) Close() error { return c.conn.Close() }

// Stub is the generated client on the same connection, for what this
// package does not wrap.
func (c *Client) Stub() memoryv1.MemoryServiceClient { return c.rpc }

// callContext applies the default timeout unless ctx has a deadline.
func (c *Client) callContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok || c.timeout == 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, c.timeout)
}

// bearer sends the token on every call. It does not demand TLS: the server
// may sit behind a TLS-terminating proxy, and WithInsecure is an explicit
// choice.
type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}

func (bearer) RequireTransportSecurity() bool { return false }
