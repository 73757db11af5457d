package sdnotify_test

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/coldstart-go/coldstart/gate"
	"github.com/coldstart-go/coldstart/gate/sdnotify"
)

// detailed is a Waiter that says what it does, as a Follow component would.
type detailed struct {
	*gate.Lock
	detail string
}

func (d detailed) Detail() string { return d.detail }

// No name, Detail or cause on a board makes STATUS= more than one line of
// at most 1 KiB of UTF-8: a newline in it would end the assignment and let
// the text write one of its own (READY=1, WATCHDOG=1) to systemd.
func FuzzStatusLine(f *testing.F) {
	f.Add("api-port", "running upgrade steps", "no quorum")
	f.Add("x\nREADY=1", "d\nWATCHDOG=1", "c\r\nSTOPPING=1")
	f.Add("\xff\xfe", "\u2028", strings.Repeat("é", 700))
	f.Fuzz(func(t *testing.T, name, detail, cause string) {
		board := gate.NewBoard(gate.BoardConfig{})
		defer board.Close()
		board.Add(name, detailed{gate.New(name), detail})
		failed := gate.New(name + "-2")
		failed.Fail(errors.New(cause))
		board.Add(name+"-2", failed)
		board.Add(detail, gate.New(detail))
		line := sdnotify.StatusLine(board.Report())
		if strings.ContainsAny(line, "\n\r") || len(line) > 1024 || !utf8.ValidString(line) {
			t.Fatalf("STATUS=%q: not one line of at most 1 KiB of UTF-8", line)
		}
	})
}
