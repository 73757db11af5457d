package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/coldstart-go/coldstart/dialer"
	"github.com/coldstart-go/coldstart/dialer/grpcdialer"
	"github.com/coldstart-go/coldstart/upgrade"
	"github.com/coldstart-go/coldstart/upgrade/grpcupgrade"
)

// selfCall is one of the controller's own calls off the upgrade allowlist:
// how often the upgrade gate refused it, and whether it went through.
type selfCall struct {
	name    string
	refused chan struct{} // closed at the first refusal
	once    sync.Once
	n       atomic.Int64 // refusals waited out
	err     error        // set before done closes: nil once the call went through
	done    chan struct{}
}

func newSelfCall(name string) *selfCall {
	return &selfCall{name: name, refused: make(chan struct{}), done: make(chan struct{})}
}

// notify is the call's upgrade.WithNotify hook: it counts the refusal and
// tells the timeline about the first.
func (s *selfCall) notify(c *controller) upgrade.RetryOption {
	return upgrade.WithNotify(func(attempt int, err error, wait time.Duration) {
		s.n.Add(1)
		if attempt == 1 {
			c.tl.log(c.name, "%s refused (%v): waiting %v", s.name, err, wait.Round(time.Millisecond))
		}
		s.once.Do(func() { close(s.refused) })
	})
}

// finish records how the call ended.
func (s *selfCall) finish(err error) {
	s.err = err
	close(s.done)
}

// selfClient is the controller's own API client, over HTTP and gRPC: every
// connection goes through the dialer, which waits for the local server
// rather than dial a peer, and both clients would move home by themselves
// had they started on a peer (dialer.NewTransport, grpcdialer.NewClient).
// The board's self-dial entry follows the dialer: it opens at the first of
// these connections to the local server once that serves (no ping). The
// clients make three calls the upgrade gate refuses until the upgrade
// completes: the HTTP client waits them out with upgrade.RetryTransport,
// the gRPC client with grpcupgrade's interceptors (workers).
func (c *controller) selfClient(ctx context.Context) {
	c.tl.log(c.name, "api clients starting: waiting for the local server (not dialling a peer)")
	home, err := dialer.NewTransport(c.dial, &http.Transport{DisableKeepAlives: true})
	if err != nil {
		c.workers.Fail(err)
		return
	}
	defer home.CloseIdleConnections()
	workers := c.calls[0]
	client := &http.Client{Transport: upgrade.RetryTransport(home, workers.notify(c), upgrade.WithClock(c.clk), upgrade.WithWake(c.up.Completed))}
	list, watch := c.calls[1], c.calls[2]
	cc, err := grpcdialer.NewClient(c.dial,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(grpcupgrade.UnaryClientInterceptor(list.notify(c), upgrade.WithClock(c.clk), upgrade.WithWake(c.up.Completed))),
		grpc.WithStreamInterceptor(grpcupgrade.StreamClientInterceptor(watch.notify(c), upgrade.WithClock(c.clk), upgrade.WithWake(c.up.Completed))))
	if err != nil {
		c.workers.Fail(err)
		return
	}
	defer cc.Close()
	health := healthpb.NewHealthClient(cc)

	// Off the allowlist, all three at once: each is refused while the
	// upgrade runs, waits the server's Retry-After out, and goes through.
	var wg sync.WaitGroup
	wg.Go(func() {
		workers.finish(httpCall(ctx, client, "POST", "http://controller/controller/workers", `{"start":"all"}`))
	})
	wg.Go(func() {
		_, err := health.List(ctx, &healthpb.HealthListRequest{})
		list.finish(err)
	})
	wg.Go(func() {
		wctx, stop := context.WithCancel(ctx)
		defer stop() // ends the stream once its first message came
		stream, err := health.Watch(wctx, &healthpb.HealthCheckRequest{})
		if err == nil {
			_, err = stream.Recv() // the interceptor retries a refused stream in here
		}
		watch.finish(err)
	})
	wg.Wait()
	var errs []error
	for _, call := range c.calls {
		if call.err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", call.name, call.err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		c.workers.Fail(err)
		return
	}
	c.tl.log(c.name, "POST /controller/workers, grpc Health/List and Health/Watch accepted once the upgrade completed")
	c.workers.Unlock()
}

// httpCall makes one request and turns the answer into an error: a
// refusal by an upgrade gate that the transport did not wait out (a failed
// upgrade), any other non-200 status, or a transport error.
func httpCall(ctx context.Context, client *http.Client, method, url, body string) error {
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body) // NewRequest sets GetBody: RetryTransport may resend it
	}
	req, err := http.NewRequestWithContext(ctx, method, url, r)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if err := upgrade.ErrorFromResponse(resp); err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s %s: %s", method, url, resp.Status)
	}
	return nil
}
