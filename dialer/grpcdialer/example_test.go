package grpcdialer_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"

	"github.com/coldstart-go/coldstart/dialer"
	"github.com/coldstart-go/coldstart/dialer/grpcdialer"
	"github.com/coldstart-go/coldstart/gate"
	"github.com/coldstart-go/coldstart/listener"
)

// HTTP and gRPC on one listener.Listener, both ports: an http.Server that
// also speaks HTTP/2 without TLS (h2c, which is how a gRPC client talks
// over plain TCP) hands requests with a gRPC content type to grpc-go's
// ServeHTTP and everything else to the HTTP mux. With TLS, set
// Protocols.SetHTTP2 instead and serve with ServeTLS; the split is the
// same. (grpc.Server.ServeHTTP runs gRPC on net/http's HTTP/2 server, not
// grpc-go's own; grpc-go marks it experimental and says some features and
// performance differ. A process that needs grpc-go's transport serves gRPC
// on a listener of its own.)
//
// The agent side: dialer.Transport for HTTP and grpcdialer.NewClient for
// gRPC, both through one Dialer, both moving home when LocalReady closes.
// The Dialer, made for the listener's controller port, is the self-dial
// entry of the readiness board, and the API port opens once it has: no
// goroutine, gate or ping of ours.
func Example_httpAndGRPCOnOneListener() {
	ln, err := listener.New(listener.Config{
		ControllerAddr: "127.0.0.1:0",
		APIAddr:        "127.0.0.1:0",
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer ln.Close()

	grpcSrv := grpc.NewServer()
	healthpb.RegisterHealthServer(grpcSrv, health.NewServer())
	mux := http.NewServeMux()
	mux.HandleFunc("/port", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s over %s", listener.PortFromContext(r.Context()), r.Proto)
	})
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true) // h2c with prior knowledge, as gRPC clients speak it
	srv := &http.Server{
		Protocols:   &protocols,
		ConnContext: listener.ConnContext,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.ProtoMajor == 2 && strings.HasPrefix(r.Header.Get("Content-Type"), "application/grpc") {
				grpcSrv.ServeHTTP(w, r)
				return
			}
			mux.ServeHTTP(w, r)
		}),
	}
	go srv.Serve(ln)
	defer srv.Close()

	// This machine's own API client: its local server is serving already.
	serving := make(chan struct{})
	close(serving)
	d, err := dialer.New(dialer.Config{
		LocalPort:  ln.Addr().(*net.TCPAddr).Port,
		LocalReady: serving,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	board := gate.NewBoard(gate.BoardConfig{})
	defer board.Close()
	stable := gate.AllOf("stable", board.Follow("self-dial", d))
	if err := ln.OpenAPIWhen("stable", stable.Unlocked()); err != nil {
		fmt.Println(err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	tr, err := dialer.NewTransport(d, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Get("http://controller/port")
	if err != nil {
		fmt.Println(err)
		return
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	fmt.Println("http:", string(body))

	cc, err := grpcdialer.NewClient(d, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cc.Close()
	hc, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("grpc:", hc.GetStatus())

	// The agents' port, open once the first call moved the Dialer home.
	<-ln.Completed()
	agent, err := grpc.NewClient(ln.APIAddr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer agent.Close()
	hc, err = healthpb.NewHealthClient(agent).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("grpc on the api port:", hc.GetStatus())
	// Output:
	// http: controller over HTTP/1.1
	// grpc: SERVING
	// grpc on the api port: SERVING
}

// A controller's own gRPC client: through a peer until its own server is
// serving, then home, on the same ClientConn.
func ExampleNewClient() {
	peerLn, _ := net.Listen("tcp", "127.0.0.1:0")
	peerSrv := grpc.NewServer()
	healthpb.RegisterHealthServer(peerSrv, health.NewServer())
	go peerSrv.Serve(peerLn)
	defer peerSrv.Stop()
	localLn, _ := net.Listen("tcp", "127.0.0.1:0")
	local := grpc.NewServer()
	healthpb.RegisterHealthServer(local, health.NewServer())
	defer local.Stop()

	serving := make(chan struct{}) // closed once the local server serves
	d, err := dialer.New(dialer.Config{
		LocalPort:       localLn.Addr().(*net.TCPAddr).Port,
		Remote:          func() []string { return []string{peerLn.Addr().String()} },
		LocalReady:      serving,
		LocalReadyGrace: 10 * time.Millisecond,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	cc, err := grpcdialer.NewClient(d, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	check := func() {
		var p peer.Peer
		_, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Peer(&p))
		switch {
		case err != nil:
			fmt.Println(err)
		case p.Addr.String() == peerLn.Addr().String():
			fmt.Println("served by the peer")
		case p.Addr.String() == localLn.Addr().String():
			fmt.Println("served locally")
		}
	}
	check()
	go local.Serve(localLn)
	// The move is asynchronous: an RPC sent at the very moment LocalReady
	// closes may still go to the peer. The ClientConn leaves READY when it
	// moves; wait for that (bounded, in case it is READY again already).
	for s := cc.GetState(); s != connectivity.Ready; s = cc.GetState() {
		cc.WaitForStateChange(ctx, s) // the state is published just after the RPC
	}
	close(serving)
	wait, stop := context.WithTimeout(ctx, time.Second)
	cc.WaitForStateChange(wait, connectivity.Ready)
	stop()
	check()
	// Output:
	// served by the peer
	// served locally
}
