package metrics_test

import (
	"context"
	"io"
	"maps"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/juju/clock/testclock"
	jujuerrors "github.com/juju/errors"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/coldstart-go/coldstart/gate"
	"github.com/coldstart-go/coldstart/lease"
	"github.com/coldstart-go/coldstart/lease/leasestore"
	"github.com/coldstart-go/coldstart/lease/leasetest"
	"github.com/coldstart-go/coldstart/metrics"
	"github.com/coldstart-go/coldstart/upgrade"
)

// Each collector exports exactly its component's Report, lint-clean.
func TestCollectorsExportTheirReports(t *testing.T) {
	w := newWorld(t)
	for _, tc := range []struct {
		name string
		c    prometheus.Collector
		want string
	}{
		{"board", metrics.NewBoardCollector("c0", w.board), wantBoard},
		{"listener", metrics.NewListenerCollector("c0", w.ln), wantListener},
		{"dialer dialling its own controller", metrics.NewDialerCollector("c0", w.local), wantDialerLocal},
		{"dialer falling back to a peer", metrics.NewDialerCollector("agent", w.agent), wantDialerAgent},
		{"tracker holding the lease", metrics.NewTrackerCollector(w.leader), wantLeader},
		{"tracker told another holds it", metrics.NewTrackerCollector(w.follower), wantFollower},
		{"leader status", metrics.NewLeaderStatusCollector(w.leader), wantLeaderStatus},
		{"upgrade gate", metrics.NewUpgradeCollector("c0", w.upgrades), wantUpgrade},
		{"lease store", metrics.NewStoreCollector("mem", w.store), wantStore},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.NoError(t, testutil.CollectAndCompare(tc.c, strings.NewReader(tc.want)))
			problems, err := testutil.CollectAndLint(tc.c)
			require.NoError(t, err)
			assert.Empty(t, problems)
		})
	}
}

// The want texts were checked against the Reports they come from; this
// keeps them honest if a fixture changes.
func TestWantTextsAreTheReports(t *testing.T) {
	w := newWorld(t)
	ln := w.ln.Report()
	assert.Equal(t, [2]uint64{3, 1}, [2]uint64{ln.Controller.Accepted, ln.API.Accepted})
	assert.Equal(t, [2]int{2, 1}, [2]int{ln.Controller.Conns, ln.API.Conns})
	local, agent := w.local.Report(), w.agent.Report()
	assert.Equal(t, [4]uint64{1, 0, 0, 0}, [4]uint64{local.LocalDials, local.PeerDials, local.Fallbacks, local.Failures})
	assert.Equal(t, [4]uint64{0, 1, 1, 1}, [4]uint64{agent.LocalDials, agent.PeerDials, agent.Fallbacks, agent.Failures})
	leader, follower := w.leader.Report(), w.follower.Report()
	assert.Equal(t, leasestore.Report{Claim: leasestore.Calls{OK: 1}, Extend: leasestore.Calls{OK: 1}}, leader.Calls)
	assert.Equal(t, uint64(1), leader.Token)
	assert.Equal(t, t0.Add(28500*time.Millisecond), leader.Until)
	assert.Equal(t, leasestore.Report{Claim: leasestore.Calls{Definitive: 1}}, follower.Calls)
	assert.Equal(t, [3]uint64{0, 1, 0}, [3]uint64{follower.Losses, follower.Denials, follower.Token})
	up := w.upgrades.Report()
	assert.Equal(t, uint64(2), up.Epoch)
	assert.Error(t, up.LastErr)
	assert.Equal(t, []upgrade.CallsReport{
		{Phase: upgrade.PhaseChecking, Admitted: 1, Refused: 1},
		{Phase: upgrade.PhaseRunningSteps, Admitted: 1, Refused: 2},
		{Phase: upgrade.PhaseFailed, Admitted: 0, Refused: 1},
		{Phase: upgrade.PhaseDraining},
	}, up.Calls)
	assert.Equal(t, leasestore.Report{ // the two trackers' calls, in one family
		Claim:  leasestore.Calls{OK: 1, Definitive: 1},
		Extend: leasestore.Calls{OK: 1},
	}, w.store.StoreReport())
	opened := w.board.Report().Opened()
	assert.Equal(t, []string{"controller-port"}, opened)
}

// One scrape through promhttp over a real http.Server: the body is what
// the collectors say, and clean under promlint, the linter `promtool check
// metrics` runs.
func TestScrapeOverHTTP(t *testing.T) {
	w := newWorld(t)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(
		metrics.NewBoardCollector("c0", w.board),
		metrics.NewListenerCollector("c0", w.ln),
		metrics.NewDialerCollector("c0", w.local),
		metrics.NewTrackerCollector(w.leader),
		metrics.NewLeaderStatusCollector(w.leader),
		metrics.NewUpgradeCollector("c0", w.upgrades),
		metrics.NewStoreCollector("mem", w.store),
	)
	body := scrape(t, promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.HTTPErrorOnError}))

	problems, err := promlint.New(strings.NewReader(body)).Lint()
	require.NoError(t, err)
	assert.Empty(t, problems)

	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(body))
	require.NoError(t, err)
	scraped := prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
		var mfs []*dto.MetricFamily
		for _, name := range slices.Sorted(maps.Keys(families)) {
			mfs = append(mfs, families[name])
		}
		return mfs, nil
	})
	want := strings.Join([]string{wantBoard, wantListener, wantDialerLocal, wantLeader, wantLeaderStatus, wantUpgrade, wantStore}, "")
	assert.NoError(t, testutil.GatherAndCompare(scraped, strings.NewReader(want)))
}

// scrape serves h on a loopback http.Server and GETs /metrics once.
func scrape(t *testing.T, h http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.Handle("/metrics", h)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: wait}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	defer func() {
		require.NoError(t, srv.Shutdown(context.Background()))
		require.ErrorIs(t, <-served, http.ErrServerClosed)
	}()

	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+ln.Addr().String()+"/metrics", nil)
	require.NoError(t, err)
	req.Header.Set("Accept", "text/plain") // the text format, as promtool reads it
	resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)
	return string(b)
}

// Values are computed at scrape time, from the Report then: nothing is
// cached between scrapes.
func TestValuesAreReadAtScrapeTime(t *testing.T) {
	clk := testclock.NewClock(t0)
	board := gate.NewBoard(gate.BoardConfig{Clock: clk})
	g := add(board, "stable")
	c := metrics.NewBoardCollector("c0", board)
	waited := func(seconds string) string {
		return `
# HELP coldstart_gate_wait_seconds How long each gate has been locked, or how long it took to open or fail, since it was put on the board.
# TYPE coldstart_gate_wait_seconds gauge
coldstart_gate_wait_seconds{board="c0",gate="stable"} ` + seconds + "\n"
	}
	clk.Advance(time.Second)
	assert.NoError(t, testutil.CollectAndCompare(c, strings.NewReader(waited("1")), "coldstart_gate_wait_seconds"))
	clk.Advance(time.Second)
	g.Unlock()
	clk.Advance(time.Hour)
	assert.NoError(t, testutil.CollectAndCompare(c, strings.NewReader(waited("2")), "coldstart_gate_wait_seconds"),
		"an opened gate's wait stops at its opening")
}

// collectorFunc is an unchecked collector (it describes nothing).
type collectorFunc func(chan<- prometheus.Metric)

func (f collectorFunc) Describe(chan<- *prometheus.Desc)    {}
func (f collectorFunc) Collect(ch chan<- prometheus.Metric) { f(ch) }

// leader_election_master_status is 1 only while the tracker holds the
// lease, as client-go's is while it leads.
func TestLeaderStatusIsOneOnlyWhileHeld(t *testing.T) {
	w := newWorld(t)
	leader := metrics.NewLeaderStatusCollector(w.leader)
	follower := metrics.NewLeaderStatusCollector(w.follower)
	assert.Equal(t, 1.0, testutil.ToFloat64(leader))
	assert.Equal(t, 0.0, testutil.ToFloat64(follower))
	require.NoError(t, w.leader.Close())
	assert.Equal(t, 0.0, testutil.ToFloat64(leader), "after Close")
}

// Empty names and nil components are refused by Register with a NotValid
// error, and an unchecked collector made from them fails the scrape rather
// than panicking.
func TestBadArgumentsAreRefusedAtRegister(t *testing.T) {
	w := newWorld(t)
	for name, c := range map[string]prometheus.Collector{
		"board name":       metrics.NewBoardCollector("", w.board),
		"nil board":        metrics.NewBoardCollector("c0", nil),
		"listener name":    metrics.NewListenerCollector("", w.ln),
		"nil listener":     metrics.NewListenerCollector("c0", nil),
		"dialer name":      metrics.NewDialerCollector("", w.local),
		"nil dialer":       metrics.NewDialerCollector("c0", nil),
		"nil tracker":      metrics.NewTrackerCollector(nil),
		"nil leader":       metrics.NewLeaderStatusCollector(nil),
		"nil tracker set":  metrics.NewTrackerSetCollector(nil),
		"upgrade name":     metrics.NewUpgradeCollector("", w.upgrades),
		"nil upgrade gate": metrics.NewUpgradeCollector("c0", nil),
		"store name":       metrics.NewStoreCollector("", w.store),
		"nil store":        metrics.NewStoreCollector("mem", nil),
	} {
		t.Run(name, func(t *testing.T) {
			err := prometheus.NewRegistry().Register(c)
			require.Error(t, err)
			assert.ErrorIs(t, err, jujuerrors.NotValid)
			assert.Contains(t, err.Error(), "(must be")

			unchecked := prometheus.NewRegistry()
			require.NoError(t, unchecked.Register(collectorFunc(c.Collect)))
			_, err = unchecked.Gather()
			assert.ErrorIs(t, err, jujuerrors.NotValid)
		})
	}
}

// Instances of one kind sit in one registry under different names; a
// second collector under a name already registered is refused.
func TestInstancesOfOneKind(t *testing.T) {
	w := newWorld(t)
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(metrics.NewDialerCollector("c0", w.local)))
	require.NoError(t, reg.Register(metrics.NewDialerCollector("agent", w.agent)))
	n, err := testutil.GatherAndCount(reg, "coldstart_dialer_dials_total")
	require.NoError(t, err)
	assert.Equal(t, 4, n, "local and peer for each dialer")

	assert.Error(t, reg.Register(metrics.NewDialerCollector("c0", w.agent)))
	// Two trackers of one lease are one name: they need two registries
	// (one per controller), as two of client-go's electors would.
	assert.NoError(t, reg.Register(metrics.NewTrackerCollector(w.leader)))
	assert.Error(t, reg.Register(metrics.NewTrackerCollector(w.follower)))
}

// The incident: one gate name that is not UTF-8 turned the whole /metrics
// answer into a 500, and a megabyte name was echoed into every series of
// its gate. A name is exported as boardview shows it — a byte that is not
// UTF-8 or a control character replaced, cut at 256 bytes — and of names
// that are then the same, the first; every other series is exported.
func TestABadGateNameNeverFailsTheScrape(t *testing.T) {
	board := gate.NewBoard(gate.BoardConfig{Clock: testclock.NewClock(t0)})
	defer board.Close()
	add(board, "ok").Unlock()
	add(board, "bad\xff")
	add(board, "bad\xfe") // the same name once replaced: exported once
	add(board, "forged\n[+]x")
	add(board, strings.Repeat("n", 1<<20))
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(metrics.NewBoardCollector("c0", board))

	body := scrape(t, promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.HTTPErrorOnError}))
	assert.Less(t, len(body), 16<<10, "a megabyte name echoed whole")
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(body))
	require.NoError(t, err)
	var gates []string
	for _, m := range families["coldstart_gate_wait_seconds"].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "gate" {
				gates = append(gates, l.GetValue())
			}
		}
	}
	assert.ElementsMatch(t, []string{"ok", "bad\uFFFD", "forged\u240a[+]x", strings.Repeat("n", 253) + "…"}, gates)
	var unlocked []string // the gates whose state is unlocked
	for _, m := range families["coldstart_gate_state"].GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["state"] == "unlocked" && m.GetGauge().GetValue() == 1 {
			unlocked = append(unlocked, labels["gate"])
		}
	}
	assert.Equal(t, []string{"ok"}, unlocked)
}

// A second entry under a name its board has is on the board as a failed
// entry of its own name (gate.ErrDuplicateName), and exported as one: once
// the collector saw only the first of two entries of one name.
func TestADuplicateGateNameIsExportedFailed(t *testing.T) {
	board := gate.NewBoard(gate.BoardConfig{Clock: testclock.NewClock(t0)})
	defer board.Close()
	add(board, "api-port").Unlock()
	add(board, "api-port")
	want := `
# HELP coldstart_gate_state Whether each gate on the board is in the state the state label names (locked, unlocked or failed): 1 for its state, 0 for the others.
# TYPE coldstart_gate_state gauge
coldstart_gate_state{board="c0",gate="api-port",state="failed"} 0
coldstart_gate_state{board="c0",gate="api-port",state="locked"} 0
coldstart_gate_state{board="c0",gate="api-port",state="unlocked"} 1
coldstart_gate_state{board="c0",gate="api-port (2)",state="failed"} 1
coldstart_gate_state{board="c0",gate="api-port (2)",state="locked"} 0
coldstart_gate_state{board="c0",gate="api-port (2)",state="unlocked"} 0
`
	assert.NoError(t, testutil.CollectAndCompare(metrics.NewBoardCollector("c0", board), strings.NewReader(want), "coldstart_gate_state"))
}

// Every outcome of every operation lands in its series, and a call in
// flight counts until it returns: a FaultStore over a MemStore, called
// directly.
func TestStoreCollectorCountsEveryOutcome(t *testing.T) {
	clk := testclock.NewClock(t0)
	fs := leasetest.NewFaultStore(leasestore.NewMemStore(leasestore.MemStoreConfig{Clock: clk}), leasetest.FaultStoreConfig{Clock: clk})
	c := metrics.NewStoreCollector("faulty", fs)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()

	g, err := fs.Claim(ctx, "l", "c0", time.Minute)
	require.NoError(t, err)
	_, err = fs.Claim(ctx, "l", "c1", time.Minute)
	require.ErrorIs(t, err, leasestore.ErrHeld)
	fs.Next(leasetest.OpExtend, leasetest.Timeout, leasetest.NotSent)
	_, err = fs.Extend(ctx, g, time.Minute)
	require.ErrorIs(t, err, leasetest.ErrInjectedTimeout)
	_, err = fs.Extend(ctx, g, time.Minute)
	require.ErrorIs(t, err, leasestore.ErrNotSent)
	fs.Next(leasetest.OpRevoke, leasetest.Lost)
	require.ErrorIs(t, fs.Revoke(ctx, g), leasestore.ErrNotHeld)

	fs.Next(leasetest.OpClaim, leasetest.Hang)
	hung, stop := context.WithCancel(ctx)
	returned := make(chan error, 1)
	go func() {
		_, err := fs.Claim(hung, "m", "c0", time.Minute)
		returned <- err
	}()
	require.NoError(t, fs.WaitBlocked(ctx, 1))
	inFlight := func(n string) string {
		return `
# HELP coldstart_lease_store_calls_in_flight Store calls begun and not yet returned, including calls the store holds back while it bounds its calls in flight.
# TYPE coldstart_lease_store_calls_in_flight gauge
coldstart_lease_store_calls_in_flight{store="faulty"} ` + n + "\n"
	}
	assert.NoError(t, testutil.CollectAndCompare(c, strings.NewReader(inFlight("1")), "coldstart_lease_store_calls_in_flight"))
	stop()
	require.Error(t, <-returned)
	assert.NoError(t, testutil.CollectAndCompare(c, strings.NewReader(inFlight("0")), "coldstart_lease_store_calls_in_flight"))

	want := `
# HELP coldstart_lease_store_calls_total Store calls finished, by operation (claim, extend, revoke) and outcome: ok, definitive (ErrHeld from claim, ErrNotHeld from extend and revoke), not-sent (ErrNotSent) or ambiguous (any other error: the store may have applied the call).
# TYPE coldstart_lease_store_calls_total counter
coldstart_lease_store_calls_total{operation="claim",outcome="ok",store="faulty"} 1
coldstart_lease_store_calls_total{operation="claim",outcome="definitive",store="faulty"} 1
coldstart_lease_store_calls_total{operation="claim",outcome="not-sent",store="faulty"} 0
coldstart_lease_store_calls_total{operation="claim",outcome="ambiguous",store="faulty"} 1
coldstart_lease_store_calls_total{operation="extend",outcome="ok",store="faulty"} 0
coldstart_lease_store_calls_total{operation="extend",outcome="definitive",store="faulty"} 0
coldstart_lease_store_calls_total{operation="extend",outcome="not-sent",store="faulty"} 1
coldstart_lease_store_calls_total{operation="extend",outcome="ambiguous",store="faulty"} 1
coldstart_lease_store_calls_total{operation="revoke",outcome="ok",store="faulty"} 0
coldstart_lease_store_calls_total{operation="revoke",outcome="definitive",store="faulty"} 1
coldstart_lease_store_calls_total{operation="revoke",outcome="not-sent",store="faulty"} 0
coldstart_lease_store_calls_total{operation="revoke",outcome="ambiguous",store="faulty"} 0
`
	assert.NoError(t, testutil.CollectAndCompare(c, strings.NewReader(want), "coldstart_lease_store_calls_total"))
	assert.Equal(t, leasestore.Report{
		Claim:  leasestore.Calls{OK: 1, Definitive: 1, Ambiguous: 1},
		Extend: leasestore.Calls{NotSent: 1, Ambiguous: 1},
		Revoke: leasestore.Calls{Definitive: 1},
	}, fs.StoreReport(), "the Report the series come from")
	problems, err := testutil.CollectAndLint(c)
	require.NoError(t, err)
	assert.Empty(t, problems)
}

// A set collector exports the same series as a collector per tracker,
// for the trackers returned at each scrape; of two trackers of one lease
// only the first, so that the scrape does not fail.
func TestTrackerSetCollector(t *testing.T) {
	w := newWorld(t)
	var trackers []*lease.Tracker
	set := metrics.NewTrackerSetCollector(func() []*lease.Tracker { return trackers })

	trackers = []*lease.Tracker{w.leader}
	assert.NoError(t, testutil.CollectAndCompare(set, strings.NewReader(wantLeader)))
	trackers = []*lease.Tracker{w.leader, nil, w.follower}
	assert.NoError(t, testutil.CollectAndCompare(set, strings.NewReader(wantLeader)), "the follower, second of its lease, is left out")

	other, err := lease.NewTracker(lease.Config{
		Store: w.store, Name: "other", Holder: "c0", Duration: 10 * time.Second, Clock: w.clk,
	})
	require.NoError(t, err)
	defer other.Close()
	trackers = []*lease.Tracker{w.leader, other}
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(set))
	n, err := testutil.GatherAndCount(reg, "coldstart_lease_state")
	require.NoError(t, err)
	assert.Equal(t, 6, n, "three states for each of two leases")
	problems, err := testutil.GatherAndLint(reg)
	require.NoError(t, err)
	assert.Empty(t, problems)

	trackers = trackers[:1]
	n, err = testutil.GatherAndCount(reg, "coldstart_lease_state")
	require.NoError(t, err)
	assert.Equal(t, 3, n, "a tracker no longer returned is no longer exported")

	assert.Error(t, reg.Register(metrics.NewTrackerCollector(other)),
		"Prometheus refuses a lease label constant in one collector and variable in another")
}
