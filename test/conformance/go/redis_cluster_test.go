package conformance

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// redisCluster is six cluster-enabled redis-server (three primaries, a
// replica each) on free ports without persistence, joined by
// redis-cli --cluster create, as test/support/redis-cluster.ts starts them.
type redisCluster struct {
	dir   string
	ports []int
	cmds  []*exec.Cmd
	url   string
}

func startRedisCluster() (*redisCluster, error) {
	binary, cli := os.Getenv("REDIS_SERVER"), os.Getenv("REDIS_CLI")
	var err error
	if binary == "" {
		if binary, err = requireTool("redis-server", "apt-get install redis-server (.ci/run does), or set REDIS_SERVER"); err != nil {
			return nil, err
		}
	}
	if cli == "" {
		if cli, err = requireTool("redis-cli", "apt-get install redis-tools (.ci/run does), or set REDIS_CLI"); err != nil {
			return nil, err
		}
	}
	dir, err := os.MkdirTemp("", "windlass-redis-cluster-")
	if err != nil {
		return nil, err
	}
	r := &redisCluster{dir: dir}
	seeds := []string{}
	for i := 0; i < 6; i++ {
		port, err := freePort()
		if err != nil {
			r.stop()
			return nil, err
		}
		// The bus port is the port + 10000 unless set: above 55535 no port at all.
		busPort, err := freePort()
		if err != nil {
			r.stop()
			return nil, err
		}
		nodeDir := filepath.Join(dir, strconv.Itoa(port))
		if err := os.Mkdir(nodeDir, 0o755); err != nil {
			r.stop()
			return nil, err
		}
		cmd := exec.Command(binary, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "",
			"--appendonly", "no", "--dir", nodeDir, "--protected-mode", "no", "--loglevel", "warning",
			"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "1000", "--shutdown-timeout", "0",
			"--cluster-port", strconv.Itoa(busPort))
		if err := cmd.Start(); err != nil {
			r.stop()
			return nil, err
		}
		r.ports = append(r.ports, port)
		r.cmds = append(r.cmds, cmd)
		seeds = append(seeds, fmt.Sprintf("127.0.0.1:%d", port))
	}
	if err := r.waitFor("answer PING", func(port int) bool { return pings(port) }); err != nil {
		r.stop()
		return nil, err
	}
	create := exec.Command(cli, append(append([]string{"--cluster", "create"}, seeds...),
		"--cluster-replicas", "1", "--cluster-yes")...)
	if out, err := create.CombinedOutput(); err != nil {
		r.stop()
		return nil, fmt.Errorf("redis-cli --cluster create: %v: %s", err, out)
	}
	if err := r.waitFor("say cluster_state:ok", func(port int) bool {
		return strings.Contains(ask(port, "CLUSTER INFO"), "cluster_state:ok")
	}); err != nil {
		r.stop()
		return nil, err
	}
	r.url = "redis-cluster://" + strings.Join(seeds, ",")
	return r, nil
}

func (r *redisCluster) waitFor(what string, holds func(port int) bool) error {
	deadline := time.Now().Add(30 * time.Second)
	for _, port := range r.ports {
		for !holds(port) {
			if time.Now().After(deadline) {
				return fmt.Errorf("redis cluster node %d did not %s", port, what)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return nil
}

// ask sends one inline command to 127.0.0.1:port and returns what the first read brings.
func ask(port int, command string) string {
	c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), 500*time.Millisecond)
	if err != nil {
		return ""
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(500 * time.Millisecond))
	if _, err := c.Write([]byte(command + "\r\n")); err != nil {
		return ""
	}
	buf := make([]byte, 4096)
	n, _ := bufio.NewReader(c).Read(buf)
	return string(buf[:n])
}

func (r *redisCluster) stop() {
	for _, cmd := range r.cmds {
		_ = cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, cmd := range r.cmds {
		_ = cmd.Wait()
	}
	_ = os.RemoveAll(r.dir)
}
