// Package catalogue reads the catalogue of log records and metric families
// (docs/catalogue.md) for the tests that hold it to the code, both ways.
package catalogue

import (
	"bufio"
	"cmp"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
)

// The header rows that mark the catalogue's two tables.
const (
	RecordsHeader  = "| component | record | level | keys |"
	FamiliesHeader = "| family | type | labels | meaning |"
)

// Record is a row of the log-records table: a record's message as a
// component (a package's directory, "lease/etcdlease") writes it.
type Record struct {
	Component, Message string
	// Levels are the levels the level cell names (DEBUG, INFO, WARN,
	// ERROR, in capitals: "WARN; INFO when ..." is both), sorted.
	Levels []string
	Line   int    // in the catalogue
	Row    string // as written
}

// Family is a row of the metric-families table.
type Family struct {
	Name, Type string
	Labels     []string // sorted
	Line       int      // in the catalogue
	Row        string   // as written
}

// Catalogue is what the catalogue file lists.
type Catalogue struct {
	Records  []Record
	Families []Family
}

var (
	code  = regexp.MustCompile("`([^`]*)`")
	level = regexp.MustCompile(`\b(DEBUG|INFO|WARN|ERROR)\b`)
)

// Read reads the catalogue in the Markdown file at path. Each table must
// appear once; a row not starting with its `component` and `message` (or
// `family`) in backticks is an error, so a typo cannot hide it.
func Read(path string) (*Catalogue, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var (
		c    Catalogue
		in   string // the header of the table being read, or ""
		seen = map[string]int{}
		line int
	)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line++
		text := strings.TrimSpace(sc.Text())
		switch {
		case text == RecordsHeader || text == FamiliesHeader:
			in = text
			seen[text]++
			continue
		case !strings.HasPrefix(text, "|"):
			in = ""
			continue
		case in == "" || strings.HasPrefix(text, "| ---") || strings.HasPrefix(text, "|---"):
			continue
		}
		cells := splitRow(text)
		if len(cells) != 4 {
			return nil, fmt.Errorf("%s:%d: want 4 cells, got %d: %s", path, line, len(cells), text)
		}
		switch in {
		case RecordsHeader:
			comp, msg := code.FindStringSubmatch(cells[0]), code.FindStringSubmatch(cells[1])
			if comp == nil || msg == nil || !strings.HasPrefix(cells[0], "`") || !strings.HasPrefix(cells[1], "`") {
				return nil, fmt.Errorf("%s:%d: want a row to start with its `component` and `message`: %s", path, line, text)
			}
			levels := level.FindAllString(cells[2], -1)
			if len(levels) == 0 {
				return nil, fmt.Errorf("%s:%d: want a level (DEBUG, INFO, WARN or ERROR): %s", path, line, text)
			}
			slices.Sort(levels)
			c.Records = append(c.Records, Record{Component: comp[1], Message: msg[1], Levels: slices.Compact(levels), Line: line, Row: text})
		case FamiliesHeader:
			name := code.FindStringSubmatch(cells[0])
			if name == nil {
				return nil, fmt.Errorf("%s:%d: want a `family` name: %s", path, line, text)
			}
			var labels []string
			for _, m := range code.FindAllStringSubmatch(cells[2], -1) {
				labels = append(labels, m[1])
			}
			slices.Sort(labels)
			c.Families = append(c.Families, Family{Name: name[1], Type: strings.TrimSpace(cells[1]), Labels: labels, Line: line, Row: text})
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	for _, h := range []string{RecordsHeader, FamiliesHeader} {
		if seen[h] != 1 {
			return nil, fmt.Errorf("%s: want one table headed %q, found %d", path, h, seen[h])
		}
	}
	return &c, nil
}

// splitRow splits a table row into its trimmed cells at unescaped pipes
// (Markdown escapes a | in backticks: `local`\|`peer`).
func splitRow(row string) []string {
	row = strings.TrimSuffix(strings.TrimPrefix(row, "|"), "|")
	var cells []string
	var cur strings.Builder
	for i := 0; i < len(row); i++ {
		switch {
		case row[i] == '\\' && i+1 < len(row) && row[i+1] == '|':
			cur.WriteByte('|')
			i++
		case row[i] == '|':
			cells = append(cells, strings.TrimSpace(cur.String()))
			cur.Reset()
		default:
			cur.WriteByte(row[i])
		}
	}
	return append(cells, strings.TrimSpace(cur.String()))
}

// FamilyRow is the catalogue row for a family; an empty meaning is left for
// the writer to fill in.
func FamilyRow(name, typ string, labels []string, meaning string) string {
	meaning = cmp.Or(meaning, "MEANING")
	return fmt.Sprintf("| `%s` | %s | %s | %s |", name, typ, LabelCell(labels), strings.ReplaceAll(meaning, "|", `\|`))
}

// LabelCell is the labels cell of a families row: each label name in
// backticks, or a dash for none.
func LabelCell(labels []string) string {
	if len(labels) == 0 {
		return "—"
	}
	return "`" + strings.Join(labels, "`, `") + "`"
}
