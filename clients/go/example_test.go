package memory_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// buildExample compiles ./examples/name into a temporary directory.
func buildExample(t *testing.T, name string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), name)
	out, err := exec.Command("go", "build", "-o", bin, "./examples/"+name).CombinedOutput()
	if err != nil {
		t.Fatalf("go build ./examples/%s: %v\n%s", name, err, out)
	}
	return bin
}

func runExample(t *testing.T, ctx context.Context, bin string, args ...string) string {
	t.Helper()
	out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %v: %v\n%s", filepath.Base(bin), args, err, out)
	}
	return string(out)
}

func TestQuickstartExampleRuns(t *testing.T) {
	bin := buildExample(t, "quickstart")
	s := startServer(t, nil)
	ctx := testContext(t, 120*time.Second)
	// Twice: it leaves the server as it found it.
	for range 2 {
		out := runExample(t, ctx, bin, "-target", s.addr)
		for _, want := range []string{
			"stored seqs 1..5\n",
			`3 ROLE_ASSISTANT: "" call call-1 get_weather({"city":"Paris"})`,
			"4 ROLE_TOOL: \"18 degrees, sunny\"\n",
			"thread: go-quickstart\n",
			"refused: FailedPrecondition",
			"cleared threads: 1\n",
		} {
			if !strings.Contains(out, want) {
				t.Fatalf("the quickstart printed\n%s\nwithout %q", out, want)
			}
		}
	}
}

func TestWatchExampleResumesFromAToken(t *testing.T) {
	bin := buildExample(t, "watch")
	s := startServer(t, nil)
	c := dial(t, s.addr)
	ctx := testContext(t, 120*time.Second)
	token := resumeTokenNow(t, ctx, c)
	addN(t, ctx, c, "example", 1, 3)
	out := runExample(t, ctx, bin, "-target", s.addr, "-resume", token, "-events", "3")
	got := regexp.MustCompile(`(?m)^[^ ]+: .*$`).FindAllString(out, -1)
	var events []string
	for _, line := range got {
		if !strings.HasPrefix(line, "resume token:") {
			events = append(events, line)
		}
	}
	want := []string{"example: messages 1..1 added", "example: messages 2..2 added", "example: messages 3..3 added"}
	if strings.Join(events, "\n") != strings.Join(want, "\n") {
		t.Fatalf("the watch example printed\n%s\nwant the events %q", out, want)
	}
	if n := strings.Count(out, "resume token: "); n != 3 {
		t.Fatalf("the watch example printed %d resume tokens, want 3:\n%s", n, out)
	}
}

// codeBlocks are the fenced blocks of README.md of the given language.
func codeBlocks(t *testing.T, lang string) []string {
	t.Helper()
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile("(?ms)^```" + lang + "\n(.*?)^```$")
	var blocks []string
	for _, m := range re.FindAllStringSubmatch(string(readme), -1) {
		blocks = append(blocks, m[1])
	}
	return blocks
}

func TestReadmeShowsTheExamplesAsTheyAre(t *testing.T) {
	blocks := codeBlocks(t, "go")
	files := []string{"examples/quickstart/main.go", "examples/watch/main.go"}
	if len(blocks) != len(files) {
		t.Fatalf("README.md has %d Go blocks, want %d (the examples, which the tests run)", len(blocks), len(files))
	}
	for i, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if blocks[i] != string(src) {
			t.Fatalf("README.md's Go block %d is not %s as it is", i+1, f)
		}
	}
}

// The README's install steps, run in a new module beside nothing but this
// checkout, give a module that builds the quickstart.
func TestReadmeInstallStepsWork(t *testing.T) {
	blocks := codeBlocks(t, "sh")
	if len(blocks) == 0 || !strings.HasPrefix(blocks[0], "go mod edit") {
		t.Fatalf("README.md's first sh block is not the install steps: %q", blocks)
	}
	app := t.TempDir()
	steps := strings.ReplaceAll(blocks[0], "../windlass-memory", repoRoot)
	env := append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	for _, cmd := range []string{"go mod init example.com/app", "set -euo pipefail\n" + steps} {
		c := exec.Command("bash", "-c", cmd)
		c.Dir, c.Env = app, env
		if out, err := c.CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", cmd, err, out)
		}
	}
	src, err := os.ReadFile("examples/quickstart/main.go")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(app, "main.go"), src, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range [][]string{{"go", "mod", "tidy"}, {"go", "build", "-o", filepath.Join(app, "app"), "."}} {
		c := exec.Command(cmd[0], cmd[1:]...)
		c.Dir, c.Env = app, env
		if out, err := c.CombinedOutput(); err != nil {
			t.Fatalf("%v: %v\n%s", cmd, err, out)
		}
	}
}
