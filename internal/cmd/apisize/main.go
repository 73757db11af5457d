// Command apisize prints each package's exported names and non-test lines,
// and writes the API record (api/<module>.txt); see README.md.
package main

import (
	"flag"
	"fmt"
	"go/ast"
	"os"
	"slices"
	"strings"
)

func main() {
	list := flag.Bool("list", false, "print the exported names, one a line")
	api := flag.Bool("api", false, "print the API, one exported element a line, in the format of $GOROOT/api")
	write := flag.Bool("write", false, "write api/<module>.txt for every module of the repository")
	flag.Parse()
	if *write {
		root, err := findRoot(".")
		if err == nil {
			err = writeAPI(root)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return
	}
	status := 0
	for _, dir := range flag.Args() {
		names, lines, err := count(dir)
		if err == nil && *api {
			var path string
			if path, _, err = importPath(dir); err == nil {
				names, _, err = apiLines(dir, path)
			}
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			status = 1
			continue
		}
		if *list || *api {
			for _, n := range names {
				fmt.Println(n)
			}
		}
		if !*api {
			fmt.Printf("%s\t%d exported names\t%d non-test lines\n", dir, len(names), lines)
		}
	}
	os.Exit(status)
}

// standard methods implement the standard library's interfaces: not counted.
var standard = map[string]bool{"Error": true, "String": true, "Unwrap": true, "Is": true}

// count returns dir's exported names, sorted, and its non-test lines.
func count(dir string) ([]string, int, error) {
	api, lines, err := apiLines(dir, "")
	return names(api), lines, err
}

// names returns, sorted, the exported names of a package's API lines
// (methods are Type.Method; fields count under their type).
func names(api []string) []string {
	var names []string
	for _, l := range api {
		_, l, _ = strings.Cut(l, ", ") // pkg P, ...
		kind, rest, _ := strings.Cut(l, " ")
		name := cut(rest, "[( ") // func F[...](...), const C ..., var V ...
		switch kind {
		case "method": // method (*T[E]) M(...)
			recv, m, _ := strings.Cut(rest[1:], ") ")
			name = cut(strings.TrimPrefix(recv, "*"), "[") + "." + cut(m, "[(")
		case "type": // type T[E any] struct, F int; type I interface, M(...)
			if _, m, ok := strings.Cut(rest, " interface, "); ok && ast.IsExported(m) {
				name += "." + cut(m, "(")
			}
		}
		if _, m, ok := strings.Cut(name, "."); !ok || !standard[m] {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// cut returns s up to the first of chars.
func cut(s, chars string) string {
	if i := strings.IndexAny(s, chars); i >= 0 {
		return s[:i]
	}
	return s
}
