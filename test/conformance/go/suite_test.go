// Package conformance is the Go runner of the conformance suite: every case
// of ../cases (format in ../README.md) against the compiled windlass-memory
// command, per store, over gRPC with grpc-go and the generated memoryv1
// client. The TypeScript (../suite.ts) and Python runners implement the same
// rules; keep the three in step.
package conformance

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Case is one conformance case.
type Case struct {
	Name        string   `json:"name"`
	Description string   `json:"description"`
	ServerFlags []string `json:"serverFlags"`
	// ServerEnv holds environment variables of the case's server, on top of the runner's own.
	ServerEnv map[string]string `json:"serverEnv"`
	// Token is the bearer token of every call and watch step without its own "token".
	Token *string          `json:"token"`
	Steps []map[string]any `json:"steps"`
}

// serverKey groups cases by server: cases with equal flags and equal
// environments share a server (json.Marshal sorts the map's keys).
func (c Case) serverKey() string {
	env := c.ServerEnv
	if env == nil {
		env = map[string]string{}
	}
	b, _ := json.Marshal([]any{append([]string{}, c.ServerFlags...), env})
	return string(b)
}

// resetTokens are the tokens the reset before a case sends Clear {all: true}
// with: one token per namespace of the server's WINDLASS_AUTH_TOKENS (the
// first token of each), or a single call without a token ("") when auth is off.
func resetTokens(env map[string]string) []string {
	raw := env["WINDLASS_AUTH_TOKENS"]
	if raw == "" {
		return []string{""}
	}
	var tokens []string
	seen := map[string]bool{}
	for _, pair := range strings.Split(raw, ",") {
		token, namespace, _ := strings.Cut(pair, "=")
		namespace = strings.TrimSpace(namespace)
		if !seen[namespace] {
			seen[namespace] = true
			tokens = append(tokens, strings.TrimSpace(token))
		}
	}
	return tokens
}

var caseName = regexp.MustCompile(`^[a-z0-9-]+$`)

// decodeJSON decodes with json.Number, so integers keep their decimal text.
func decodeJSON(data []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	return d.Decode(v)
}

// loadCases reads every case of every file in dir, in file-name then file order.
func loadCases(dir string) ([]Case, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return nil, err
	}
	sort.Strings(files)
	var out []Case
	seen := map[string]bool{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		var doc struct {
			Cases []json.RawMessage `json:"cases"`
		}
		if err := json.Unmarshal(data, &doc); err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		for _, raw := range doc.Cases {
			var c Case
			if err := decodeJSON(raw, &c); err != nil {
				return nil, fmt.Errorf("%s: %w", f, err)
			}
			if !caseName.MatchString(c.Name) || seen[c.Name] {
				return nil, fmt.Errorf("%s: bad or duplicate case name %q", f, c.Name)
			}
			seen[c.Name] = true
			out = append(out, c)
		}
	}
	return out, nil
}

// storesFromEnv is CONFORMANCE_STORES, default all five.
func storesFromEnv() ([]string, error) {
	raw := os.Getenv("CONFORMANCE_STORES")
	if raw == "" {
		raw = "memory,sqlite,redis,postgres,redis-cluster"
	}
	var stores []string
	for _, s := range strings.Split(raw, ",") {
		s = strings.TrimSpace(s)
		switch s {
		case "":
		case "memory", "sqlite", "redis", "postgres", "redis-cluster":
			stores = append(stores, s)
		default:
			return nil, fmt.Errorf("CONFORMANCE_STORES: unknown store %s (memory, sqlite, redis, postgres, redis-cluster)", s)
		}
	}
	return stores, nil
}

// absent marks a field missing from the actual proto3 JSON.
type absentValue struct{}

var absent any = absentValue{}

func show(v any) string {
	if v == absent {
		return "absent"
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

var digits = regexp.MustCompile(`^\d+$`)

// decimal is the decimal text of an integer given as a JSON number or a string of digits.
func decimal(v any) (string, bool) {
	switch x := v.(type) {
	case json.Number:
		if digits.MatchString(x.String()) {
			return x.String(), true
		}
		if f, err := x.Float64(); err == nil && f == float64(int64(f)) {
			return strconv.FormatInt(int64(f), 10), true
		}
	case string:
		if digits.MatchString(x) {
			return x, true
		}
	}
	return "", false
}

// match is the README's matching rule: "" when it matches, else what differs and where.
func match(expected, actual any, path string) string {
	if expected == nil {
		if actual == absent || actual == nil {
			return ""
		}
		return fmt.Sprintf("%s: expected absent, got %s", path, show(actual))
	}
	switch exp := expected.(type) {
	case map[string]any:
		if len(exp) == 1 {
			for op, arg := range exp {
				switch {
				case op == "$contains":
					s, ok := actual.(string)
					text, _ := arg.(string)
					if ok && strings.Contains(s, text) {
						return ""
					}
					return fmt.Sprintf("%s: expected a string containing %s, got %s", path, show(arg), show(actual))
				case op == "$nonEmpty":
					if isEmpty(actual) {
						return fmt.Sprintf("%s: expected a non-empty value, got %s", path, show(actual))
					}
					return ""
				case op == "$not":
					if match(arg, actual, path) == "" {
						return fmt.Sprintf("%s: expected anything but %s, got %s", path, show(arg), show(actual))
					}
					return ""
				case strings.HasPrefix(op, "$"):
					return fmt.Sprintf("%s: unknown operator %s", path, op)
				}
			}
		}
		obj, ok := actual.(map[string]any)
		if !ok {
			return fmt.Sprintf("%s: expected an object, got %s", path, show(actual))
		}
		keys := make([]string, 0, len(exp))
		for k := range exp {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			a, present := obj[k]
			if !present {
				a = absent
			}
			if d := match(exp[k], a, path+"."+k); d != "" {
				return d
			}
		}
		return ""
	case []any:
		list := []any{}
		if actual != absent {
			l, ok := actual.([]any)
			if !ok {
				return fmt.Sprintf("%s: expected a list, got %s", path, show(actual))
			}
			list = l
		}
		if len(list) != len(exp) {
			return fmt.Sprintf("%s: expected %d elements, got %d: %s", path, len(exp), len(list), show(list))
		}
		for i := range exp {
			if d := match(exp[i], list[i], fmt.Sprintf("%s[%d]", path, i)); d != "" {
				return d
			}
		}
		return ""
	}
	if actual == absent {
		if d, ok := decimal(expected); (ok && d == "0") || expected == false || expected == "" {
			return ""
		}
		return fmt.Sprintf("%s: expected %s, got absent", path, show(expected))
	}
	if e, ok := decimal(expected); ok {
		if a, ok := decimal(actual); ok {
			if e == a {
				return ""
			}
			return fmt.Sprintf("%s: expected %s, got %s", path, show(expected), show(actual))
		}
	}
	if expected != actual {
		return fmt.Sprintf("%s: expected %s, got %s", path, show(expected), show(actual))
	}
	return ""
}

func isEmpty(v any) bool {
	switch x := v.(type) {
	case nil, absentValue:
		return true
	case string:
		return x == ""
	case []any:
		return len(x) == 0
	case map[string]any:
		return len(x) == 0
	}
	return false
}

// matchError checks a status against {"code", "field"?, "messageContains"?}.
func matchError(expected map[string]any, code, message string) string {
	if code != expected["code"] {
		return fmt.Sprintf("expected %v, got %s: %s", expected["code"], code, message)
	}
	if f, ok := expected["field"].(string); ok && !strings.HasPrefix(message, f+":") {
		return fmt.Sprintf("expected the message to start with %q, got %q", f+":", message)
	}
	if list, ok := expected["messageContains"].([]any); ok {
		for _, t := range list {
			if s, _ := t.(string); !strings.Contains(message, s) {
				return fmt.Sprintf("expected the message to contain %q, got %q", s, message)
			}
		}
	}
	return ""
}

// resolveRefs replaces every {"$ref": "name.path"} with the saved value.
func resolveRefs(value any, saved map[string]any) (any, error) {
	switch v := value.(type) {
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			r, err := resolveRefs(e, saved)
			if err != nil {
				return nil, err
			}
			out[i] = r
		}
		return out, nil
	case map[string]any:
		if ref, ok := v["$ref"].(string); ok && len(v) == 1 {
			parts := strings.Split(ref, ".")
			cur, ok := saved[parts[0]]
			if !ok {
				return nil, fmt.Errorf("$ref %s: nothing saved as %s", ref, parts[0])
			}
			for _, p := range parts[1:] {
				switch c := cur.(type) {
				case map[string]any:
					cur, ok = c[p]
				case []any:
					i, err := strconv.Atoi(p)
					ok = err == nil && i >= 0 && i < len(c)
					if ok {
						cur = c[i]
					}
				default:
					ok = false
				}
				if !ok {
					return nil, fmt.Errorf("$ref %s: %s is absent", ref, p)
				}
			}
			return cur, nil
		}
		out := make(map[string]any, len(v))
		for k, e := range v {
			r, err := resolveRefs(e, saved)
			if err != nil {
				return nil, err
			}
			out[k] = r
		}
		return out, nil
	}
	return value, nil
}

// number reads a JSON number of a step (json.Number), or dflt.
func number(v any, dflt float64) float64 {
	if n, ok := v.(json.Number); ok {
		if f, err := n.Float64(); err == nil {
			return f
		}
	}
	return dflt
}

func millis(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }
