package listener_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"syscall"

	"github.com/coldstart-go/coldstart/gate"
	"github.com/coldstart-go/coldstart/listener"
)

// A controller serves itself on the controller port at once, and lets the
// agents in on the API port only once it is stable.
func Example() {
	l, err := listener.New(listener.Config{
		ControllerAddr: "127.0.0.1:0",
		APIAddr:        "127.0.0.1:0",
		APIRate:        2000, // agents per second; the controller port is never limited
	})
	if err != nil {
		log.Fatal(err)
	}
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "hello on the %s port", listener.PortFromContext(r.Context()))
		}),
		ConnContext: listener.ConnContext,
	}
	go srv.Serve(l)

	fmt.Println(fetch("http://" + l.Addr().String()))
	fmt.Println("API port bound:", l.APIAddr() != nil)

	// ... upgrade steps run, workers start, the controller is stable ...
	if err := l.OpenAPI(); err != nil {
		log.Fatal(err) // e.g. the API address is in use; the controller port still serves
	}
	fmt.Println(fetch("http://" + l.APIAddr().String()))

	_ = srv.Shutdown(context.Background()) // closes the listener too
	// Output:
	// hello on the controller port
	// API port bound: false
	// hello on the api port
}

// OnBound reports the ports the kernel chose for ":0", so tests need not
// hunt for free ports.
func Example_onBound() {
	l, err := listener.New(listener.Config{
		ControllerAddr: "127.0.0.1:0",
		APIAddr:        "127.0.0.1:0",
		OnBound: func(p listener.Port, addr net.Addr) {
			fmt.Printf("%s port bound: %t\n", p, addr.(*net.TCPAddr).Port != 0)
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	fmt.Println("opening the API port")
	if err := l.OpenAPI(); err != nil {
		log.Fatal(err)
	}
	// Output:
	// controller port bound: true
	// opening the API port
	// api port bound: true
}

// CloseAPI takes a controller that re-enters upgrade mode back to
// controller-only; agents already connected stay connected.
func ExampleListener_CloseAPI() {
	l, err := listener.New(listener.Config{ControllerAddr: "127.0.0.1:0", APIAddr: "127.0.0.1:0"})
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	_ = l.OpenAPI()
	addr := l.APIAddr().String()
	agent, _ := net.Dial("tcp", addr)
	defer agent.Close()
	conn, _ := l.Accept()
	defer conn.Close()

	_ = l.CloseAPI()
	_, err = net.Dial("tcp", addr)
	fmt.Println("new agent refused:", err != nil)
	r := l.Report()
	fmt.Printf("api open: %t, conns: %d, accepted: %d\n", r.API.Open, r.API.Conns, r.API.Accepted)

	_ = l.OpenAPI()
	fmt.Println("same address again:", l.APIAddr().String() == addr)
	// Output:
	// new agent refused: true
	// api open: false, conns: 1, accepted: 1
	// same address again: true
}

// OpenAPIWhen opens the API port when a channel closes (a gate's
// Unlocked(), say) with no goroutine of the caller's; Completed and
// Failed report the outcome, and Cause the bind failure, if any. Here
// the API address is taken, so the open fails where it can be seen.
func ExampleListener_OpenAPIWhen() {
	squatter, _ := net.Listen("tcp", "127.0.0.1:0") // someone else holds the API address
	l, err := listener.New(listener.Config{
		ControllerAddr: "127.0.0.1:0",
		APIAddr:        squatter.Addr().String(),
	})
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	stable := make(chan struct{}) // built once the rest of startup is
	if err := l.OpenAPIWhen("stable", stable); err != nil {
		log.Fatal(err)
	}

	close(stable) // ... the controller is stable ...
	select {
	case <-l.Completed():
		fmt.Println("api port open")
	case <-l.Failed():
		fmt.Println("api port failed:", errors.Is(l.Cause(), listener.ErrBind))
	}
	squatter.Close()
	if err := l.OpenAPI(); err == nil { // the caller may retry
		<-l.Completed()
		fmt.Println("api port open on retry")
	}
	// Output:
	// api port failed: true
	// api port open on retry
}

func fetch(url string) string {
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Get(url)
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return string(body)
}

// The API port is a gate.Component: a readiness board follows it as it is
// and, when the bind fails, says why in the listener's words.
func ExampleListener_Cause() {
	squatter, _ := net.Listen("tcp", "127.0.0.1:0") // someone else holds the API address
	defer squatter.Close()
	l, err := listener.New(listener.Config{
		ControllerAddr: "127.0.0.1:0",
		APIAddr:        squatter.Addr().String(),
	})
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	board := gate.NewBoard(gate.BoardConfig{})
	board.Follow("api-port", l)
	stable := make(chan struct{})
	if err := l.OpenAPIWhen("stable", stable); err != nil {
		log.Fatal(err)
	}
	fmt.Println(board.Report()[0].Detail)

	close(stable) // ... the controller is stable: the open fails ...
	<-l.Failed()
	e := board.Report()[0]
	fmt.Println(e.State, errors.Is(e.Err, listener.ErrBind), errors.Is(e.Err, syscall.EADDRINUSE))
	// Output:
	// opens once stable
	// failed true true
}
