package catalogue_test

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/coldstart-go/coldstart/internal/catalogue"
)

// root is the repository's root, from this package's directory.
const root = "../.."

// The library's packages, nested modules included; internal holds the
// wrappers some of them log through.
var libraryDirs = []string{"gate", "listener", "dialer", "lease", "upgrade", "internal"}

// Every log record the library's non-test source writes is in
// docs/catalogue.md, and every record the catalogue lists is written, at the
// levels the catalogue says where the scan can tell: the failure prints
// the rows to add, correct and remove.
func TestLogRecordsMatchTheREADME(t *testing.T) {
	cat, err := catalogue.Read(filepath.Join(root, "docs", "catalogue.md"))
	require.NoError(t, err)
	s, err := newScanner(root, libraryDirs...)
	require.NoError(t, err)
	s.run()
	for _, u := range s.unresolved {
		t.Errorf("%s: log it with a constant message, or teach this scanner the new way", u)
	}
	require.NotEmpty(t, s.records(), "no record found: is the scanner looking at the right tree?")
	if diff := diffRecords(s.records(), cat.Records); diff != "" {
		t.Error(diff)
	}
}

// diffRecords says how the catalogue's rows listed differ from the records
// the code writes, as rows to paste, rows to correct and lines to delete;
// "" if they agree.
func diffRecords(code []found, listed []catalogue.Record) string {
	inREADME := map[[2]string]catalogue.Record{}
	for _, r := range listed {
		inREADME[[2]string{r.Component, r.Message}] = r
	}
	inCode := map[[2]string]bool{}
	var add, where, fix, remove []string
	for _, f := range code {
		inCode[[2]string{f.component, f.message}] = true
		r, ok := inREADME[[2]string{f.component, f.message}]
		switch {
		case !ok:
			add = append(add, recordRow(f.component, f.message, f.levels))
			where = append(where, fmt.Sprintf("  %s %q: %s", f.component, f.message, f.at))
		case f.levels != nil && !slices.Equal(f.levels, r.Levels):
			fix = append(fix, fmt.Sprintf("docs/catalogue.md:%d: %s\n  the code (%s) writes it at %s, not %s",
				r.Line, r.Row, f.at, strings.Join(f.levels, " and "), strings.Join(r.Levels, " and ")))
		}
	}
	for _, r := range listed {
		if !inCode[[2]string{r.Component, r.Message}] {
			remove = append(remove, fmt.Sprintf("docs/catalogue.md:%d: %s", r.Line, r.Row))
		}
	}
	if len(add)+len(fix)+len(remove) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("docs/catalogue.md's table of log records and the code disagree.\n")
	if len(add) > 0 {
		fmt.Fprintf(&b, "\nRecords the code writes that docs/catalogue.md does not list: add these rows to the table headed\n%s\n(KEYS, and LEVEL where the scan cannot tell, from the code at the lines below the rows):\n\n", catalogue.RecordsHeader)
		b.WriteString(strings.Join(add, "\n"))
		b.WriteString("\n\n")
		b.WriteString(strings.Join(where, "\n"))
		b.WriteString("\n")
	}
	if len(fix) > 0 {
		b.WriteString("\nRecords docs/catalogue.md lists at other levels than the code writes them: correct their level cells:\n\n")
		b.WriteString(strings.Join(fix, "\n"))
		b.WriteString("\n")
	}
	if len(remove) > 0 {
		b.WriteString("\nRecords docs/catalogue.md lists that no code writes: remove these rows:\n\n")
		b.WriteString(strings.Join(remove, "\n"))
		b.WriteString("\n")
	}
	return b.String()
}

// The scanner sees through every way the packages log, and nothing else.
func TestScannerFindsEveryWayOfLogging(t *testing.T) {
	s, err := newScanner("testdata/logs", ".")
	require.NoError(t, err)
	s.run()
	assert.Empty(t, s.unresolved)
	var got []string
	for _, f := range s.records() {
		got = append(got, fmt.Sprintf("%s: %s %v", f.component, f.message, f.levels))
	}
	assert.Equal(t, []string{
		"wrapped: a literal [INFO]",
		"wrapped: a local variable, one way [WARN]",
		"wrapped: a local variable, the other [INFO]",
		"wrapped: after With [ERROR]",
		"wrapped: from a constant [WARN]",
		"wrapped: through a field of another package []", // its level is not traced
		"wrapped: through a wrapper [INFO]",
		"wrapped: through a wrapper, again [ERROR]",
		"wrapped: two levels [INFO WARN]",
	}, got)
}

// A message the scanner cannot trace to a constant fails the test, naming
// where it is written.
func TestScannerReportsAMessageItCannotTrace(t *testing.T) {
	s, err := newScanner("testdata/unresolved", ".")
	require.NoError(t, err)
	s.run()
	require.Len(t, s.unresolved, 1)
	assert.Contains(t, s.unresolved[0], "bad/bad.go:10")
	assert.Empty(t, s.records())
}

// The diff names each row to add, where the code writes it, each row
// whose level is wrong, and each row to remove with its catalogue line.
func TestDiffRecordsPrintsRowsToAddCorrectAndRemove(t *testing.T) {
	diff := diffRecords(
		[]found{
			{component: "lease", message: "lease held", at: "lease/log.go:42", levels: []string{"INFO"}},
			{component: "gate", message: "gate opened", at: "gate/board.go:1", levels: []string{"INFO"}},
			{component: "gate", message: "gate failed", at: "gate/board.go:3", levels: []string{"INFO", "WARN"}},
			{component: "etcd", message: "counted", at: "etcd/log.go:3"}, // levels unknown
			{component: "etcd", message: "new", at: "etcd/log.go:9"},     // levels unknown
		},
		[]catalogue.Record{
			{Component: "gate", Message: "gate opened", Levels: []string{"INFO"}, Line: 7},
			{Component: "gate", Message: "gate failed", Levels: []string{"WARN"}, Line: 8, Row: "| `gate` | `gate failed` | WARN | `gate` |"},
			{Component: "etcd", Message: "counted", Levels: []string{"WARN"}, Line: 10},
			{Component: "lease", Message: "lease gone", Levels: []string{"INFO"}, Line: 9, Row: "| `lease` | `lease gone` | INFO | `lease` |"},
		},
	)
	assert.Contains(t, diff, "\n| `lease` | `lease held` | INFO | KEYS |\n")
	assert.Contains(t, diff, "\n| `etcd` | `new` | LEVEL | KEYS |", "no level known: LEVEL")
	assert.Contains(t, diff, "docs/catalogue.md:8: | `gate` | `gate failed` | WARN | `gate` |\n  the code (gate/board.go:3) writes it at INFO and WARN, not WARN")
	assert.Contains(t, diff, `lease "lease held": lease/log.go:42`)
	assert.Contains(t, diff, "docs/catalogue.md:9: | `lease` | `lease gone` | INFO | `lease` |")
	assert.NotContains(t, diff, "gate opened")
	assert.NotContains(t, diff, "docs/catalogue.md:10", "a record whose levels the scan cannot tell is not corrected")
	assert.Empty(t, diffRecords([]found{{component: "gate", message: "gate opened"}}, []catalogue.Record{{Component: "gate", Message: "gate opened"}}))
}

// recordRow is the catalogue row for a record, its keys left for the writer
// to fill in from the code, and its levels too if none are given.
func recordRow(component, message string, levels []string) string {
	l := "LEVEL"
	if len(levels) > 0 {
		l = strings.Join(levels, ", ")
	}
	return fmt.Sprintf("| `%s` | `%s` | %s | KEYS |", component, message, l)
}
