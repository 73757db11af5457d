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
	g := upgrade.NewGate(nil) // starts in Checking
	_ = g.Enter(upgrade.RunningSteps)

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
		fmt.Printf("%s: %d Retry-After=%q refusal=%v\n  %s", path, resp.StatusCode, resp.Header.Get("Retry-After"), refusal, body)
	}
	get("/status")
	fmt.Println()
	get("/deploy")
	g.Complete()
	get("/deploy")
	fmt.Println()
	// Output:
	// /status: 200 Retry-After="" refusal=<nil>
	//   ok
	// /deploy: 503 Retry-After="1" refusal=upgrade in progress (running upgrade steps); call not executed; retry after 1s
	//   {"code":"upgrade-in-progress","phase":"running-steps","message":"upgrade in progress (running upgrade steps); call not executed; retry after 1s"}
	// /deploy: 200 Retry-After="" refusal=<nil>
	//   deployed
}

func ExampleRetry() {
	// A server that is upgrading for its first two calls.
	calls := 0
	deploy := func(ctx context.Context) error {
		if calls++; calls <= 2 {
			return &upgrade.InProgressError{Phase: upgrade.RunningSteps, RetryAfter: time.Millisecond}
		}
		return nil
	}
	err := upgrade.Retry(context.Background(), nil, deploy,
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

func ExampleAllowlist() {
	g := upgrade.NewGate(nil)
	allowed := upgrade.NewAllowlist(upgrade.Call{Service: "Client", Method: "FullStatus"})

	for _, method := range []string{"FullStatus", "Deploy"} {
		if err := allowed.Check(g, "Client", method); err != nil {
			fmt.Println(method, "refused:", errors.Is(err, upgrade.ErrUpgradeInProgress))
			continue
		}
		fmt.Println(method, "served")
	}
	// Output:
	// FullStatus served
	// Deploy refused: true
}

func ExampleMatchBinary() {
	v := func(s string) upgrade.Version { v, _ := upgrade.ParseVersion(s); return v }
	available := []upgrade.Binary{
		{Version: v("1.24.4"), Platform: upgrade.Platform{OS: "linux", Arch: "amd64"}},
		{Version: v("1.24.6"), Platform: upgrade.Platform{OS: "linux", Arch: "amd64"}},
		{Version: v("1.24.5"), Platform: upgrade.Platform{OS: "linux", Arch: "arm64"}},
	}
	_, err := upgrade.MatchBinary(available, v("1.24.5"), upgrade.Platform{OS: "linux", Arch: "amd64"})
	fmt.Println(err)

	_, err = upgrade.ParseVersion("1.24")
	fmt.Println(err)
	// Output:
	// no agent binaries for 1.24.5 on linux/amd64; nearest for linux/amd64: 1.24.4, 1.24.6; 1.24.5 is available for linux/arm64
	// upgrade: invalid version "1.24": that is a series (many versions), not a version; add the patch number, e.g. 1.24.0; want major.minor.patch[.build], e.g. 1.24.5
}

// A client that dials through coldstart/dialer (dialer.Connect) and turns a
// refused login into an error: the dialer looks for a RetryAfter()
// time.Duration method to hold that address off, and errors.As finds one
// on an *InProgressError, so the server's hint is honoured without an
// adapter.
func ExampleInProgressError_retryAfter() {
	// What the dial function returns when the server refuses the login.
	var err error = &upgrade.InProgressError{Phase: upgrade.RunningSteps, RetryAfter: 5 * time.Second}
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
