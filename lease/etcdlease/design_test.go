package etcdlease_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// A comment that keeps a claim and points to its argument names a section
// of DESIGN.md (`see DESIGN.md, "Title"`): each such title is a heading of
// DESIGN.md, so a renamed section cannot leave a comment pointing nowhere.
func TestDesignSectionsExist(t *testing.T) {
	design, err := os.ReadFile("DESIGN.md")
	require.NoError(t, err)
	headings := map[string]bool{}
	for _, line := range strings.Split(string(design), "\n") {
		if title, ok := strings.CutPrefix(strings.TrimLeft(line, "#"), " "); ok && strings.HasPrefix(line, "#") {
			headings[strings.TrimSpace(title)] = true
		}
	}
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	pointer := regexp.MustCompile(`DESIGN\.md, "([^"]+)"`)
	pointers := 0
	for _, f := range files {
		if f == "design_test.go" {
			continue // its doc shows the form
		}
		src, err := os.ReadFile(f)
		require.NoError(t, err)
		// A comment's lines, joined: a title may wrap.
		var text []string
		for _, line := range strings.Split(string(src), "\n") {
			if _, c, ok := strings.Cut(line, "// "); ok {
				text = append(text, c)
			} else {
				text = append(text, "\n")
			}
		}
		for _, m := range pointer.FindAllStringSubmatch(strings.Join(text, " "), -1) {
			pointers++
			title := strings.Join(strings.Fields(m[1]), " ")
			if !headings[title] {
				t.Errorf("%s points to DESIGN.md, %q, which is no heading of DESIGN.md", f, title)
			}
		}
	}
	require.NotZero(t, pointers, "no comment points to DESIGN.md: is the test reading the package?")
}
