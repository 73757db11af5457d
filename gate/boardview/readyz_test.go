package boardview_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/juju/clock/testclock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/coldstart-go/coldstart/gate"
	"github.com/coldstart-go/coldstart/gate/boardview"
)

// serve makes one request to b's handler.
func serve(b *gate.Board, target, accept string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodGet, target, nil)
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	rec := httptest.NewRecorder()
	boardview.ReadyHandler(b).ServeHTTP(rec, req)
	return rec
}

// startupBoard is a controller 12s into startup: its API port open first,
// its upgrade steps still running, its lease check failed.
func startupBoard() *gate.Board {
	clk := testclock.NewClock(t0)
	b := gate.NewBoard(gate.BoardConfig{Clock: clk})
	api := add(b, "api-port")
	add(b, "upgrade-steps")
	lease := add(b, "lease")
	clk.Advance(2 * time.Second)
	api.Unlock()
	clk.Advance(3 * time.Second)
	lease.Fail(errors.New("no quorum"))
	clk.Advance(7 * time.Second)
	return b
}

func TestHandlerStates(t *testing.T) {
	failing := "[+]api-port ok\n[-]upgrade-steps locked for 12s\n[-]lease failed: no quorum\nreadyz check failed\n"
	for _, tc := range []struct {
		name   string
		board  func() *gate.Board
		target string
		code   int
		body   string
	}{{
		name:   "an empty board is ready",
		board:  func() *gate.Board { return gate.NewBoard(gate.BoardConfig{}) },
		target: "/readyz", code: 200, body: "ok",
	}, {
		name:   "an empty board, verbose",
		board:  func() *gate.Board { return gate.NewBoard(gate.BoardConfig{}) },
		target: "/readyz?verbose", code: 200, body: "readyz check passed\n",
	}, {
		name:   "every gate unlocked",
		board:  openBoard,
		target: "/readyz", code: 200, body: "ok",
	}, {
		name:   "every gate unlocked, verbose",
		board:  openBoard,
		target: "/readyz?verbose", code: 200, body: "[+]api-port ok\n[+]upgrade-steps ok\nreadyz check passed\n",
	}, {
		name: "one gate locked: 503, and a failing answer is always verbose",
		board: func() *gate.Board {
			b := openBoard()
			add(b, "lease")
			return b
		},
		target: "/readyz", code: 503, body: "[+]api-port ok\n[+]upgrade-steps ok\n[-]lease locked for 0s\nreadyz check failed\n",
	}, {
		name:   "locked and failed gates, with how long and why",
		board:  startupBoard,
		target: "/readyz?verbose", code: 503, body: failing,
	}, {
		name:   "the same without verbose",
		board:  startupBoard,
		target: "/readyz", code: 503, body: failing,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			rec := serve(tc.board(), tc.target, "")
			assert.Equal(t, tc.code, rec.Code)
			assert.Equal(t, tc.body, rec.Body.String())
			assert.Equal(t, "text/plain; charset=utf-8", rec.Header().Get("Content-Type"))
			assert.Equal(t, "nosniff", rec.Header().Get("X-Content-Type-Options"))
		})
	}
}

func openBoard() *gate.Board {
	b := gate.NewBoard(gate.BoardConfig{Clock: testclock.NewClock(t0)})
	add(b, "api-port").Unlock()
	add(b, "upgrade-steps").Unlock()
	return b
}

func TestHandlerExclude(t *testing.T) {
	for _, tc := range []struct {
		name   string
		target string
		code   int
		body   string
	}{{
		name:   "excluding the gates that are not open makes the board ready",
		target: "/readyz?exclude=upgrade-steps&exclude=lease",
		code:   200, body: "ok",
	}, {
		name:   "excluded gates are listed as such",
		target: "/readyz?verbose&exclude=upgrade-steps&exclude=lease",
		code:   200, body: "[+]api-port ok\n[+]upgrade-steps excluded: ok\n[+]lease excluded: ok\nreadyz check passed\n",
	}, {
		name:   "excluding one of two is not enough",
		target: "/readyz?exclude=lease",
		code:   503, body: "[+]api-port ok\n[-]upgrade-steps locked for 12s\n[+]lease excluded: ok\nreadyz check failed\n",
	}, {
		name:   "names on no gate are warned about, once each, in the order given",
		target: "/readyz?verbose&exclude=etcd&exclude=upgrade-steps&exclude=lease&exclude=mongo&exclude=etcd",
		code:   200,
		body:   "[+]api-port ok\n[+]upgrade-steps excluded: ok\n[+]lease excluded: ok\nwarn: some health checks cannot be excluded: no matches for \"etcd\",\"mongo\"\nreadyz check passed\n",
	}, {
		name:   "an unknown name excludes nothing",
		target: "/readyz?exclude=upgrade",
		code:   503,
		body:   "[+]api-port ok\n[-]upgrade-steps locked for 12s\n[-]lease failed: no quorum\nwarn: some health checks cannot be excluded: no matches for \"upgrade\"\nreadyz check failed\n",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			rec := serve(startupBoard(), tc.target, "")
			assert.Equal(t, tc.code, rec.Code)
			assert.Equal(t, tc.body, rec.Body.String())
		})
	}
}

// wireEntry is what a JSON client reads.
type wireEntry struct {
	Name  string    `json:"name"`
	State string    `json:"state"`
	Since time.Time `json:"since"`
	For   string    `json:"for"`
	Order int       `json:"order"`
	Error string    `json:"error"`
}

func TestHandlerJSON(t *testing.T) {
	for _, accept := range []string{"application/json", "text/plain;q=0.5, application/json; charset=utf-8"} {
		rec := serve(startupBoard(), "/readyz", accept)
		assert.Equal(t, 503, rec.Code, "the same status code as the plain answer")
		assert.Equal(t, "application/json", rec.Header().Get("Content-Type"))
		var got []wireEntry
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &got), rec.Body.String())
		assert.Equal(t, []wireEntry{
			{Name: "api-port", State: "unlocked", Since: t0, For: "2s", Order: 1},
			{Name: "upgrade-steps", State: "locked", Since: t0, For: "12s"},
			{Name: "lease", State: "failed", Since: t0, For: "5s", Order: 2, Error: "no quorum"},
		}, got)
	}

	rec := serve(startupBoard(), "/readyz?exclude=upgrade-steps&exclude=lease", "application/json")
	assert.Equal(t, 200, rec.Code)
	assert.JSONEq(t, `[{"name":"api-port","state":"unlocked","since":"2026-11-30T01:00:00Z","for":"2s","order":1}]`, rec.Body.String())

	for _, accept := range []string{"text/html", "application/json;q=0, text/plain", "application/json;q=0.1, text/plain"} {
		rec = serve(startupBoard(), "/readyz", accept)
		assert.Equal(t, "text/plain; charset=utf-8", rec.Header().Get("Content-Type"), "JSON only when asked for: %q", accept)
	}
}

// Requests read the board while gates are added, opened, failed and
// watched: every answer is whole, and once every gate is open the answer
// is 200. Run under -race.
func TestHandlerWhileBoardChanges(t *testing.T) {
	b := gate.NewBoard(gate.BoardConfig{})
	srv := httptest.NewServer(boardview.ReadyHandler(b))
	defer srv.Close()

	const gates = 50
	var wg sync.WaitGroup
	watched := make([]*gate.Lock, gates) // read after wg.Wait
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := range gates {
			l := add(b, fmt.Sprintf("g%d", i))
			opened := make(chan struct{})
			watched[i] = b.Follow(fmt.Sprintf("w%d", i), gate.Channels(opened, nil))
			if i%10 == 9 {
				l.Fail(errors.New("boom"))
			}
			l.Unlock()
			close(opened)
		}
	}()
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				accept := ""
				if i%2 == 0 {
					accept = "application/json"
				}
				req, err := http.NewRequest(http.MethodGet, srv.URL+"/readyz?verbose", nil)
				if !assert.NoError(t, err) {
					return
				}
				req.Header.Set("Accept", accept)
				resp, err := srv.Client().Do(req)
				if !assert.NoError(t, err) {
					return
				}
				assert.Contains(t, []int{200, 503}, resp.StatusCode)
				if accept != "" {
					var got []wireEntry
					assert.NoError(t, json.NewDecoder(resp.Body).Decode(&got))
				}
				resp.Body.Close()
			}
		}()
	}
	wg.Wait()

	failed := 0
	for _, e := range b.Report() {
		if e.State == gate.StateFailed {
			failed++
		}
	}
	assert.Equal(t, gates/10, failed)
	for _, w := range watched {
		// A watched entry resolves on Watch's goroutine: wait for it.
		require.NoError(t, gate.Wait(bounded(t), w))
	}
	var names []string
	for _, e := range b.Report() {
		if e.State == gate.StateFailed {
			names = append(names, "exclude="+e.Name)
		}
	}
	rec := serve(b, "/readyz?"+strings.Join(names, "&"), "")
	assert.Equal(t, 200, rec.Code, rec.Body.String())
}

// A second entry under a name the board has is put on it failed, under a
// name of its own: readiness says so and is not ready, and excluding the
// name excludes the first entry alone (once it excluded both).
func TestHandlerShowsADuplicateNameFailed(t *testing.T) {
	b := gate.NewBoard(gate.BoardConfig{Name: "c0", Clock: testclock.NewClock(t0)})
	defer b.Close()
	add(b, "api-port").Unlock()
	b.Follow("api-port", gate.Channels(nil, make(chan struct{})))
	const dup = "[-]api-port (2) failed: gate: duplicate entry name \"api-port\" on board \"c0\": a name is on a board once\n"

	rec := serve(b, "/readyz", "")
	assert.Equal(t, 503, rec.Code)
	assert.Equal(t, "[+]api-port ok\n"+dup+"readyz check failed\n", rec.Body.String())
	rec = serve(b, "/readyz?exclude=api-port", "")
	assert.Equal(t, 503, rec.Code)
	assert.Equal(t, "[+]api-port excluded: ok\n"+dup+"readyz check failed\n", rec.Body.String())
}

// A board that starts draining fails /readyz at once, naming the drain,
// and lists the stop's steps as they open.
func TestHandlerDraining(t *testing.T) {
	clk := testclock.NewClock(t0)
	drain := make(chan struct{})
	b := gate.NewBoard(gate.BoardConfig{Clock: clk, Drain: drain})
	defer b.Close()
	add(b, "api-port").Unlock()
	require.Equal(t, 200, serve(b, "/readyz", "").Code)

	close(drain)
	grace := add(b, "grace over")
	clk.Advance(2 * time.Second)
	grace.Unlock()
	add(b, "calls finished")
	clk.Advance(time.Second)
	rec := serve(b, "/readyz", "")
	assert.Equal(t, 503, rec.Code)
	assert.Equal(t, "[+]api-port ok\n[-]draining locked for 3s\n[+]grace over ok\n[-]calls finished locked for 1s\nreadyz check failed\n", rec.Body.String())
}
