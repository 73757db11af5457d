package listener_test

import (
	"log"
	"log/slog"
	"os"

	"github.com/coldstart-go/coldstart/listener"
)

// exampleLogger writes slog's text format to stdout without the time and
// the kernel-chosen addresses, so that the example's output is stable.
func exampleLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			switch a.Key {
			case slog.TimeKey:
				return slog.Attr{}
			case "addr":
				return slog.String("addr", "127.0.0.1:…")
			}
			return a
		},
	}))
}

// With a Logger, each port's transitions are a record; connections are
// only counted (Report) and logged as counts per interval.
func ExampleConfig_logger() {
	l, err := listener.New(listener.Config{
		ControllerAddr: "127.0.0.1:0",
		APIAddr:        "127.0.0.1:0",
		Logger:         exampleLogger(),
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := l.OpenAPI(); err != nil {
		log.Fatal(err)
	}
	_ = l.CloseAPI()
	_ = l.Close()
	// Output:
	// level=INFO msg="port bound" port=controller addr=127.0.0.1:…
	// level=INFO msg="port opened" port=controller addr=127.0.0.1:…
	// level=INFO msg="port bound" port=api addr=127.0.0.1:…
	// level=INFO msg="port opened" port=api addr=127.0.0.1:…
	// level=INFO msg="port closed" port=api addr=127.0.0.1:…
	// level=INFO msg="port closed" port=controller addr=127.0.0.1:…
}
