package main

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The API record under api/ is the exported API of today's tree, every
// module's: an exported change it does not list fails make test.
func TestAPIIsWrittenDown(t *testing.T) {
	root, err := findRoot(".")
	require.NoError(t, err)
	require.FileExists(t, filepath.Join(root, "api", "coldstart.txt"), "the repository's root, found from %s", root)
	if err := checkAPI(root); err != nil {
		t.Fatal(err)
	}
}

// checkAPI compares root's api/ files with the API of its tree, and
// returns, per file, the lines the tree adds (+) and removes (-).
func checkAPI(root string) error {
	tree, err := apiFiles(root)
	if err != nil {
		return err
	}
	written := map[string][]string{}
	paths, _ := filepath.Glob(filepath.Join(root, "api", "*.txt"))
	for _, path := range paths {
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		written[filepath.Base(path)] = strings.FieldsFunc(string(src), func(r rune) bool { return r == '\n' })
	}
	var diff strings.Builder
	names := slices.Sorted(maps.Keys(tree))
	for name := range written {
		if tree[name] == nil {
			names = append(names, name)
		}
	}
	for _, name := range names {
		removed, added := minus(written[name], tree[name]), minus(tree[name], written[name])
		if len(removed)+len(added) > 0 {
			fmt.Fprintf(&diff, "api/%s:\n", name)
		}
		for _, l := range removed {
			fmt.Fprintf(&diff, "-%s\n", l)
		}
		for _, l := range added {
			fmt.Fprintf(&diff, "+%s\n", l)
		}
	}
	if diff.Len() > 0 {
		return fmt.Errorf("the exported API changed: if on purpose, run  go run ./internal/cmd/apisize -write  and commit api/\n%s", diff.String())
	}
	return nil
}

// minus returns the lines of a that are not in b.
func minus(a, b []string) []string {
	var out []string
	for _, l := range a {
		if !slices.Contains(b, l) {
			out = append(out, l)
		}
	}
	return out
}

// fakeTree writes testdata/tree.txt's files under a new directory, and
// returns it.
func fakeTree(t *testing.T) string {
	src, err := os.ReadFile("testdata/tree.txt")
	require.NoError(t, err)
	root := t.TempDir()
	parts := strings.Split("\n"+string(src), "\n-- ")
	for _, part := range parts[1:] {
		name, body, ok := strings.Cut(part, " --\n")
		require.True(t, ok, "a file line: -- %s", name)
		require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(root, name)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(root, name), []byte(body+"\n"), 0o644))
	}
	return root
}

// edit replaces old with new in root's file name.
func edit(t *testing.T, root, name, old, new string) {
	path := filepath.Join(root, name)
	src, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Contains(t, string(src), old)
	require.NoError(t, os.WriteFile(path, []byte(strings.Replace(string(src), old, new, 1)), 0o644))
}

// Every kind of element has its line, in the Go api files' format; a
// module that exports nothing has no file; what is internal, test data, an
// example, a command or a test is left out.
func TestAPIOfAFakeTree(t *testing.T) {
	root := fakeTree(t)
	files, err := apiFiles(root)
	require.NoError(t, err)
	assert.Equal(t, []string{"coldstart.txt", "sub.txt"}, slices.Sorted(maps.Keys(files)))
	assert.NoError(t, checkAPI(root))

	found, err := findRoot(filepath.Join(root, "sub", "deep"))
	require.NoError(t, err)
	assert.Equal(t, root, found, "the directory of go.work")
	require.NoError(t, os.Remove(filepath.Join(root, "go.work")))
	found, err = findRoot(filepath.Join(root, "a", "internal"))
	require.NoError(t, err)
	assert.Equal(t, root, found, "without a go.work, the nearest go.mod's directory")
}

// An exported change the record does not list fails the check, which
// names the lines added and removed per file, a new module's and a gone
// one's; once -write has written the record, it passes again.
func TestAPICheckFailsOnAnExportedChange(t *testing.T) {
	root := fakeTree(t)
	edit(t, root, "a/a.go", "func Removed(int) error { return nil }", "func Added(ctx context.Context) {}")
	edit(t, root, "a/a.go", "private   bool", "Private   bool")
	edit(t, root, "sub/s.go", "func S() error", "func S() (int, error)")
	edit(t, root, "a/a.go", "func helper() {}", "func helper() { _ = 1 }") // no API change
	require.NoError(t, os.WriteFile(filepath.Join(root, "only", "o.go"), []byte("package main\n\nfunc Exported() {}\n"), 0o644))
	require.NoError(t, os.MkdirAll(filepath.Join(root, "more", "m"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(root, "more", "go.mod"), []byte("module example.com/more\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(root, "more", "m", "m.go"), []byte("package m\n\nvar V int\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(root, "api", "gone.txt"), []byte("pkg example.com/gone, func G()\n"), 0o644))

	err := checkAPI(root)
	require.Error(t, err)
	assert.Equal(t, `the exported API changed: if on purpose, run  go run ./internal/cmd/apisize -write  and commit api/
api/coldstart.txt:
-pkg example.com/fake/a, func Removed(int) error
+pkg example.com/fake/a, func Added(context.Context)
+pkg example.com/fake/a, type T struct, Private bool
api/more.txt:
+pkg example.com/more/m, var V int
api/sub.txt:
-pkg example.com/fake/sub, func S() error
+pkg example.com/fake/sub, func S() (int, error)
api/gone.txt:
-pkg example.com/gone, func G()
`, err.Error())

	require.NoError(t, writeAPI(root))
	assert.NoError(t, checkAPI(root))
	assert.NoFileExists(t, filepath.Join(root, "api", "gone.txt"))
}
