// Command apisize prints, for each package directory it is given, the two
// figures CONTRIBUTING asks a change to report before and after: the
// exported names and the non-test lines.
//
//	go run ./internal/cmd/apisize ./gate ./lease ./upgrade
//	go run ./internal/cmd/apisize -list ./gate   # the names, one a line
//
// An exported name is a top-level exported func, type, var or const, an
// exported method of an exported type, or an exported method of an
// exported interface type; the methods Error, String, Unwrap and Is are
// left out (they implement standard interfaces). Only the directory's
// non-test .go files count, and its lines are theirs, as wc -l counts.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

func main() {
	list := flag.Bool("list", false, "print the exported names, one a line")
	flag.Parse()
	status := 0
	for _, dir := range flag.Args() {
		names, lines, err := count(dir)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			status = 1
			continue
		}
		if *list {
			for _, n := range names {
				fmt.Println(n)
			}
		}
		fmt.Printf("%s\t%d exported names\t%d non-test lines\n", dir, len(names), lines)
	}
	os.Exit(status)
}

// standard methods are not counted: they implement the standard library's
// interfaces.
var standard = map[string]bool{"Error": true, "String": true, "Unwrap": true, "Is": true}

// count returns the exported names of the package in dir, sorted, and the
// lines of its non-test files.
func count(dir string) (names []string, lines int, err error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, 0, err
	}
	fset := token.NewFileSet()
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		path := filepath.Join(dir, e.Name())
		src, err := os.ReadFile(path)
		if err != nil {
			return nil, 0, err
		}
		lines += bytes.Count(src, []byte("\n"))
		f, err := parser.ParseFile(fset, path, src, parser.SkipObjectResolution)
		if err != nil {
			return nil, 0, err
		}
		names = append(names, exported(f)...)
	}
	slices.Sort(names)
	return names, lines, nil
}

// exported returns the names f exports.
func exported(f *ast.File) []string {
	var names []string
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if !d.Name.IsExported() {
				continue
			}
			if d.Recv == nil {
				names = append(names, d.Name.Name)
				continue
			}
			if recv := receiver(d.Recv.List[0].Type); ast.IsExported(recv) && !standard[d.Name.Name] {
				names = append(names, recv+"."+d.Name.Name)
			}
		case *ast.GenDecl:
			for _, s := range d.Specs {
				switch s := s.(type) {
				case *ast.TypeSpec:
					if !s.Name.IsExported() {
						continue
					}
					names = append(names, s.Name.Name)
					if it, ok := s.Type.(*ast.InterfaceType); ok {
						for _, m := range it.Methods.List {
							for _, n := range m.Names {
								if n.IsExported() && !standard[n.Name] {
									names = append(names, s.Name.Name+"."+n.Name)
								}
							}
						}
					}
				case *ast.ValueSpec:
					for _, n := range s.Names {
						if n.IsExported() {
							names = append(names, n.Name)
						}
					}
				}
			}
		}
	}
	return names
}

// receiver returns the name of a method's receiver type.
func receiver(t ast.Expr) string {
	if s, ok := t.(*ast.StarExpr); ok {
		t = s.X
	}
	switch x := t.(type) {
	case *ast.IndexExpr:
		t = x.X
	case *ast.IndexListExpr:
		t = x.X
	}
	if id, ok := t.(*ast.Ident); ok {
		return id.Name
	}
	return ""
}
