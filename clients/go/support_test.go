package memory_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sync"
	"syscall"
	"testing"
	"time"

	memory "github.com/windlass-ai/windlass-memory/clients/go"
)

// The tests run the real server built from this checkout (dist/, `npm run
// build`) with Node from PATH (source scripts/use-node.sh).

var repoRoot = func() string {
	root, err := filepath.Abs("../..")
	if err != nil {
		panic(err)
	}
	return root
}()

var listening = regexp.MustCompile(`gRPC ([\d.]+:\d+)`)

type server struct {
	cmd    *exec.Cmd
	addr   string
	stderr *syncBuffer
	done   chan struct{}
}

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// startServer starts `windlass-memory serve` on free ports with the built-in
// extractive summariser; flags and env (KEY=VALUE) are added. It is stopped
// when the test ends (and may be stopped before with stop).
func startServer(t *testing.T, env []string, flags ...string) *server {
	t.Helper()
	if _, err := os.Stat(filepath.Join(repoRoot, "dist", "src", "main.js")); err != nil {
		t.Fatal("dist/src/main.js is missing: run npm run build first")
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatal("node is not on PATH: source scripts/use-node.sh")
	}
	args := append([]string{
		filepath.Join(repoRoot, "bin", "windlass-memory.js"), "serve",
		"--host", "127.0.0.1", "--port", "0", "--http-port", "0", "--log-level", "error",
	}, flags...)
	s := &server{cmd: exec.Command(node, args...), stderr: &syncBuffer{}, done: make(chan struct{})}
	s.cmd.Dir = repoRoot
	s.cmd.Env = append(os.Environ(), env...)
	s.cmd.Stderr = s.stderr
	stdout, err := s.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if m := listening.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case addr <- m[1]:
				default:
				}
			}
		}
		_ = s.cmd.Wait()
		close(s.done)
	}()
	t.Cleanup(s.stop)
	select {
	case s.addr = <-addr:
		return s
	case <-s.done:
	case <-time.After(60 * time.Second):
	}
	t.Fatalf("windlass-memory did not start: %s", s.stderr.String())
	return nil
}

// stop sends SIGTERM and waits for the process to exit.
func (s *server) stop() {
	select {
	case <-s.done:
		return
	default:
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(20 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
}

func dial(t *testing.T, addr string, opts ...memory.Option) *memory.Client {
	t.Helper()
	c, err := memory.Dial(addr, append([]memory.Option{memory.WithInsecure()}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func testContext(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// proxy is a TCP proxy in front of a server that can be pointed elsewhere,
// taken down (it then accepts and closes at once, like a host whose server
// is gone), made to cut its connections, and armed to drop one connection at
// a chosen point of an HTTP/2 exchange. It counts the connections it accepts.
type proxy struct {
	ln net.Listener

	mu       sync.Mutex
	upstream string // "": down
	accepts  int
	drops    int
	dropMode dropMode
	conns    map[net.Conn]struct{}
}

type dropMode int

const (
	dropNone dropMode = iota
	// after forwarding the client's whole request (a DATA frame ending a stream)
	dropAfterRequest
	// instead of forwarding the server's answer (its first DATA frame of a stream)
	dropAfterResponse
)

func startProxy(t *testing.T, upstream string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, upstream: upstream, conns: map[net.Conn]struct{}{}}
	t.Cleanup(func() {
		_ = ln.Close()
		p.cut()
	})
	go p.serve()
	return p
}

func (p *proxy) addr() string { return p.ln.Addr().String() }

func (p *proxy) setUpstream(addr string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.upstream = addr
}

func (p *proxy) arm(mode dropMode) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.dropMode = mode
}

func (p *proxy) counts() (accepts, drops int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.accepts, p.drops
}

// cut closes every open connection, as a network failure would.
func (p *proxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		_ = c.Close()
	}
	clear(p.conns)
}

func (p *proxy) serve() {
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		p.accepts++
		upstream := p.upstream
		p.mu.Unlock()
		if upstream == "" {
			_ = client.Close()
			continue
		}
		go p.relay(client, upstream)
	}
}

func (p *proxy) relay(client net.Conn, upstream string) {
	srv, err := net.Dial("tcp", upstream)
	if err != nil {
		_ = client.Close()
		return
	}
	p.mu.Lock()
	p.conns[client], p.conns[srv] = struct{}{}, struct{}{}
	p.mu.Unlock()
	closeBoth := func() {
		_ = client.Close()
		_ = srv.Close()
	}
	go func() {
		defer closeBoth()
		// The client's connection preface comes before its frames.
		if _, err := io.CopyN(srv, client, 24); err != nil {
			return
		}
		p.copyFrames(srv, client, dropAfterRequest)
	}()
	defer closeBoth()
	p.copyFrames(client, srv, dropAfterResponse)
}

// copyFrames forwards HTTP/2 frames from src to dst until either fails; when
// the proxy is armed with mode, it drops the connection at that frame.
func (p *proxy) copyFrames(dst io.Writer, src io.Reader, mode dropMode) {
	header := make([]byte, 9)
	for {
		if _, err := io.ReadFull(src, header); err != nil {
			return
		}
		length := int(header[0])<<16 | int(header[1])<<8 | int(header[2])
		frameType, flags := header[3], header[4]
		stream := binary.BigEndian.Uint32(header[5:9]) & 0x7fffffff
		payload := make([]byte, length)
		if _, err := io.ReadFull(src, payload); err != nil {
			return
		}
		const data, endStream = 0, 0x1
		isData := frameType == data && stream != 0
		if mode == dropAfterResponse && isData && p.takeDrop(mode) {
			return
		}
		if _, err := dst.Write(append(header, payload...)); err != nil {
			return
		}
		if mode == dropAfterRequest && isData && flags&endStream != 0 && p.takeDrop(mode) {
			return
		}
	}
}

func (p *proxy) takeDrop(mode dropMode) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.dropMode != mode {
		return false
	}
	p.dropMode = dropNone
	p.drops++
	return true
}

// eventually waits until cond holds, checking every 20ms, up to d.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting until %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
