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

	"github.com/coldstart-go/coldstart/gate/boardview"
	"github.com/coldstart-go/coldstart/lease"
	"github.com/coldstart-go/coldstart/lease/k8slease"
)

// An operator elects its leader on a Lease in its own namespace. A slow or
// restarting API server makes the tracker answer ErrRenewalFailed ("still
// ours until T"), never ErrNotLeader, so the operator neither exits nor
// stops reconciling while its promise lasts — and its liveness probe does
// not depend on the API server at all, so the kubelet does not restart it
// for the API server's trouble. (Not run: it needs a cluster; the module
// internal/apiservertest tests this set-up against a real kube-apiserver.)
func Example_operator() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	cfg, err := rest.InClusterConfig()
	if err != nil {
		log.Fatal(err)
	}
	// The lease's own client and rate limiter: renewals queued behind the
	// operator's own requests lose the Lease (kubernetes-sigs/kueue#15538).
	leaseCfg := rest.CopyConfig(cfg)
	leaseCfg.QPS, leaseCfg.Burst = 5, 10 // a renewal is one request every few seconds
	leaseCfg.RateLimiter = nil           // CopyConfig shares cfg's limiter, if it has one
	leaseCfg.UserAgent = rest.DefaultKubernetesUserAgent() + " leader-election"
	cs, err := kubernetes.NewForConfig(leaseCfg)
	if err != nil {
		log.Fatal(err)
	}
	logger := slog.New(slog.NewJSONHandler(os.Stderr, nil)) // the store's records and the tracker's
	store, err := k8slease.NewStore(cs.CoordinationV1(), os.Getenv("POD_NAMESPACE"), k8slease.WithLogger(logger))
	if err != nil {
		log.Fatal(err) // a nil client or a bad namespace: NotValid
	}
	tr, err := lease.NewTracker(lease.Config{
		Store:          store,
		Name:           "my-operator-leader", // the Lease object's name
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
	// the API server is slow or another pod leads; readiness says whether
	// this pod leads.
	http.Handle("/livez", boardview.LiveHandler(map[string]func() error{"lease": tr.Alive}))
	http.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		if _, err := tr.Check(r.Context(), 0); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
		}
	})
	go func() { log.Print(http.ListenAndServe(":8081", nil)) }()

	// Step down when the Lease's spec.preferredHolder names another pod.
	go store.YieldToPreferredHolder(ctx, tr)

	// reconcile runs each term; its ctx ends when the lease can no longer
	// be promised (or this pod steps down), and Lead waits for the next.
	if err := tr.Lead(ctx, reconcile); err != nil && ctx.Err() == nil {
		log.Fatal(err)
	}
}

func reconcile(ctx context.Context, _ lease.Status) error {
	<-ctx.Done() // watch and reconcile until leadership ends
	return ctx.Err()
}
