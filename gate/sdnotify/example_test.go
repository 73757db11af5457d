package sdnotify_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/juju/clock/testclock"

	"github.com/coldstart-go/coldstart/gate"
	"github.com/coldstart-go/coldstart/gate/sdnotify"
)

func ExampleRun() {
	// Play systemd: the notify socket a unit of Type=notify is given.
	dir, _ := os.MkdirTemp("", "sd")
	defer os.RemoveAll(dir)
	systemd, _ := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: filepath.Join(dir, "notify"), Net: "unixgram"})
	defer systemd.Close()
	os.Setenv("NOTIFY_SOCKET", filepath.Join(dir, "notify"))
	defer os.Unsetenv("NOTIFY_SOCKET")
	read := func() {
		buf := make([]byte, 4096)
		n, _ := systemd.Read(buf)
		fmt.Printf("%q\n", buf[:n])
	}

	clk := testclock.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	stop := make(chan struct{}) // closed on SIGTERM
	board := gate.NewBoard(gate.BoardConfig{Clock: clk, Drain: stop})
	defer board.Close()
	stable := gate.New("stable")
	board.Add("stable", stable)

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() {
		done <- sdnotify.Run(ctx, sdnotify.Config{Board: board, Ready: stable, Clock: clk})
	}()
	read()
	stable.Unlock()
	read()
	close(stop)
	read()
	cancel()
	fmt.Println(<-done)
	// Output:
	// "STATUS=waiting on stable (0s); 0 open"
	// "READY=1\nSTATUS=1 open"
	// "STOPPING=1\nSTATUS=waiting on draining (0s); 1 open"
	// <nil>
}
