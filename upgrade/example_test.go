package upgrade_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/coldstart-go/coldstart/upgrade"
)

func ExampleMiddleware() {
	g := upgrade.NewGate(upgrade.GateConfig{}) // starts in PhaseChecking
	_ = g.Enter(upgrade.PhaseRunningSteps)

	mux := http.NewServeMux()
	mux.HandleFunc("/status", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	mux.HandleFunc("/deploy", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "deployed") })
	mux.Handle("/ready", upgrade.ReadyHandler(g))
	isStatus := func(r *http.Request) bool { return r.URL.Path == "/status" }
	srv := httptest.NewServer(upgrade.Middleware(g, isStatus)(mux))
	defer srv.Close()

	get := func(path string) {
		resp, err := srv.Client().Get(srv.URL + path)
		if err != nil {
			fmt.Println(err)
			return
		}
		defer resp.Body.Close()
		refusal := upgrade.ErrorFromResponse(resp) // nil unless the gate refused
		body, _ := io.ReadAll(resp.Body)           // still readable
		// Each refusal's Retry-After is drawn from [1, 2] s (R = 1 s).
		hint := ""
		if ra := resp.Header.Get("Retry-After"); ra != "" {
			hint = fmt.Sprintf(" Retry-After in [1, 2]: %v", ra == "1" || ra == "2")
		}
		fmt.Printf("%s: %d%s refused: %v\n  %s", path, resp.StatusCode, hint, errors.Is(refusal, upgrade.ErrUpgradeInProgress), body)
	}
	get("/status")
	fmt.Println()
	get("/deploy")
	g.Complete()
	get("/deploy")
	fmt.Println()
	// Output:
	// /status: 200 refused: false
	//   ok
	// /deploy: 503 Retry-After in [1, 2]: true refused: true
	//   {"code":"upgrade-in-progress","phase":"running-steps","message":"upgrade in progress (running upgrade steps); call not executed"}
	// /deploy: 200 refused: false
	//   deployed
}

// A failed upgrade is answered with 409 Conflict and no Retry-After, which
// generic retrying clients do not retry; the message names the cause once.
func ExampleMiddleware_failed() {
	g := upgrade.NewGate(upgrade.GateConfig{})
	g.Fail(errors.New("upgrade step 7 (migrate leases): disk full"))
	srv := httptest.NewServer(upgrade.Middleware(g, nil)(http.NotFoundHandler()))
	defer srv.Close()

	resp, err := srv.Client().Post(srv.URL+"/deploy", "application/json", nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer resp.Body.Close()
	err = upgrade.ErrorFromResponse(resp)
	fmt.Println(resp.StatusCode, resp.Header.Values("Retry-After"), errors.Is(err, upgrade.ErrUpgradeFailed))
	fmt.Println(err)
	// Output:
	// 409 [] true
	// upgrade failed: upgrade step 7 (migrate leases): disk full; call not executed
}

func ExampleRetry() {
	// A server that is upgrading for its first two calls.
	calls := 0
	deploy := func(ctx context.Context) error {
		if calls++; calls <= 2 {
			return &upgrade.InProgressError{Phase: upgrade.PhaseRunningSteps, RetryDelay: time.Millisecond}
		}
		return nil
	}
	err := upgrade.Retry(context.Background(), deploy,
		upgrade.WithBackoff(time.Millisecond, 10*time.Millisecond),
		upgrade.WithNotify(func(attempt int, err error, wait time.Duration) {
			fmt.Printf("attempt %d refused: %v\n", attempt, errors.Is(err, upgrade.ErrUpgradeInProgress))
		}))
	fmt.Println("calls:", calls, "err:", err)
	// Output:
	// attempt 1 refused: true
	// attempt 2 refused: true
	// calls: 3 err: <nil>
}

// An RPC server guards every call with Admit, per call (Enter can close
// the gate again at any time), saying whether the call is on its
// allowlist; Report counts what the gate decided while it refused.
func ExampleGate_Admit() {
	g := upgrade.NewGate(upgrade.GateConfig{})
	allowed := map[string]bool{"Client.FullStatus": true}
	call := func(facade, method string) {
		if err := g.Admit(allowed[facade+"."+method]); err != nil {
			fmt.Println(method, "refused:", errors.Is(err, upgrade.ErrUpgradeInProgress))
			return
		}
		fmt.Println(method, "served")
	}
	call("Client", "FullStatus")
	call("Application", "Deploy")
	g.Complete()
	call("Application", "Deploy")
	c := g.Report().Calls[0]
	fmt.Printf("%s: admitted %d, refused %d\n", c.Phase, c.Admitted, c.Refused)
	// Output:
	// FullStatus served
	// Deploy refused: true
	// Deploy served
	// checking: admitted 1, refused 1
}

// A gate goes on a board of gates (or any select) through its epoch's
// channels, with no state copied by hand.
func ExampleGate_Completed() {
	g := upgrade.NewGate(upgrade.GateConfig{})
	completed, failed := g.Completed(), g.Failed()
	go func() {
		_ = g.Enter(upgrade.PhaseRunningSteps)
		g.Complete()
	}()
	select {
	case <-completed:
		fmt.Println("upgrade complete")
	case <-failed:
		fmt.Println("upgrade failed:", g.Report().LastErr)
	}
	// Output:
	// upgrade complete
}

// A client that dials through coldstart/dialer (dialer.Connect) and turns a
// refused login into an error: the dialer looks for a RetryAfter()
// time.Duration method to hold that address off, and errors.As finds one
// on an *InProgressError, so the server's hint is honoured without an
// adapter.
func ExampleInProgressError_retryAfter() {
	// What the dial function returns when the server refuses the login.
	var err error = &upgrade.InProgressError{Phase: upgrade.PhaseRunningSteps, RetryDelay: 5 * time.Second}
	err = fmt.Errorf("login to 10.0.0.2:17070: %w", err)

	// The dialer's side: it declares this interface, knowing nothing of upgrade.
	var hint interface{ RetryAfter() time.Duration }
	if errors.As(err, &hint) {
		fmt.Println("leave 10.0.0.2:17070 alone for", hint.RetryAfter())
	}
	fmt.Println(errors.Is(err, upgrade.ErrUpgradeInProgress))
	// Output:
	// leave 10.0.0.2:17070 alone for 5s
	// true
}
