package main

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// skipped directories hold no library's API (nor do .x and _x ones).
var skipped = map[string]bool{"internal": true, "testdata": true, "examples": true}

// apiFiles returns the API of every module under root, by its file name
// under api/ (see README.md); a module exporting nothing has none.
func apiFiles(root string) (map[string][]string, error) {
	files := map[string][]string{}
	err := filepath.WalkDir(root, func(dir string, e fs.DirEntry, err error) error {
		if err != nil || !e.IsDir() {
			return err
		}
		if n := e.Name(); dir != root && (skipped[n] || strings.HasPrefix(n, ".") || strings.HasPrefix(n, "_")) {
			return filepath.SkipDir
		}
		path, mod, err := importPath(dir)
		if err != nil {
			return err
		}
		api, _, err := apiLines(dir, path)
		name := "coldstart"
		if rel, _ := filepath.Rel(root, mod); rel != "." {
			name = strings.ReplaceAll(filepath.ToSlash(rel), "/", "-")
		}
		if len(api) > 0 {
			files[name+".txt"] = append(files[name+".txt"], api...)
		}
		return err
	})
	for _, api := range files {
		slices.Sort(api)
	}
	return files, err
}

// writeAPI writes root's api/ directory afresh.
func writeAPI(root string) error {
	files, err := apiFiles(root)
	if err != nil {
		return err
	}
	dir := filepath.Join(root, "api")
	old, _ := filepath.Glob(filepath.Join(dir, "*.txt"))
	for _, path := range old {
		if err := os.Remove(path); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for name, api := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(strings.Join(api, "\n")+"\n"), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// findRoot returns the directory of the go.work above dir, else of its go.mod.
func findRoot(dir string) (string, error) {
	dir, err := filepath.Abs(dir)
	for d := dir; err == nil && filepath.Dir(d) != d; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.work")); err == nil {
			return d, nil
		}
	}
	_, mod, err := importPath(dir)
	return mod, err
}

// importPath returns the import path of the package in dir and the
// directory of the go.mod nearest above it.
func importPath(dir string) (path, mod string, err error) {
	if dir, err = filepath.Abs(dir); err != nil {
		return "", "", err
	}
	for mod = dir; ; mod = filepath.Dir(mod) {
		if src, err := os.ReadFile(filepath.Join(mod, "go.mod")); err == nil {
			for _, l := range strings.Split(string(src), "\n") {
				if p, ok := strings.CutPrefix(strings.TrimSpace(l), "module "); ok {
					rel, _ := filepath.Rel(mod, dir)
					return strings.TrimSuffix(strings.Trim(strings.TrimSpace(p), `"`)+"/"+filepath.ToSlash(rel), "/."), mod, nil
				}
			}
			return "", "", fmt.Errorf("%s/go.mod: no module line", mod)
		}
		if filepath.Dir(mod) == mod {
			return "", "", fmt.Errorf("%s: no go.mod above it", dir)
		}
	}
}

// apiLines returns, sorted, the $GOROOT/api-format lines of the package in
// dir (import path path; none for a command) and its non-test lines; see README.md.
func apiLines(dir, path string) (api []string, lines int, err error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, 0, err
	}
	add := func(format string, a ...any) { api = append(api, "pkg "+path+", "+fmt.Sprintf(format, a...)) }
	command := false
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		src, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, 0, err
		}
		lines += bytes.Count(src, []byte("\n"))
		f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(dir, e.Name()), src, parser.SkipObjectResolution)
		if err != nil {
			return nil, 0, err
		}
		command = command || f.Name.Name == "main"
		ast.Inspect(f, func(n ast.Node) bool {
			if t, ok := n.(*ast.FuncType); ok {
				unname(t.Params)
				unname(t.Results)
			}
			return true
		})
		for _, d := range f.Decls {
			if d, ok := d.(*ast.FuncDecl); ok && d.Name.IsExported() {
				sig := tparams(d.Type.TypeParams) + strings.TrimPrefix(types.ExprString(d.Type), "func")
				if d.Recv == nil {
					add("func %s%s", d.Name.Name, sig)
				} else if ast.IsExported(receiver(d.Recv.List[0].Type)) {
					add("method (%s) %s%s", types.ExprString(d.Recv.List[0].Type), d.Name.Name, sig)
				}
			}
			if d, ok := d.(*ast.GenDecl); ok {
				genLines(add, d)
			}
		}
	}
	if command {
		api = nil
	}
	slices.Sort(api)
	return slices.Compact(api), lines, nil
}

// genLines adds the lines of a declaration of types, consts or vars.
func genLines(add func(string, ...any), d *ast.GenDecl) {
	var typ ast.Expr // a const group's implicit repetition
	var vals []ast.Expr
	for _, s := range d.Specs {
		if s, ok := s.(*ast.TypeSpec); ok && s.Name.IsExported() {
			typeLines(add, s)
		}
		s, ok := s.(*ast.ValueSpec)
		if !ok {
			continue
		}
		if d.Tok == token.CONST && s.Type == nil && s.Values == nil {
			s.Type, s.Values = typ, vals
		}
		typ, vals = s.Type, s.Values
		for i, n := range s.Names {
			if !n.IsExported() {
				continue
			}
			var val ast.Expr
			if i < len(s.Values) {
				val = s.Values[i]
			}
			t := s.Type
			if call, ok := val.(*ast.CallExpr); ok && t == nil && d.Tok == token.VAR {
				if f := types.ExprString(call.Fun); f == "errors.New" || f == "fmt.Errorf" {
					t = ast.NewIdent("error")
				}
			}
			lit, _ := val.(*ast.BasicLit)
			if t != nil {
				add("%s %s %s", d.Tok, n.Name, types.ExprString(t))
			}
			if lit != nil && d.Tok == token.CONST {
				add("const %s = %s", n.Name, lit.Value)
			} else if t == nil {
				add("%s %s", d.Tok, n.Name)
			}
		}
	}
}

// typeLines adds an exported type's lines, its fields' and methods' too.
func typeLines(add func(string, ...any), s *ast.TypeSpec) {
	name := s.Name.Name + tparams(s.TypeParams)
	switch t := s.Type.(type) {
	case *ast.StructType:
		add("type %s struct", name)
		for _, f := range t.Fields.List {
			for _, n := range f.Names {
				if n.IsExported() {
					add("type %s struct, %s %s", name, n.Name, types.ExprString(f.Type))
				}
			}
			if f.Names == nil && ast.IsExported(receiver(f.Type)) {
				add("type %s struct, embedded %s", name, types.ExprString(f.Type))
			}
		}
	case *ast.InterfaceType:
		var set []string
		for _, m := range t.Methods.List {
			switch {
			case m.Names == nil: // an embedded interface, or a constraint's terms
				set = append(set, types.ExprString(m.Type))
				add("type %s interface, embedded %s", name, types.ExprString(m.Type))
			case m.Names[0].IsExported():
				set = append(set, m.Names[0].Name)
				add("type %s interface, %s%s", name, m.Names[0].Name, strings.TrimPrefix(types.ExprString(m.Type), "func"))
			default:
				add("type %s interface, unexported methods", name)
			}
		}
		slices.Sort(set)
		add("type %s interface { %s }", name, strings.Join(set, ", "))
	default:
		eq := ""
		if s.Assign.IsValid() {
			eq = "= "
		}
		add("type %s %s%s", name, eq, types.ExprString(s.Type))
	}
}

// unname drops a parameter list's names: (a, b int) is (int, int).
func unname(l *ast.FieldList) {
	if l == nil {
		return
	}
	var fields []*ast.Field
	for _, f := range l.List {
		for range max(1, len(f.Names)) {
			fields = append(fields, &ast.Field{Type: f.Type})
		}
	}
	l.List = fields
}

// tparams returns a type parameter list as written ([K comparable, V any]).
func tparams(l *ast.FieldList) string {
	if l == nil {
		return ""
	}
	s := types.ExprString(&ast.FuncType{Params: l})
	return "[" + s[len("func("):len(s)-1] + "]"
}

// receiver returns the type name of a method's receiver or an embedded field.
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
	switch x := t.(type) {
	case *ast.Ident:
		return x.Name
	case *ast.SelectorExpr:
		return x.Sel.Name
	}
	return ""
}
