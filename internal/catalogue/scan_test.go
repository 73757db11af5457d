package catalogue_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/printer"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// A found record: the message a component writes, and where the constant
// that names it is used.
type found struct {
	component, message string
	at                 string   // file:line, relative to the root scanned
	levels             []string // sorted; nil if the scanner cannot tell
}

// The methods of *slog.Logger that write a record: the index of their
// message argument, and their level, or the index of their level argument.
var sinks = map[string]struct {
	msg   int
	level string
	arg   int
}{
	"Debug": {0, "DEBUG", 0}, "Info": {0, "INFO", 0}, "Warn": {0, "WARN", 0}, "Error": {0, "ERROR", 0},
	"DebugContext": {1, "DEBUG", 0}, "InfoContext": {1, "INFO", 0}, "WarnContext": {1, "WARN", 0}, "ErrorContext": {1, "ERROR", 0},
	"Log": {2, "", 1}, "LogAttrs": {2, "", 1},
}

// level is what a scan knows of a record's level while it traces the
// message: the levels themselves, or the expression that gives them in the
// function being traced, or nothing (unknown).
type level struct {
	set     []string
	expr    ast.Expr
	unknown bool
}

// pkg is one directory's non-test Go files.
type pkg struct {
	dir    string // relative to the root, slash-separated
	name   string // the package clause
	files  []*ast.File
	consts map[string]ast.Expr // package-level constants
	// loggers holds the names of variables, fields and parameters
	// declared *slog.Logger anywhere in the package.
	loggers map[string]bool
	imports map[string]bool // the names its files import packages as
}

// scanner finds the messages of every log record written by the non-test
// source of the packages under some directories, with go/ast alone (other
// modules' dependencies need not be present).
//
// A record is written by a call of a *slog.Logger method (sinkMsgArg) on
// a receiver that is declared *slog.Logger in its package or whose name
// says it is a logger ("log", "logger", "Logger"). Its message is a
// string constant, or is traced back to one through:
//   - a parameter of the enclosing function: a wrapper such as
//     listener's logPort(level, msg, ...): every call of the wrapper (in
//     its package; for a package under internal/, in any package) supplies
//     one;
//   - a local variable: every value assigned to it in the function;
//   - a struct field: every value a composite literal or an assignment in
//     the package gives a field of that name (internal/logcount keeps
//     the message of a group in one).
//
// A message it cannot trace to a constant is reported as unresolved, so a
// new way of logging fails the test rather than hiding from it.
type scanner struct {
	fset       *token.FileSet
	root       string
	pkgs       []*pkg
	found      []found
	unresolved []string
	seen       map[string]bool // wrapper params and fields traced already
}

func newScanner(root string, dirs ...string) (*scanner, error) {
	s := &scanner{fset: token.NewFileSet(), root: root, seen: map[string]bool{}}
	byDir := map[string]*pkg{}
	for _, d := range dirs {
		err := filepath.WalkDir(filepath.Join(root, d), func(path string, e fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if e.IsDir() {
				if e.Name() == "testdata" || strings.HasPrefix(e.Name(), ".") {
					return filepath.SkipDir
				}
				// A test-only module (lease/k8slease/internal/apiservertest)
				// is no part of the library.
				if exists(filepath.Join(path, "go.mod")) && strings.Contains(filepath.ToSlash(path), "/internal/") {
					return filepath.SkipDir
				}
				return nil
			}
			if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return nil
			}
			f, err := parser.ParseFile(s.fset, path, nil, parser.SkipObjectResolution)
			if err != nil {
				return err
			}
			rel, err := filepath.Rel(root, filepath.Dir(path))
			if err != nil {
				return err
			}
			rel = filepath.ToSlash(rel)
			p := byDir[rel]
			if p == nil {
				p = &pkg{dir: rel, name: f.Name.Name, consts: map[string]ast.Expr{}, loggers: map[string]bool{}, imports: map[string]bool{}}
				byDir[rel] = p
				s.pkgs = append(s.pkgs, p)
			}
			p.files = append(p.files, f)
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	for _, p := range s.pkgs {
		for _, f := range p.files {
			p.index(f)
		}
	}
	return s, nil
}

// index records p's constants, imports and the names it declares
// *slog.Logger.
func (p *pkg) index(f *ast.File) {
	for _, im := range f.Imports {
		path, _ := strconv.Unquote(im.Path.Value)
		name := path[strings.LastIndex(path, "/")+1:]
		if im.Name != nil {
			name = im.Name.Name
		}
		p.imports[name] = true
	}
	for _, d := range f.Decls {
		if g, ok := d.(*ast.GenDecl); ok && g.Tok == token.CONST {
			for _, sp := range g.Specs {
				vs := sp.(*ast.ValueSpec)
				for i, n := range vs.Names {
					if i < len(vs.Values) {
						p.consts[n.Name] = vs.Values[i]
					}
				}
			}
		}
	}
	ast.Inspect(f, func(n ast.Node) bool {
		var names []*ast.Ident
		var typ ast.Expr
		switch n := n.(type) {
		case *ast.Field:
			names, typ = n.Names, n.Type
		case *ast.ValueSpec:
			names, typ = n.Names, n.Type
		default:
			return true
		}
		if isSlogLogger(typ) {
			for _, id := range names {
				p.loggers[id.Name] = true
			}
		}
		return true
	})
}

func isSlogLogger(e ast.Expr) bool {
	st, ok := e.(*ast.StarExpr)
	if !ok {
		return false
	}
	sel, ok := st.X.(*ast.SelectorExpr)
	if !ok {
		return false
	}
	x, ok := sel.X.(*ast.Ident)
	return ok && x.Name == "slog" && sel.Sel.Name == "Logger"
}

// run finds every record.
func (s *scanner) run() {
	for _, p := range s.pkgs {
		s.eachCall(p, func(fn *ast.FuncDecl, call *ast.CallExpr) {
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok {
				return
			}
			sink, ok := sinks[sel.Sel.Name]
			if !ok || len(call.Args) <= sink.msg || !p.isLogger(sel.X) {
				return
			}
			lv := level{set: []string{sink.level}}
			if sink.level == "" {
				lv = level{expr: call.Args[sink.arg]}
			}
			s.trace(p, fn, call.Args[sink.msg], lv, s.pos(call))
		})
	}
}

// isLogger reports whether e, the receiver of a call, is a logger.
func (p *pkg) isLogger(e ast.Expr) bool {
	var name string
	switch e := e.(type) {
	case *ast.Ident:
		name = e.Name
	case *ast.SelectorExpr:
		name = e.Sel.Name
	case *ast.CallExpr: // logger.With(...).Info(...)
		if sel, ok := e.Fun.(*ast.SelectorExpr); ok && (sel.Sel.Name == "With" || sel.Sel.Name == "WithGroup") {
			return p.isLogger(sel.X)
		}
		return false
	default:
		return false
	}
	if p.loggers[name] {
		return true
	}
	n := strings.ToLower(name)
	return n == "log" || strings.HasSuffix(n, "logger")
}

// eachCall calls f for every call in p's functions, with the function
// declaration it is in (nil at package level).
func (s *scanner) eachCall(p *pkg, f func(*ast.FuncDecl, *ast.CallExpr)) {
	for _, file := range p.files {
		for _, d := range file.Decls {
			fn, _ := d.(*ast.FuncDecl)
			ast.Inspect(d, func(n ast.Node) bool {
				if call, ok := n.(*ast.CallExpr); ok {
					f(fn, call)
				}
				return true
			})
		}
	}
}

func (s *scanner) pos(n ast.Node) string {
	p := s.fset.Position(n.Pos())
	rel, err := filepath.Rel(s.root, p.Filename)
	if err != nil {
		rel = p.Filename
	}
	return fmt.Sprintf("%s:%d", filepath.ToSlash(rel), p.Line)
}

// trace finds the constants e (in fn of p, used at the call at) can be,
// and the levels lv gives each.
func (s *scanner) trace(p *pkg, fn *ast.FuncDecl, e ast.Expr, lv level, at string) {
	if v, ok := s.constant(p, e); ok {
		if v != "" {
			s.found = append(s.found, found{component: p.dir, message: v, at: s.pos(e), levels: s.levels(fn, lv)})
		}
		return
	}
	switch e := e.(type) {
	case *ast.ParenExpr:
		s.trace(p, fn, e.X, lv, at)
		return
	case *ast.Ident:
		if fn != nil {
			if i, ok := paramIndex(fn, e.Name); ok {
				s.traceCallers(p, fn, i, lv)
				return
			}
			if vals := assignments(fn, e.Name); len(vals) > 0 {
				for _, a := range vals {
					s.trace(p, fn, a.value, pairedLevel(fn, a, lv), at)
				}
				return
			}
		}
	case *ast.SelectorExpr:
		if x, ok := e.X.(*ast.Ident); !ok || !p.imports[x.Name] {
			if s.traceField(p, e.Sel.Name) {
				return
			}
		}
	}
	s.unresolved = append(s.unresolved, fmt.Sprintf("%s: a record's message %s is not traced to a constant", at, show(e)))
}

// levels returns the levels lv gives in fn, sorted, or nil if it cannot
// tell: a slog.LevelX, or a local variable assigned only those.
func (s *scanner) levels(fn *ast.FuncDecl, lv level) []string {
	if lv.unknown {
		return nil
	}
	if lv.expr == nil {
		return lv.set
	}
	var out []string
	var add func(e ast.Expr) bool
	add = func(e ast.Expr) bool {
		switch e := e.(type) {
		case *ast.SelectorExpr:
			if x, ok := e.X.(*ast.Ident); ok && x.Name == "slog" && strings.HasPrefix(e.Sel.Name, "Level") {
				out = append(out, strings.ToUpper(strings.TrimPrefix(e.Sel.Name, "Level")))
				return true
			}
		case *ast.Ident:
			if fn == nil {
				return false
			}
			if _, isParam := paramIndex(fn, e.Name); isParam {
				return false
			}
			vals := assignments(fn, e.Name)
			for _, a := range vals {
				if !add(a.value) {
					return false
				}
			}
			return len(vals) > 0
		}
		return false
	}
	if !add(lv.expr) {
		return nil
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// inCaller returns what lv, in fn, is in a caller of fn that passes args.
func (s *scanner) inCaller(fn *ast.FuncDecl, lv level, args []ast.Expr) level {
	if lv.expr == nil || lv.unknown {
		return lv
	}
	if id, ok := lv.expr.(*ast.Ident); ok {
		if j, ok := paramIndex(fn, id.Name); ok {
			if j < len(args) {
				return level{expr: args[j]}
			}
			return level{unknown: true}
		}
	}
	if set := s.levels(fn, lv); set != nil {
		return level{set: set}
	}
	return level{unknown: true}
}

// pairedLevel returns the level of the record whose message variable a
// assigns: if lv is a local variable too, the value the same statement
// gives it, or else its first value (level, msg := slog.LevelInfo, "");
// otherwise lv.
func pairedLevel(fn *ast.FuncDecl, a assignment, lv level) level {
	id, ok := lv.expr.(*ast.Ident)
	if !ok || lv.unknown {
		return lv
	}
	if _, isParam := paramIndex(fn, id.Name); isParam {
		return lv
	}
	if v, ok := a.sibling(id.Name); ok {
		return level{expr: v}
	}
	if vals := assignments(fn, id.Name); len(vals) > 0 && vals[0].define {
		return level{expr: vals[0].value}
	}
	return level{unknown: true}
}

// show prints e as source.
func show(e ast.Expr) string {
	var b strings.Builder
	if err := printer.Fprint(&b, token.NewFileSet(), e); err != nil {
		return fmt.Sprintf("(%T)", e)
	}
	return b.String()
}

// constant evaluates e as a string constant of p (or of a scanned package
// it names), if it is one.
func (s *scanner) constant(p *pkg, e ast.Expr) (string, bool) {
	switch e := e.(type) {
	case *ast.BasicLit:
		if e.Kind != token.STRING {
			return "", false
		}
		v, err := strconv.Unquote(e.Value)
		return v, err == nil
	case *ast.ParenExpr:
		return s.constant(p, e.X)
	case *ast.BinaryExpr:
		if e.Op != token.ADD {
			return "", false
		}
		l, ok1 := s.constant(p, e.X)
		r, ok2 := s.constant(p, e.Y)
		return l + r, ok1 && ok2
	case *ast.Ident:
		if v, ok := p.consts[e.Name]; ok {
			return s.constant(p, v)
		}
	case *ast.SelectorExpr:
		if x, ok := e.X.(*ast.Ident); ok {
			for _, q := range s.pkgs {
				if q.name == x.Name {
					if v, ok := q.consts[e.Sel.Name]; ok {
						return s.constant(q, v)
					}
				}
			}
		}
	}
	return "", false
}

// paramIndex returns the index of fn's parameter name among its arguments.
func paramIndex(fn *ast.FuncDecl, name string) (int, bool) {
	i := 0
	for _, f := range fn.Type.Params.List {
		if len(f.Names) == 0 {
			i++
			continue
		}
		for _, n := range f.Names {
			if n.Name == name {
				return i, true
			}
			i++
		}
	}
	return 0, false
}

// assignment is one value a statement gives a variable.
type assignment struct {
	value  ast.Expr
	define bool // := or var
	names  []ast.Expr
	values []ast.Expr
}

// sibling returns the value the same statement gives the variable name.
func (a assignment) sibling(name string) (ast.Expr, bool) {
	for i, n := range a.names {
		if id, ok := n.(*ast.Ident); ok && id.Name == name {
			return a.values[i], true
		}
	}
	return nil, false
}

// assignments returns every value fn assigns (or declares) a variable name
// with, one-to-one, in source order.
func assignments(fn *ast.FuncDecl, name string) []assignment {
	var out []assignment
	if fn.Body == nil {
		return nil
	}
	ast.Inspect(fn.Body, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.AssignStmt:
			if len(n.Lhs) != len(n.Rhs) {
				return true
			}
			for i, l := range n.Lhs {
				if id, ok := l.(*ast.Ident); ok && id.Name == name {
					out = append(out, assignment{value: n.Rhs[i], define: n.Tok == token.DEFINE, names: n.Lhs, values: n.Rhs})
				}
			}
		case *ast.ValueSpec:
			if len(n.Values) != len(n.Names) {
				return true
			}
			names := make([]ast.Expr, len(n.Names))
			for i, id := range n.Names {
				names[i] = id
			}
			for i, id := range n.Names {
				if id.Name == name {
					out = append(out, assignment{value: n.Values[i], define: true, names: names, values: n.Values})
				}
			}
		}
		return true
	})
	return out
}

// traceCallers traces argument i of every call of fn, a wrapper, with
// the level lv is at that call.
func (s *scanner) traceCallers(p *pkg, fn *ast.FuncDecl, i int, lv level) {
	key := fmt.Sprintf("func %s.%s#%d %v", p.dir, fn.Name.Name, i, lv)
	if s.seen[key] {
		return
	}
	s.seen[key] = true
	shared := strings.HasPrefix(p.dir, "internal/") || strings.Contains(p.dir, "/internal/")
	for _, q := range s.pkgs {
		if q != p && !shared {
			continue
		}
		s.eachCall(q, func(caller *ast.FuncDecl, call *ast.CallExpr) {
			var name string
			switch f := call.Fun.(type) {
			case *ast.Ident:
				if q != p {
					return
				}
				name = f.Name
			case *ast.SelectorExpr:
				name = f.Sel.Name
			}
			if name == fn.Name.Name && i < len(call.Args) {
				s.trace(q, caller, call.Args[i], s.inCaller(fn, lv, call.Args), s.pos(call))
			}
		})
	}
}

// traceField traces every value p gives a struct field name, reporting
// whether it found any.
func (s *scanner) traceField(p *pkg, name string) bool {
	key := "field " + p.dir + "." + name
	if s.seen[key] {
		return true
	}
	s.seen[key] = true
	any := false
	for _, file := range p.files {
		for _, d := range file.Decls {
			fn, _ := d.(*ast.FuncDecl)
			ast.Inspect(d, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.KeyValueExpr:
					if k, ok := n.Key.(*ast.Ident); ok && k.Name == name {
						any = true
						s.trace(p, fn, n.Value, level{unknown: true}, s.pos(n))
					}
				case *ast.AssignStmt:
					if len(n.Lhs) != len(n.Rhs) {
						return true
					}
					for i, l := range n.Lhs {
						if sel, ok := l.(*ast.SelectorExpr); ok && sel.Sel.Name == name {
							any = true
							s.trace(p, fn, n.Rhs[i], level{unknown: true}, s.pos(n))
						}
					}
				}
				return true
			})
		}
	}
	return any
}

// records returns what the scan found, one per component and message,
// sorted, each with the first place it is used and the levels of every
// place (nil if the scan cannot tell one of them).
func (s *scanner) records() []found {
	byKey := map[[2]string]found{}
	known := map[[2]string]bool{}
	for _, f := range s.found {
		k := [2]string{f.component, f.message}
		old, seen := byKey[k]
		if !seen {
			byKey[k], known[k] = f, f.levels != nil
			continue
		}
		if f.at < old.at {
			old.at = f.at
		}
		known[k] = known[k] && f.levels != nil
		old.levels = append(slices.Clone(old.levels), f.levels...)
		byKey[k] = old
	}
	out := make([]found, 0, len(byKey))
	for k, f := range byKey {
		if known[k] {
			slices.Sort(f.levels)
			f.levels = slices.Compact(f.levels)
		} else {
			f.levels = nil
		}
		out = append(out, f)
	}
	slices.SortFunc(out, func(a, b found) int {
		return strings.Compare(a.component+"\x00"+a.message, b.component+"\x00"+b.message)
	})
	return out
}

// exists reports whether path exists.
func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
