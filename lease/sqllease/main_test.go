package sqllease_test

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/coldstart-go/coldstart/lease/sqllease/internal/pgtest"
)

// pg is the package's one Postgres server, started by TestMain and torn
// down at its end.
var pg *pgtest.Server

func TestMain(m *testing.M) {
	var err error
	if pg, err = pgtest.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "sqllease's tests need a PostgreSQL server:", err)
		os.Exit(1)
	}
	code := m.Run()
	pg.Stop()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}
