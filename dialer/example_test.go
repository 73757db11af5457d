package dialer_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/coldstart-go/coldstart/dialer"
	"github.com/coldstart-go/coldstart/gate"
)

// echoServer answers every line with "<name>: <line>" until ln is closed.
func echoServer(name string, ln net.Listener) {
	for {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer conn.Close()
			sc := bufio.NewScanner(conn)
			for sc.Scan() {
				fmt.Fprintf(conn, "%s: %s\n", name, sc.Text())
			}
		}()
	}
}

func ask(conn net.Conn, q string) string {
	fmt.Fprintln(conn, q)
	reply, _ := bufio.NewReader(conn).ReadString('\n')
	return strings.TrimSpace(reply)
}

// An API-caller loop for a controller agent. While its own server is not
// ready it works through a peer; the moment LocalReady closes it drops the
// peer connection and dials again, which goes to loopback.
func ExampleRoute_moveToLocal() {
	peer, _ := net.Listen("tcp", "127.0.0.1:0") // another controller, serving
	defer peer.Close()
	go echoServer("peer", peer)
	local, _ := net.Listen("tcp", "127.0.0.1:0") // this machine's controller port
	defer local.Close()
	go echoServer("local", local)

	serving := make(chan struct{}) // closed once the local server is ready
	d, err := dialer.New(dialer.Config{
		LocalPort:       local.Addr().(*net.TCPAddr).Port,
		Remote:          func() []string { return []string{peer.Addr().String()} },
		LocalReady:      serving,
		LocalReadyGrace: 20 * time.Millisecond,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	for {
		conn, route, err := d.Dial(ctx)
		if err != nil {
			fmt.Println(err) // names every address tried, wraps ctx.Err()
			return
		}
		fmt.Printf("local=%v %s\n", route.Local, ask(conn, "login"))
		if route.Local {
			conn.Close() // a real agent would serve on it until it drops, then loop
			return
		}
		go close(serving) // stands in for the local server finishing its start-up
		select {
		case <-route.LocalReady: // own server is up: move off the peer
			fmt.Println("local server ready: moving")
		case <-ctx.Done():
		}
		conn.Close()
	}
	// Output:
	// local=false peer: login
	// local server ready: moving
	// local=true local: login
}

// apiClient stands for any client that is not a bare net.Conn (TLS,
// websocket, RPC); Connect only needs it to be an io.Closer.
type apiClient struct {
	conn net.Conn
	user string
}

func (c *apiClient) Close() error { return c.conn.Close() }

// Connect dials with the same policy as Dial but builds any client type;
// every client that loses a race is closed.
func ExampleConnect() {
	srv, _ := net.Listen("tcp", "127.0.0.1:0")
	defer srv.Close()
	go echoServer("controller", srv)
	ready := make(chan struct{})
	close(ready) // the local controller is serving

	d, _ := dialer.New(dialer.Config{LocalPort: srv.Addr().(*net.TCPAddr).Port, LocalReady: ready})
	client, route, err := dialer.Connect(context.Background(), d,
		func(ctx context.Context, addr string) (*apiClient, error) {
			var nd net.Dialer
			conn, err := nd.DialContext(ctx, "tcp", addr)
			if err != nil {
				return nil, err
			}
			return &apiClient{conn: conn, user: "machine-0"}, nil
		})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer client.Close()
	fmt.Println(route.Addr == srv.Addr().String(), route.Local, ask(client.conn, "hello from "+client.user))
	// Output: true true controller: hello from machine-0
}

// A machine that runs no controller sets LocalPort 0 and PreferLocal: it
// dials its peers, shuffled, and the error of a failed Dial names each.
func ExampleDialer_Dial() {
	d, _ := dialer.New(dialer.Config{
		Policy:     dialer.PreferLocal,
		Remote:     func() []string { return []string{"192.0.2.1:17070"} },
		MinBackoff: time.Second, // one try fits in the 30 ms below
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return nil, fmt.Errorf("no route to %s", addr)
		},
	})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, _, err := d.Dial(ctx)
	fmt.Println(err)

	ctx, cancel = context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	_, _, err = d.Dial(ctx)
	fmt.Println(err)
	// Output:
	// dialer: dialing controller (prefer-local): context canceled; no address to dial
	// dialer: dialing controller (prefer-local): context deadline exceeded; tried 192.0.2.1:17070: no route to 192.0.2.1:17070
}

// A controller's own HTTP client moves home: through a peer while its own
// server is starting, then local, with no request failing on the way.
func ExampleTransport() {
	serve := func(name string, ln net.Listener) *http.Server {
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprint(w, name)
		})}
		go srv.Serve(ln)
		return srv
	}
	peerLn, _ := net.Listen("tcp", "127.0.0.1:0")
	defer serve("peer", peerLn).Close()
	localLn, _ := net.Listen("tcp", "127.0.0.1:0") // this machine's controller port

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
	tr, err := dialer.NewTransport(d, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	defer client.CloseIdleConnections()
	get := func() {
		// The host names the service; the Dialer picks the machine.
		resp, err := client.Get("http://controller/whoami")
		if err != nil {
			fmt.Println(err)
			return
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		fmt.Println("served by", string(body))
	}

	get()
	defer serve("local", localLn).Close()
	close(serving) // the idle peer connection closes; new requests go local
	get()
	// Output:
	// served by peer
	// served by local
}

// A Dialer is the "self-dial" component of a readiness board: its entry
// opens at the Dialer's first connection to this machine's controller once
// LocalReady has closed, and says meanwhile what it waits for. Nothing
// pings the local server.
func ExampleDialer_Completed() {
	ready := make(chan struct{})
	d, err := dialer.New(dialer.Config{
		LocalPort:  17071,
		Policy:     dialer.PreferLocal, // local first, even before ready
		LocalReady: ready,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, s := net.Pipe() // every address answers
			s.Close()
			return c, nil
		},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	board := gate.NewBoard(gate.BoardConfig{})
	defer board.Close()
	selfDial := board.Follow("self-dial", d)
	fmt.Println(board.Report()[0].Detail)

	conn, route, _ := d.Dial(context.Background())
	conn.Close()
	fmt.Printf("local: %t, home: %t\n", route.Local, selfDial.IsUnlocked()) // local, but not ready yet
	close(ready)
	fmt.Println(board.Report()[0].Detail)
	conn, route, _ = d.Dial(context.Background())
	conn.Close()
	<-selfDial.Unlocked()
	fmt.Printf("local: %t, home: %t\n", route.Local, selfDial.IsUnlocked())
	// Output:
	// waits for the local controller to serve
	// local: true, home: false
	// local controller serving, not dialled yet
	// local: true, home: true
}
