package conformance

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// matcherTable is ../matcher-cases.json: the rows the TypeScript and Python
// runners' matchers are tested against too.
type matcherTable struct {
	Match []struct {
		Name     string `json:"name"`
		Expected any    `json:"expected"`
		Actual   *any   `json:"actual"`
		Matches  bool   `json:"matches"`
		Diff     string `json:"diff"`
	} `json:"match"`
	MatchError []struct {
		Name     string         `json:"name"`
		Expected map[string]any `json:"expected"`
		Code     string         `json:"code"`
		Message  string         `json:"message"`
		Matches  bool           `json:"matches"`
	} `json:"matchError"`
	ResolveRefs []struct {
		Name   string         `json:"name"`
		Saved  map[string]any `json:"saved"`
		Value  any            `json:"value"`
		Result any            `json:"result"`
		Error  string         `json:"error"`
	} `json:"resolveRefs"`
}

func loadMatcherTable(t *testing.T) matcherTable {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "matcher-cases.json"))
	if err != nil {
		t.Fatal(err)
	}
	var table matcherTable
	if err := decodeJSON(data, &table); err != nil {
		t.Fatal(err)
	}
	if len(table.Match) == 0 || len(table.MatchError) == 0 || len(table.ResolveRefs) == 0 {
		t.Fatal("matcher-cases.json: a section is empty")
	}
	return table
}

func TestMatch(t *testing.T) {
	for _, row := range loadMatcherTable(t).Match {
		t.Run(row.Name, func(t *testing.T) {
			// A JSON null "actual" decodes to a nil *any, like a missing one:
			// the table has no null actual values, only absent ones.
			actual := absent
			if row.Actual != nil {
				actual = *row.Actual
			}
			diff := match(row.Expected, actual, "$")
			if row.Matches && diff != "" {
				t.Fatalf("expected a match, got %s", diff)
			}
			if !row.Matches && (diff == "" || !strings.Contains(diff, row.Diff)) {
				t.Fatalf("expected a mismatch mentioning %q, got %q", row.Diff, diff)
			}
		})
	}
}

func TestMatchError(t *testing.T) {
	for _, row := range loadMatcherTable(t).MatchError {
		t.Run(row.Name, func(t *testing.T) {
			diff := matchError(row.Expected, row.Code, row.Message)
			if (diff == "") != row.Matches {
				t.Fatalf("matches=%v expected, got %q", row.Matches, diff)
			}
		})
	}
}

func TestResolveRefs(t *testing.T) {
	for _, row := range loadMatcherTable(t).ResolveRefs {
		t.Run(row.Name, func(t *testing.T) {
			got, err := resolveRefs(row.Value, row.Saved)
			if row.Error != "" {
				if err == nil || !strings.Contains(err.Error(), row.Error) {
					t.Fatalf("expected an error containing %q, got %v (%v)", row.Error, err, got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, row.Result) {
				t.Fatalf("expected %s, got %s", show(row.Result), show(got))
			}
		})
	}
}

func TestLoadCases(t *testing.T) {
	cases, err := loadCases(filepath.Join("..", "cases"))
	if err != nil {
		t.Fatal(err)
	}
	if len(cases) <= 30 {
		t.Fatalf("only %d cases loaded", len(cases))
	}
}
