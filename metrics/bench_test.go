package metrics_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/juju/clock/testclock"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/coldstart-go/coldstart/gate"
	"github.com/coldstart-go/coldstart/lease"
	"github.com/coldstart-go/coldstart/lease/leasestore"
	"github.com/coldstart-go/coldstart/lease/leasetest"
	"github.com/coldstart-go/coldstart/metrics"
)

// BenchmarkScrape measures one scrape of a 20-gate board (10 open, 10
// locked) and 1,000 trackers, each holding its own lease on one MemStore:
//
//	reports  the baseline: the Reports alone, what any scrape must read
//	gather   Registry.Gather over the collectors (Reports, metrics, checks),
//	         a NewTrackerCollector per tracker
//	set      the same with one NewTrackerSetCollector for the 1,000
//	http     promhttp's handler writing the text format, as a scraper gets it
//	vecs     for comparison, Gather of as many series kept in client_golang's
//	         own GaugeVecs (what per-call hooks would update), no Reports
func BenchmarkScrape(b *testing.B) {
	clk := testclock.NewClock(t0)
	board := gate.NewBoard(gate.BoardConfig{Clock: clk})
	for i := range 20 {
		g := add(board, fmt.Sprintf("gate-%02d", i))
		if i%2 == 0 {
			g.Unlock()
		}
	}
	store := leasestore.NewMemStore(leasestore.MemStoreConfig{Clock: clk})
	trackers := make([]*lease.Tracker, 1000)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i := range trackers {
		tr, err := lease.NewTracker(lease.Config{
			Store: store, Name: fmt.Sprintf("lease-%04d", i), Holder: "c0",
			Duration: time.Minute, Clock: clk,
		})
		if err != nil {
			b.Fatal(err)
		}
		defer tr.Close()
		if _, err := leasetest.Settle(ctx, tr, clk, 1); err != nil {
			b.Fatal(err)
		}
		trackers[i] = tr
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics.NewBoardCollector("c0", board))
	for _, tr := range trackers {
		reg.MustRegister(metrics.NewTrackerCollector(tr))
	}

	vecs := prometheus.NewRegistry()
	perTracker := testutil.CollectAndCount(metrics.NewTrackerCollector(trackers[0]))
	for f := range perTracker {
		v := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: fmt.Sprintf("family_%02d", f), Help: "A family."}, []string{"lease"})
		for _, tr := range trackers {
			v.WithLabelValues(tr.Report().Name).Set(1)
		}
		vecs.MustRegister(v)
	}
	boardSeries := testutil.CollectAndCount(metrics.NewBoardCollector("c0", board))
	bv := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "board", Help: "A family."}, []string{"series"})
	for i := range boardSeries {
		bv.WithLabelValues(fmt.Sprint(i)).Set(1)
	}
	vecs.MustRegister(bv)
	b.Logf("%d series per tracker, %d for the board", perTracker, boardSeries)

	b.Run("reports", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = board.Report()
			for _, tr := range trackers {
				_ = tr.Report()
			}
		}
	})
	b.Run("gather", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := reg.Gather(); err != nil {
				b.Fatal(err)
			}
		}
	})
	set := prometheus.NewRegistry()
	set.MustRegister(
		metrics.NewBoardCollector("c0", board),
		metrics.NewTrackerSetCollector(func() []*lease.Tracker { return trackers }),
	)
	b.Run("set", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := set.Gather(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("vecs", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := vecs.Gather(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("http", func(b *testing.B) {
		h := promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.HTTPErrorOnError})
		req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
		req.Header.Set("Accept", "text/plain")
		b.ReportAllocs()
		for b.Loop() {
			w := discardResponse{header: http.Header{}}
			h.ServeHTTP(&w, req)
			if w.code != 0 && w.code != http.StatusOK {
				b.Fatalf("status %d", w.code)
			}
		}
	})
}

// discardResponse is an http.ResponseWriter that keeps nothing of the body.
type discardResponse struct {
	header http.Header
	code   int
}

func (w *discardResponse) Header() http.Header         { return w.header }
func (w *discardResponse) Write(p []byte) (int, error) { return io.Discard.Write(p) }
func (w *discardResponse) WriteHeader(code int)        { w.code = code }
