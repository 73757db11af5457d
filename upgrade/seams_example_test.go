package upgrade_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/coldstart-go/coldstart/gate"
	"github.com/coldstart-go/coldstart/upgrade"
)

// An HTTP client that waits an upgrade out with no code around its calls:
// the POST is refused once (503, Retry-After 1 or 2 s), sent again after
// exactly that wait, body and all, and executed once.
func ExampleRetryTransport() {
	g := upgrade.NewGate(upgrade.GateConfig{}) // refusing: PhaseChecking
	srv := httptest.NewServer(upgrade.Middleware(g, nil)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		fmt.Printf("executed: %s\n", body)
	})))
	defer srv.Close()

	client := &http.Client{Transport: upgrade.RetryTransport(srv.Client().Transport,
		upgrade.WithNotify(func(attempt int, err error, wait time.Duration) {
			fmt.Printf("attempt %d refused: %v, waiting the server's Retry-After: %v\n",
				attempt, errors.Is(err, upgrade.ErrUpgradeInProgress), wait == time.Second || wait == 2*time.Second)
			g.Complete() // the upgrade finishes while the client waits
		}))}
	resp, err := client.Post(srv.URL, "text/plain", strings.NewReader("deploy mysql"))
	if err != nil {
		fmt.Println(err)
		return
	}
	resp.Body.Close()
	fmt.Println(resp.Status)
	// Output:
	// attempt 1 refused: true, waiting the server's Retry-After: true
	// executed: deploy mysql
	// 200 OK
}

// Upgrade steps behind the gate, on a board of gates: the board shows the
// phase while they run, a SIGTERM (ctx ended) leaves the upgrade in
// progress, and only a step's own error fails it, with its cause on the
// board.
func ExampleGate_RunSteps() {
	g := upgrade.NewGate(upgrade.GateConfig{})
	board := gate.NewBoard(gate.BoardConfig{})
	entry := board.Follow("upgrade", g)

	ctx, sigterm := context.WithCancel(context.Background())
	err := g.RunSteps(ctx, func(ctx context.Context) error {
		fmt.Println("board:", board.Report()[0].Detail)
		sigterm()
		<-ctx.Done()
		return ctx.Err()
	})
	fmt.Println(err)
	fmt.Println("phase:", g.Phase())

	err = g.RunSteps(context.Background(), func(context.Context) error { return errors.New("disk full") })
	fmt.Println(err)
	<-entry.Done()
	fmt.Println("board:", entry.Err())
	// Output:
	// board: running upgrade steps
	// upgrade steps stopped, upgrade still in progress: context canceled
	// phase: running-steps
	// upgrade steps: disk full
	// board: gate "upgrade" failed: upgrade steps: disk full
}
