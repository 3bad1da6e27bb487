package conformance

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	memoryv1 "github.com/windlass-ai/windlass-memory/gen/go/windlass/memory/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// codeNames are the canonical gRPC code names the cases use (codes.Code.String is CamelCase).
var codeNames = map[codes.Code]string{
	codes.OK: "OK", codes.Canceled: "CANCELLED", codes.Unknown: "UNKNOWN",
	codes.InvalidArgument: "INVALID_ARGUMENT", codes.DeadlineExceeded: "DEADLINE_EXCEEDED",
	codes.NotFound: "NOT_FOUND", codes.AlreadyExists: "ALREADY_EXISTS",
	codes.PermissionDenied: "PERMISSION_DENIED", codes.ResourceExhausted: "RESOURCE_EXHAUSTED",
	codes.FailedPrecondition: "FAILED_PRECONDITION", codes.Aborted: "ABORTED",
	codes.OutOfRange: "OUT_OF_RANGE", codes.Unimplemented: "UNIMPLEMENTED", codes.Internal: "INTERNAL",
	codes.Unavailable: "UNAVAILABLE", codes.DataLoss: "DATA_LOSS", codes.Unauthenticated: "UNAUTHENTICATED",
}

// outcome is a response as proto3 JSON, or a status.
type outcome struct {
	ok      bool
	value   map[string]any
	code    string
	message string
}

// streamRead is one read of a Watch: kind is "event", "error", "ended" or "timeout".
type streamRead struct {
	kind    string
	event   map[string]any
	code    string
	message string
}

func failed(err error) outcome {
	st := status.Convert(err)
	return outcome{code: codeNames[st.Code()], message: st.Message()}
}

func toJSON(m proto.Message) (map[string]any, error) {
	b, err := protojson.Marshal(m)
	if err != nil {
		return nil, err
	}
	var v map[string]any
	return v, decodeJSON(b, &v)
}

func unary[Req, Resp proto.Message](
	ctx context.Context, req Req, body []byte, f func(context.Context, Req, ...grpc.CallOption) (Resp, error),
) (outcome, error) {
	if err := protojson.Unmarshal(body, req); err != nil {
		return outcome{}, fmt.Errorf("request: %w", err)
	}
	resp, err := f(ctx, req)
	if err != nil {
		return failed(err), nil
	}
	v, err := toJSON(resp)
	return outcome{ok: true, value: v}, err
}

// grpcClient is MemoryService over grpc-go, taking and returning proto3 JSON.
type grpcClient struct {
	conn *grpc.ClientConn
	stub memoryv1.MemoryServiceClient
}

func newGrpcClient(port int) (*grpcClient, error) {
	conn, err := grpc.NewClient(fmt.Sprintf("127.0.0.1:%d", port), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	return &grpcClient{conn: conn, stub: memoryv1.NewMemoryServiceClient(conn)}, nil
}

func (c *grpcClient) close() { _ = c.conn.Close() }

// withToken adds `authorization: Bearer <token>` to the call's metadata; "" sends none.
func withToken(ctx context.Context, token string) context.Context {
	if token == "" {
		return ctx
	}
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
}

func (c *grpcClient) unary(method string, request any, timeout time.Duration, token string) (outcome, error) {
	body, err := json.Marshal(request)
	if err != nil {
		return outcome{}, err
	}
	ctx := withToken(context.Background(), token)
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	switch method {
	case "Add":
		return unary(ctx, &memoryv1.AddRequest{}, body, c.stub.Add)
	case "Get":
		return unary(ctx, &memoryv1.GetRequest{}, body, c.stub.Get)
	case "Clear":
		return unary(ctx, &memoryv1.ClearRequest{}, body, c.stub.Clear)
	case "ListThreads":
		return unary(ctx, &memoryv1.ListThreadsRequest{}, body, c.stub.ListThreads)
	case "Rewind":
		return unary(ctx, &memoryv1.RewindRequest{}, body, c.stub.Rewind)
	case "Fork":
		return unary(ctx, &memoryv1.ForkRequest{}, body, c.stub.Fork)
	}
	return outcome{}, fmt.Errorf("unknown call %s", method)
}

// watchStream is a Watch read by a goroutine into a channel, so next can time out.
type watchStream struct {
	reads  chan streamRead
	cancel context.CancelFunc
}

func (c *grpcClient) watch(request any, timeout time.Duration, token string) (*watchStream, error) {
	body, err := json.Marshal(request)
	if err != nil {
		return nil, err
	}
	req := &memoryv1.WatchRequest{}
	if err := protojson.Unmarshal(body, req); err != nil {
		return nil, fmt.Errorf("request: %w", err)
	}
	base := withToken(context.Background(), token)
	ctx, cancel := context.WithCancel(base)
	if timeout > 0 {
		cancel()
		ctx, cancel = context.WithTimeout(base, timeout)
	}
	// Buffered beyond what a case reads, so the reader never blocks after a cancel.
	w := &watchStream{reads: make(chan streamRead, 4096), cancel: cancel}
	stream, err := c.stub.Watch(ctx, req)
	if err != nil {
		o := failed(err)
		w.reads <- streamRead{kind: "error", code: o.code, message: o.message}
		return w, nil
	}
	go func() {
		for {
			ev, err := stream.Recv()
			if errors.Is(err, io.EOF) {
				w.reads <- streamRead{kind: "ended"}
				return
			}
			if err != nil {
				o := failed(err)
				w.reads <- streamRead{kind: "error", code: o.code, message: o.message}
				return
			}
			v, err := toJSON(ev)
			if err != nil {
				w.reads <- streamRead{kind: "error", code: "CLIENT", message: err.Error()}
				return
			}
			w.reads <- streamRead{kind: "event", event: v}
		}
	}()
	return w, nil
}

func (w *watchStream) next(timeout time.Duration) streamRead {
	if timeout < time.Millisecond {
		timeout = time.Millisecond
	}
	select {
	case r := <-w.reads:
		return r
	case <-time.After(timeout):
		return streamRead{kind: "timeout"}
	}
}

func describe(r streamRead) string {
	switch r.kind {
	case "event":
		return "the event " + show(r.event)
	case "error":
		return r.code + ": " + r.message
	case "ended":
		return "the end of the stream"
	}
	return "nothing in time"
}

func checkOutcome(expect any, o outcome) string {
	exp, _ := expect.(map[string]any)
	if e, ok := exp["error"].(map[string]any); ok {
		if o.ok {
			return fmt.Sprintf("expected %v, got a response %s", e["code"], show(o.value))
		}
		return matchError(e, o.code, o.message)
	}
	if !o.ok {
		return fmt.Sprintf("expected a response, got %s: %s", o.code, o.message)
	}
	if r, ok := exp["response"]; ok {
		return match(r, o.value, "$")
	}
	return ""
}

// runCase runs one case's steps in order and returns an error naming the step at the first failure.
func runCase(c Case, client *grpcClient, model *fakeModel) error {
	saved := map[string]any{}
	streams := map[string]*watchStream{}
	defer func() {
		for _, s := range streams {
			s.cancel()
		}
	}()
	model.reset()
	for _, token := range resetTokens(c.ServerEnv) {
		cleared, err := client.unary("Clear", map[string]any{"all": true}, 0, token)
		if err != nil || !cleared.ok {
			return fmt.Errorf("Clear all before the case: %v %s: %s", err, cleared.code, cleared.message)
		}
	}
	for i, step := range c.Steps {
		if err := runStep(step, c, client, model, saved, streams); err != nil {
			text, _ := json.Marshal(step)
			if len(text) > 160 {
				text = text[:160]
			}
			return fmt.Errorf("%s step %d %s: %w", c.Name, i+1, text, err)
		}
	}
	if n := model.pending(); n > 0 {
		return fmt.Errorf("%s: %d scripted model steps were never consumed", c.Name, n)
	}
	return nil
}

// stepToken is a call or watch step's bearer token: its own "token" (null: none), else the case's; "" is none.
func stepToken(step map[string]any, c Case) (string, error) {
	v, ok := step["token"]
	if !ok {
		if c.Token == nil {
			return "", nil
		}
		return *c.Token, nil
	}
	if v == nil {
		return "", nil
	}
	s, ok := v.(string)
	if !ok {
		return "", errors.New("token must be a string or null")
	}
	return s, nil
}

func runStep(step map[string]any, c Case, client *grpcClient, model *fakeModel, saved map[string]any, streams map[string]*watchStream) error {
	request := func() (any, error) {
		r, ok := step["request"]
		if !ok {
			r = map[string]any{}
		}
		return resolveRefs(r, saved)
	}
	if method, ok := step["call"].(string); ok {
		req, err := request()
		if err != nil {
			return err
		}
		timeout := millis(number(step["timeoutMs"], 0))
		token, err := stepToken(step, c)
		if err != nil {
			return err
		}
		for n := 0; n < int(number(step["repeat"], 1)); n++ {
			pollUntil := time.Now().Add(millis(number(step["pollMs"], 0)))
			for {
				started := time.Now()
				o, err := client.unary(method, req, timeout, token)
				if err != nil {
					return err
				}
				elapsed := time.Since(started)
				if limit, ok := step["maxElapsedMs"]; ok && elapsed > millis(number(limit, 0)) {
					return fmt.Errorf("took %d ms, more than %v", elapsed.Milliseconds(), limit)
				}
				diff := checkOutcome(step["expect"], o)
				if diff == "" {
					if name, ok := step["as"].(string); ok && o.ok {
						saved[name] = o.value
					}
					break
				}
				if !time.Now().Before(pollUntil) {
					return errors.New(diff)
				}
				time.Sleep(50 * time.Millisecond)
			}
		}
		return nil
	}
	if name, ok := step["watch"].(string); ok {
		req, err := request()
		if err != nil {
			return err
		}
		token, err := stepToken(step, c)
		if err != nil {
			return err
		}
		if old, ok := streams[name]; ok {
			old.cancel()
		}
		w, err := client.watch(req, millis(number(step["timeoutMs"], 0)), token)
		if err != nil {
			return err
		}
		streams[name] = w
		return nil
	}
	if name, ok := step["next"].(string); ok {
		w, ok := streams[name]
		if !ok {
			return fmt.Errorf("no stream named %s", name)
		}
		within := millis(number(step["withinMs"], 5000))
		if e, ok := step["error"].(map[string]any); ok {
			until := time.Now().Add(within)
			for {
				r := w.next(time.Until(until))
				if r.kind == "error" {
					if d := matchError(e, r.code, r.message); d != "" {
						return errors.New(d)
					}
					return nil
				}
				if _, progress := r.event["progress"].(map[string]any); r.kind == "event" && progress {
					continue
				}
				return fmt.Errorf("expected %v, got %s", e["code"], describe(r))
			}
		}
		if _, ok := step["events"].([]any); !ok {
			return errors.New("next needs events or error")
		}
		resolved, err := resolveRefs(step["events"], saved)
		if err != nil {
			return err
		}
		events, _ := resolved.([]any)
		names, _ := step["as"].([]any)
		for k, expected := range events {
			exp, _ := expected.(map[string]any)
			_, wantsProgress := exp["progress"]
			until := time.Now().Add(within)
			skipped := ""
			for {
				r := w.next(time.Until(until))
				if r.kind != "event" {
					return fmt.Errorf("event %d: expected an event, got %s%s", k+1, describe(r), skipped)
				}
				_, progress := r.event["progress"].(map[string]any)
				if progress && !wantsProgress {
					continue
				}
				if d := match(expected, r.event, "$"); d != "" {
					if progress && wantsProgress {
						// A Progress that does not match an expected Progress is skipped.
						skipped = " (after skipping a Progress: " + d + ")"
						continue
					}
					return fmt.Errorf("event %d: %s in %s", k+1, d, show(r.event))
				}
				if k < len(names) {
					if n, ok := names[k].(string); ok {
						saved[n] = r.event
					}
				}
				break
			}
		}
		return nil
	}
	if name, ok := step["cancel"].(string); ok {
		w, ok := streams[name]
		if !ok {
			return fmt.Errorf("no stream named %s", name)
		}
		w.cancel()
		delete(streams, name)
		return nil
	}
	if list, ok := step["model"].([]any); ok {
		steps := make([]map[string]any, 0, len(list))
		for _, s := range list {
			m, ok := s.(map[string]any)
			if !ok {
				return fmt.Errorf("model step %v is not an object", s)
			}
			steps = append(steps, m)
		}
		return model.push(steps)
	}
	if release, ok := step["modelRelease"].(bool); ok && release {
		model.release()
		return nil
	}
	if want, ok := step["modelRequests"]; ok {
		if got := model.requests(); float64(got) != number(want, -1) {
			return fmt.Errorf("expected %v model requests, got %d", want, got)
		}
		return nil
	}
	return errors.New("unknown step")
}

var tally struct{ cases, stores, passed, failed int }

func TestMain(m *testing.M) {
	code := m.Run()
	fmt.Printf("conformance go: %d cases × %d stores: %d passed, %d failed\n",
		tally.cases, tally.stores, tally.passed, tally.failed)
	os.Exit(code)
}

// TestConformance runs every case against every store of CONFORMANCE_STORES, in order.
func TestConformance(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	cases, err := loadCases(filepath.Join(root, "test", "conformance", "cases"))
	if err != nil {
		t.Fatal(err)
	}
	stores, err := storesFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	tally.cases, tally.stores = len(cases), len(stores)
	pool := newServerPool(root)
	defer pool.close()
	for _, store := range stores {
		t.Run(store, func(t *testing.T) {
			for _, c := range cases {
				t.Run(c.Name, func(t *testing.T) {
					err := func() error {
						server, err := pool.get(store, c)
						if err != nil {
							return err
						}
						client, err := server.grpc()
						if err != nil {
							return err
						}
						return runCase(c, client, server.model)
					}()
					if err != nil {
						tally.failed++
						t.Fatal(err)
					}
					tally.passed++
				})
			}
		})
	}
}
