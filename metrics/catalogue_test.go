package metrics_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/coldstart-go/coldstart/internal/catalogue"
	"github.com/coldstart-go/coldstart/lease"
	"github.com/coldstart-go/coldstart/metrics"
)

// family is what a scrape says of a metric family.
type family struct {
	typ    string
	labels []string // sorted
	help   string
}

// Every family the collectors export is in docs/catalogue.md with its
// type and labels, and every family the catalogue lists is
// exported: the failure prints the rows to add, fix and remove. The
// families come from gathering a registry of every collector this package
// constructs (the test fails if a constructor is added and not called
// here, or a family is described but exports no series in the fixture).
func TestMetricFamiliesMatchTheREADME(t *testing.T) {
	w := newWorld(t)
	// Each registry takes collectors that can share one: a tracker set's
	// lease label is variable, a tracker collector's constant.
	registries := map[string][]prometheus.Collector{
		"NewBoardCollector":        {metrics.NewBoardCollector("c0", w.board)},
		"NewListenerCollector":     {metrics.NewListenerCollector("c0", w.ln)},
		"NewDialerCollector":       {metrics.NewDialerCollector("c0", w.local)},
		"NewTrackerCollector":      {metrics.NewTrackerCollector(w.leader)},
		"NewTrackerSetCollector":   {metrics.NewTrackerSetCollector(func() []*lease.Tracker { return []*lease.Tracker{w.leader, w.follower} })},
		"NewLeaderStatusCollector": {metrics.NewLeaderStatusCollector(w.leader)},
		"NewUpgradeCollector":      {metrics.NewUpgradeCollector("c0", w.upgrades)},
		"NewStoreCollector":        {metrics.NewStoreCollector("mem", w.store)},
	}
	assert.Equal(t, constructors(t), slices.Sorted(maps.Keys(registries)),
		"every exported constructor of a collector is gathered here")

	got := map[string]family{}
	for ctor, cs := range registries {
		reg := prometheus.NewPedanticRegistry()
		for _, c := range cs {
			require.NoError(t, reg.Register(c), ctor)
		}
		mfs, err := reg.Gather()
		require.NoError(t, err, ctor)
		gathered := map[string]bool{}
		for _, mf := range mfs {
			labels := map[string]bool{}
			for _, m := range mf.GetMetric() {
				for _, lp := range m.GetLabel() {
					labels[lp.GetName()] = true
				}
			}
			f := family{typ: strings.ToLower(mf.GetType().String()), labels: slices.Sorted(maps.Keys(labels)), help: mf.GetHelp()}
			if old, ok := got[mf.GetName()]; ok {
				require.Equal(t, old, f, "%s: two collectors export it differently", mf.GetName())
			}
			got[mf.GetName()] = f
			gathered[mf.GetName()] = true
		}
		for _, c := range cs {
			for _, name := range described(c) {
				assert.True(t, gathered[name], "%s describes %s but exports no series of it in this test's world: give the fixture one", ctor, name)
			}
		}
	}
	require.NotEmpty(t, got)

	cat, err := catalogue.Read(filepath.Join("..", "docs", "catalogue.md"))
	require.NoError(t, err)
	if diff := diffFamilies(got, cat.Families); diff != "" {
		t.Error(diff)
	}
}

// constructors returns the exported functions of this package's non-test
// source that return a prometheus.Collector.
func constructors(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	var names []string
	fset := token.NewFileSet()
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		require.NoError(t, err)
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv != nil || !fn.Name.IsExported() || fn.Type.Results == nil {
				continue
			}
			for _, r := range fn.Type.Results.List {
				if sel, ok := r.Type.(*ast.SelectorExpr); ok && sel.Sel.Name == "Collector" {
					names = append(names, fn.Name.Name)
				}
			}
		}
	}
	slices.Sort(names)
	return names
}

var fqName = regexp.MustCompile(`fqName: "([^"]*)"`)

// described returns the names of the families c describes.
func described(c prometheus.Collector) []string {
	ch := make(chan *prometheus.Desc)
	go func() { c.Describe(ch); close(ch) }()
	var names []string
	for d := range ch {
		if m := fqName.FindStringSubmatch(d.String()); m != nil {
			names = append(names, m[1])
		}
	}
	return names
}

// diffFamilies says how the catalogue's rows differ from the families
// exported, as rows to paste, rows to correct and lines to delete; "" if
// they agree.
func diffFamilies(got map[string]family, listed []catalogue.Family) string {
	inREADME := map[string]catalogue.Family{}
	var add, fix, remove []string
	for _, f := range listed {
		inREADME[f.Name] = f
		g, ok := got[f.Name]
		switch {
		case !ok:
			remove = append(remove, fmt.Sprintf("docs/catalogue.md:%d: %s", f.Line, f.Row))
		case g.typ != f.Type || !slices.Equal(g.labels, f.Labels):
			fix = append(fix, fmt.Sprintf("docs/catalogue.md:%d: %s\n  type and labels should be: %s | %s", f.Line, f.Row, g.typ, catalogue.LabelCell(g.labels)))
		}
	}
	for _, name := range slices.Sorted(maps.Keys(got)) {
		if _, ok := inREADME[name]; !ok {
			add = append(add, catalogue.FamilyRow(name, got[name].typ, got[name].labels, got[name].help))
		}
	}
	if len(add)+len(fix)+len(remove) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("docs/catalogue.md's table of metric families and the collectors disagree.\n")
	if len(add) > 0 {
		fmt.Fprintf(&b, "\nFamilies exported that docs/catalogue.md does not list: add these rows to the table headed\n%s\n(the meaning is the family's HELP: say it in the catalogue's words):\n\n%s\n", catalogue.FamiliesHeader, strings.Join(add, "\n"))
	}
	if len(fix) > 0 {
		fmt.Fprintf(&b, "\nFamilies whose type or labels differ: correct these rows (keep their meaning):\n\n%s\n", strings.Join(fix, "\n"))
	}
	if len(remove) > 0 {
		fmt.Fprintf(&b, "\nFamilies docs/catalogue.md lists that no collector exports: remove these rows:\n\n%s\n", strings.Join(remove, "\n"))
	}
	return b.String()
}

// The diff names each row to add, to fix and to remove.
func TestDiffFamiliesPrintsRowsToAddFixAndRemove(t *testing.T) {
	diff := diffFamilies(
		map[string]family{
			"coldstart_a_total": {typ: "counter", labels: []string{"a", "b"}, help: "As counted."},
			"coldstart_b":       {typ: "gauge"},
			"coldstart_c":       {typ: "gauge", labels: []string{"x"}},
		},
		[]catalogue.Family{
			{Name: "coldstart_b", Type: "gauge", Line: 3},
			{Name: "coldstart_c", Type: "counter", Labels: []string{"x"}, Line: 4, Row: "| `coldstart_c` | counter | `x` | c |"},
			{Name: "coldstart_gone", Type: "gauge", Line: 5, Row: "| `coldstart_gone` | gauge | — | gone |"},
		})
	assert.Contains(t, diff, "\n| `coldstart_a_total` | counter | `a`, `b` | As counted. |\n")
	assert.Contains(t, diff, "docs/catalogue.md:4: | `coldstart_c` | counter | `x` | c |\n  type and labels should be: gauge | `x`")
	assert.Contains(t, diff, "docs/catalogue.md:5: | `coldstart_gone` | gauge | — | gone |")
	assert.NotContains(t, diff, "coldstart_b`")
}
