package k8slease_test

import (
	"context"
	"log"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/coldstart-go/coldstart/lease"
	"github.com/coldstart-go/coldstart/lease/k8slease"
)

// An operator elects its leader on a Lease in its own namespace. A slow or
// restarting API server makes the tracker answer ErrRenewalFailed ("still
// ours until T"), never ErrNotLeader, so the operator neither exits nor
// stops reconciling while its promise lasts — and its liveness probe does
// not depend on the API server at all, so the kubelet does not restart it
// for the API server's trouble. (Not run: it needs a cluster; the module
// internal/apiservertest runs this against a real kube-apiserver.)
func Example_operator() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	cfg, err := rest.InClusterConfig()
	if err != nil {
		log.Fatal(err)
	}
	// The lease gets a client of its own, with a rate limiter of its own:
	// the operator's informers and reconcile writes, sharing one client's
	// limiter with the renewals, can queue them past the term
	// (kubernetes-sigs/kueue#15538: leaders crash-looped that way). A
	// renewal is one request a few seconds apart, so a small QPS is
	// plenty; the operator's own client (not shown) keeps its own limits.
	leaseCfg := rest.CopyConfig(cfg)
	leaseCfg.QPS, leaseCfg.Burst = 5, 10
	leaseCfg.RateLimiter = nil // CopyConfig shares cfg's limiter, if it has one
	leaseCfg.UserAgent = rest.DefaultKubernetesUserAgent() + " leader-election"
	cs, err := kubernetes.NewForConfig(leaseCfg)
	if err != nil {
		log.Fatal(err)
	}
	// One logger for the store (what it finds on the API server: a
	// takeover, a deleted Lease) and the tracker (each state change).
	logger := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	store, err := k8slease.NewStore(cs.CoordinationV1(), os.Getenv("POD_NAMESPACE"), k8slease.WithLogger(logger))
	if err != nil {
		log.Fatal(err)
	}
	tr, err := lease.NewTracker(lease.Config{
		Store:          store,
		Name:           "my-operator-leader",
		Holder:         os.Getenv("POD_NAME"),
		Duration:       15 * time.Second, // the Lease says leaseDurationSeconds: 30
		ReleaseOnClose: true,             // the next pod takes over at once on a rolling update
		Logger:         logger,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer tr.Close()

	// Liveness fails only when the tracker itself is stuck, never because
	// the API server is slow or another pod leads (a restart fixes
	// neither); readiness says whether this pod leads, for the Service.
	http.HandleFunc("/livez", func(w http.ResponseWriter, _ *http.Request) {
		if err := tr.Alive(); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
		}
	})
	http.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		if _, err := tr.Check(r.Context(), 0); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
		}
	})
	go func() { log.Print(http.ListenAndServe(":8081", nil)) }()

	// Coordinated leader election (KEP-4355): step down when the Lease's
	// spec.preferredHolder names another pod, once reconcile has returned.
	go store.YieldToPreferredHolder(ctx, tr)

	// reconcile runs each time this pod leads; its ctx ends when the
	// lease can no longer be promised (or it steps down), and Lead waits
	// for the next term.
	if err := tr.Lead(ctx, reconcile); err != nil && ctx.Err() == nil {
		log.Fatal(err)
	}
}

func reconcile(ctx context.Context, _ lease.Status) error {
	<-ctx.Done() // watch and reconcile until leadership ends
	return ctx.Err()
}
