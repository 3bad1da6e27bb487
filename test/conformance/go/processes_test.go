package conformance

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// fakeModel is a scripted OpenAI-compatible Chat Completions server on a free
// port: steps are consumed in order; once the script is used up the reply is
// "summary #N", N being the requests since the last reset.
type fakeModel struct {
	mu      sync.Mutex
	script  []map[string]any
	count   int
	server  *http.Server
	baseURL string
	// released is closed by the case's release; held steps wait for it. Each
	// case starts with a new one.
	released chan struct{}
}

func startFakeModel() (*fakeModel, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	m := &fakeModel{baseURL: fmt.Sprintf("http://%s/v1", ln.Addr()), released: make(chan struct{})}
	m.server = &http.Server{Handler: http.HandlerFunc(m.handle), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = m.server.Serve(ln) }()
	return m, nil
}

func (m *fakeModel) handle(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	if r.URL.Path != "/v1/chat/completions" || r.Method != http.MethodPost {
		writeJSON(w, http.StatusNotFound, map[string]any{"error": map[string]any{"message": "no route"}})
		return
	}
	var req struct {
		Model    *string `json:"model"`
		Messages []any   `json:"messages"`
	}
	if json.Unmarshal(body, &req) != nil || req.Model == nil || req.Messages == nil {
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": map[string]any{"message": "not a chat completion request"}})
		return
	}
	step, released := m.take()
	if d := number(step["delayMs"], 0); d > 0 {
		select {
		case <-time.After(millis(d)):
		case <-r.Context().Done():
			return
		}
	}
	if held, _ := step["held"].(bool); held {
		select {
		case <-released:
		case <-r.Context().Done():
			return
		}
	}
	switch {
	case step["reply"] != nil:
		writeJSON(w, http.StatusOK, map[string]any{
			"id": "chatcmpl-fake", "object": "chat.completion", "created": time.Now().Unix(), "model": *req.Model,
			"choices": []any{map[string]any{
				"index": 0, "finish_reason": "stop",
				"message": map[string]any{"role": "assistant", "content": fmt.Sprint(step["reply"])},
			}},
			"usage": map[string]any{"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
		})
	case step["status"] != nil:
		writeJSON(w, int(number(step["status"], 500)), map[string]any{"error": map[string]any{"message": "fake failure", "type": "server_error"}})
	default:
		w.Header().Set("content-type", "application/json")
		_, _ = w.Write([]byte("<html>this is not JSON"))
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("content-type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func (m *fakeModel) take() (map[string]any, chan struct{}) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.count++
	if len(m.script) == 0 {
		return map[string]any{"reply": fmt.Sprintf("summary #%d", m.count)}, m.released
	}
	step := m.script[0]
	m.script = m.script[1:]
	return step, m.released
}

func (m *fakeModel) reset() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.script, m.count = nil, 0
	m.releaseLocked() // whatever a failed case left held
	m.released = make(chan struct{})
}

// release lets held replies go: those waiting now and those taken later in the case.
func (m *fakeModel) release() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.releaseLocked()
}

func (m *fakeModel) releaseLocked() {
	select {
	case <-m.released:
	default:
		close(m.released)
	}
}

func (m *fakeModel) push(steps []map[string]any) error {
	for _, s := range steps {
		if s["reply"] == nil && s["status"] == nil && s["malformed"] == nil {
			return fmt.Errorf("unknown model step %v", s)
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.script = append(m.script, steps...)
	return nil
}

func (m *fakeModel) requests() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.count
}

func (m *fakeModel) pending() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.script)
}

func (m *fakeModel) close() { _ = m.server.Close() }

// lockedBuffer keeps the tail of a child's stderr for error messages.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.buf.String()
	if len(s) > 4000 {
		s = s[len(s)-4000:]
	}
	return s
}

var listening = regexp.MustCompile(`gRPC [^\s,]+:(\d+), Connect/gRPC-Web/JSON http://[^\s:]+:(\d+)`)

// serverProcess is the compiled `windlass-memory serve` on free ports, with its own fake model.
type serverProcess struct {
	cmd      *exec.Cmd
	model    *fakeModel
	grpcPort int
	stderr   *lockedBuffer
	client   *grpcClient
}

// requireTool is the tool's path; a missing tool is an error, never a skip (CI=true must fail).
func requireTool(name, hint string) (string, error) {
	path, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("%s is not installed: %s", name, hint)
	}
	return path, nil
}

// startServerProcess starts a server; env is added to this process's environment (a case's serverEnv).
func startServerProcess(root, store string, flags []string, env map[string]string) (*serverProcess, error) {
	if _, err := os.Stat(filepath.Join(root, "dist", "src", "main.js")); err != nil {
		return nil, fmt.Errorf("dist/src/main.js is missing: run npm run build first")
	}
	node, err := requireTool("node", "install Node 24 (source scripts/use-node.sh)")
	if err != nil {
		return nil, err
	}
	model, err := startFakeModel()
	if err != nil {
		return nil, err
	}
	args := append([]string{
		filepath.Join(root, "bin", "windlass-memory.js"), "serve",
		"--host", "127.0.0.1", "--port", "0", "--http-port", "0",
		"--summarizer", "openai", "--openai-base-url", model.baseURL,
		"--openai-max-retries", "0", "--progress-interval-ms", "100", "--log-level", "error",
		"--store", store,
	}, flags...)
	s := &serverProcess{cmd: exec.Command(node, args...), model: model, stderr: &lockedBuffer{}}
	s.cmd.Dir = root
	s.cmd.Env = os.Environ()
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		s.cmd.Env = append(s.cmd.Env, k+"="+env[k])
	}
	s.cmd.Stderr = s.stderr
	stdout, err := s.cmd.StdoutPipe()
	if err != nil {
		model.close()
		return nil, err
	}
	if err := s.cmd.Start(); err != nil {
		model.close()
		return nil, err
	}
	ports := make(chan int, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		found := false
		for sc.Scan() {
			if m := listening.FindStringSubmatch(sc.Text()); m != nil && !found {
				found = true
				p, _ := strconv.Atoi(m[1])
				ports <- p
			}
		}
		close(ports)
	}()
	select {
	case p, ok := <-ports:
		if ok {
			s.grpcPort = p
			return s, nil
		}
	case <-time.After(30 * time.Second):
	}
	s.stop()
	return nil, fmt.Errorf("windlass-memory did not start: %s", s.stderr.String())
}

func (s *serverProcess) grpc() (*grpcClient, error) {
	if s.client == nil {
		c, err := newGrpcClient(s.grpcPort)
		if err != nil {
			return nil, err
		}
		s.client = c
	}
	return s.client, nil
}

func (s *serverProcess) stop() {
	if s.client != nil {
		s.client.close()
	}
	if s.cmd.ProcessState == nil {
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = s.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = s.cmd.Process.Kill()
			<-done
		}
	}
	s.model.close()
}

// redisServer is redis-server on a free port without persistence, in a temporary directory.
type redisServer struct {
	cmd  *exec.Cmd
	dir  string
	port int
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

func startRedisServer() (*redisServer, error) {
	binary := os.Getenv("REDIS_SERVER")
	if binary == "" {
		var err error
		if binary, err = requireTool("redis-server", "apt-get install redis-server (.ci/run does), or set REDIS_SERVER"); err != nil {
			return nil, err
		}
	}
	dir, err := os.MkdirTemp("", "windlass-redis-")
	if err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	r := &redisServer{dir: dir, port: port, cmd: exec.Command(binary,
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", dir, "--protected-mode", "no", "--loglevel", "warning")}
	if err := r.cmd.Start(); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(10 * time.Second)
	for !pings(port) {
		if time.Now().After(deadline) {
			r.stop()
			return nil, fmt.Errorf("redis-server did not start on port %d", port)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return r, nil
}

func pings(port int) bool {
	c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), 500*time.Millisecond)
	if err != nil {
		return false
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(500 * time.Millisecond))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return false
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	return err == nil && strings.HasPrefix(line, "+PONG")
}

func (r *redisServer) stop() {
	_ = r.cmd.Process.Signal(syscall.SIGTERM)
	_ = r.cmd.Wait()
	_ = os.RemoveAll(r.dir)
}

// postgresBinDir is the directory of initdb and postgres, found as
// test/support/postgres-server.ts finds it: POSTGRES_BIN, else
// `pg_config --bindir`, else the newest /usr/lib/postgresql/<version>/bin
// (Debian's, which is not on PATH).
func postgresBinDir() (string, error) {
	hasBinaries := func(d string) bool {
		_, a := os.Stat(filepath.Join(d, "postgres"))
		_, b := os.Stat(filepath.Join(d, "initdb"))
		return a == nil && b == nil
	}
	if given, ok := os.LookupEnv("POSTGRES_BIN"); ok {
		// Named by the user: that directory or an error naming it, never another one.
		if hasBinaries(given) {
			return given, nil
		}
		return "", fmt.Errorf("POSTGRES_BIN=%s holds no postgres and initdb", given)
	}
	var candidates []string
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		candidates = append(candidates, strings.TrimSpace(string(out)))
	}
	const root = "/usr/lib/postgresql"
	if entries, err := os.ReadDir(root); err == nil {
		var versions []int
		for _, e := range entries {
			if v, err := strconv.Atoi(e.Name()); err == nil {
				versions = append(versions, v)
			}
		}
		sort.Sort(sort.Reverse(sort.IntSlice(versions)))
		for _, v := range versions {
			candidates = append(candidates, filepath.Join(root, strconv.Itoa(v), "bin"))
		}
	}
	for _, d := range candidates {
		if hasBinaries(d) {
			return d, nil
		}
	}
	looked := strings.Join(candidates, ", ")
	if looked == "" {
		looked = "no directory"
	}
	// An error, never a skip: under CI=true a missing PostgreSQL must fail the run.
	return "", fmt.Errorf("PostgreSQL's initdb and postgres were not found (looked in %s); install Debian's "+
		"postgresql (apt-get install postgresql; .ci/run does) or set POSTGRES_BIN to their directory", looked)
}

// postgresServer is PostgreSQL on a free port of 127.0.0.1 in a temporary data
// directory, started as test/support/postgres-server.ts starts it;
// createDatabase gives each windlass server a fresh database.
type postgresServer struct {
	bin  string
	dir  string
	cmd  *exec.Cmd
	port int
	// cred runs initdb and postgres as the postgres system user when this
	// process is root (both refuse root); nil otherwise.
	cred *syscall.Credential
	// exited is closed once the postmaster has been waited for.
	exited chan struct{}
}

var errPortInUse = errors.New("port in use")

func startPostgresServer() (*postgresServer, error) {
	bin, err := postgresBinDir()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "windlass-postgres-")
	if err != nil {
		return nil, err
	}
	p := &postgresServer{bin: bin, dir: dir}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			p.stop()
			return nil, errors.New("running as root, and there is no postgres user to run PostgreSQL as")
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		p.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		// The postgres user writes the data directory (and the socket) in here.
		if err := os.Chown(dir, uid, gid); err != nil {
			p.stop()
			return nil, err
		}
	}
	data := filepath.Join(dir, "data")
	initdb := p.command("initdb", "-D", data, "-U", "postgres", "-A", "trust", "-E", "UTF8",
		"--locale", "C.UTF-8", "--no-sync")
	if out, err := initdb.CombinedOutput(); err != nil {
		p.stop()
		return nil, fmt.Errorf("initdb failed: %v: %s", err, out)
	}
	for attempt := 1; ; attempt++ {
		if p.port, err = freePort(); err == nil {
			err = p.launch(data)
		}
		// freePort closes its listener before postgres binds: another process
		// may take the port in between; another port then.
		if err == nil || !errors.Is(err, errPortInUse) || attempt >= 5 {
			break
		}
	}
	if err != nil {
		p.stop()
		return nil, err
	}
	return p, nil
}

// command is one of the server's programs, run as the server's user, in its
// directory (the postgres user may not be able to read the repository).
func (p *postgresServer) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(p.bin, name), args...)
	cmd.Dir = p.dir
	if p.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: p.cred}
	}
	return cmd
}

func (p *postgresServer) launch(data string) error {
	output := &lockedBuffer{}
	cmd := p.command("postgres", "-D", data, "-p", strconv.Itoa(p.port), "-k", p.dir,
		"-c", "listen_addresses=127.0.0.1", "-c", "max_connections=300", "-c", "shared_buffers=32MB")
	cmd.Stdout, cmd.Stderr = output, output
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	deadline := time.Now().Add(30 * time.Second)
	for !p.ready() {
		select {
		case <-exited:
			if strings.Contains(strings.ToLower(output.String()), "address already in use") {
				return fmt.Errorf("port %d: %w", p.port, errPortInUse)
			}
			return fmt.Errorf("postgres exited at start-up: %s", strings.TrimSpace(output.String()))
		default:
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			<-exited
			return fmt.Errorf("postgres did not answer within 30 s: %s", output.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	p.cmd = cmd
	p.exited = exited
	return nil
}

// ready is pg_isready: success once the server accepts connections (not while it starts up).
func (p *postgresServer) ready() bool {
	probe := exec.Command(filepath.Join(p.bin, "pg_isready"), "-q", "-h", "127.0.0.1",
		"-p", strconv.Itoa(p.port), "-U", "postgres", "-d", "postgres", "-t", "1")
	return probe.Run() == nil
}

// createDatabase makes a new, empty database on this server and gives its URL.
func (p *postgresServer) createDatabase() (string, error) {
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	name := "w_" + hex.EncodeToString(b)
	made := exec.Command(filepath.Join(p.bin, "createdb"), "-h", "127.0.0.1", "-p", strconv.Itoa(p.port),
		"-U", "postgres", name)
	if out, err := made.CombinedOutput(); err != nil {
		return "", fmt.Errorf("createdb %s failed: %v: %s", name, err, out)
	}
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s", p.port, name), nil
}

func (p *postgresServer) stop() {
	if p.cmd != nil {
		// Immediate shutdown: the data is removed next, so no shutdown checkpoint is owed.
		_ = p.cmd.Process.Signal(syscall.SIGQUIT)
		select {
		case <-p.exited:
		case <-time.After(10 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
		p.cmd = nil
	}
	_ = os.RemoveAll(p.dir)
}

// serverPool holds one server per (store, flag set, environment), started on first use.
type serverPool struct {
	root      string
	servers   map[string]*serverProcess
	perStore  map[string]int
	redis     *redisServer
	cluster   *redisCluster
	postgres  *postgresServer
	sqliteDir string
}

func newServerPool(root string) *serverPool {
	return &serverPool{root: root, servers: map[string]*serverProcess{}, perStore: map[string]int{}}
}

func (p *serverPool) get(store string, c Case) (*serverProcess, error) {
	key := store + " " + c.serverKey()
	if s, ok := p.servers[key]; ok {
		return s, nil
	}
	index := p.perStore[store]
	var spec string
	switch store {
	case "memory":
		spec = "memory"
	case "sqlite":
		if p.sqliteDir == "" {
			dir, err := os.MkdirTemp("", "windlass-conformance-")
			if err != nil {
				return nil, err
			}
			p.sqliteDir = dir
		}
		spec = "sqlite:" + filepath.Join(p.sqliteDir, fmt.Sprintf("server-%d.db", index))
	case "redis":
		if p.redis == nil {
			r, err := startRedisServer()
			if err != nil {
				return nil, err
			}
			p.redis = r
		}
		// One database per server, so servers of one store never share state.
		spec = fmt.Sprintf("redis://127.0.0.1:%d/%d", p.redis.port, index)
	case "redis-cluster":
		if p.cluster == nil {
			r, err := startRedisCluster()
			if err != nil {
				return nil, err
			}
			p.cluster = r
		}
		// A cluster has one database: its servers share it, and the cases, which run one
		// at a time and each start with Clear {all: true}, never meet.
		spec = p.cluster.url
	case "postgres":
		if p.postgres == nil {
			pg, err := startPostgresServer()
			if err != nil {
				return nil, err
			}
			p.postgres = pg
		}
		// A fresh database per server, so servers of one store never share state.
		var err error
		if spec, err = p.postgres.createDatabase(); err != nil {
			return nil, err
		}
	}
	flags := c.ServerFlags
	if store == "redis-cluster" {
		// Each namespace split over the cluster's three primaries (README "Namespace shards").
		flags = append(append([]string{}, flags...), "--redis-namespace-shards", "3")
	}
	s, err := startServerProcess(p.root, spec, flags, c.ServerEnv)
	if err != nil {
		return nil, err
	}
	p.perStore[store] = index + 1
	p.servers[key] = s
	return s, nil
}

func (p *serverPool) close() {
	for _, s := range p.servers {
		s.stop()
	}
	if p.redis != nil {
		p.redis.stop()
	}
	if p.cluster != nil {
		p.cluster.stop()
	}
	if p.postgres != nil {
		p.postgres.stop()
	}
	if p.sqliteDir != "" {
		_ = os.RemoveAll(p.sqliteDir)
	}
}
