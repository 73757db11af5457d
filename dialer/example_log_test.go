package dialer_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"net"
	"os"
	"time"

	"github.com/coldstart-go/coldstart/dialer"
)

// With a Logger, the route is a record each time it changes (a fallback
// says why); the calls are counts, in Report, never records.
func ExampleConfig_logger() {
	logger := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			switch a.Key {
			case slog.TimeKey:
				return slog.Attr{} // a stable output
			}
			return a
		},
	}))
	ready := make(chan struct{})
	d, err := dialer.New(dialer.Config{
		LocalPort:       17071,
		Remote:          func() []string { return []string{"192.0.2.1:17070"} },
		LocalReady:      ready,
		LocalReadyGrace: time.Nanosecond, // fall back at once
		Logger:          logger,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, s := net.Pipe() // every address answers
			s.Close()
			return c, nil
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	for _, serving := range []bool{false, true} {
		if serving {
			close(ready) // the local server is up: the next Dial goes home
		}
		conn, _, err := d.Dial(context.Background())
		if err != nil {
			log.Fatal(err)
		}
		conn.Close()
	}
	fmt.Printf("%+v\n", d.Report())
	// Output:
	// level=INFO msg="route chosen" route=peer addr=192.0.2.1:17070 err="dialer: local controller not ready within LocalReadyGrace 1ns"
	// level=INFO msg="route chosen" route=local addr=127.0.0.1:17071
	// {LocalReady:true LocalDials:1 PeerDials:1 Fallbacks:1 Failures:0}
}
