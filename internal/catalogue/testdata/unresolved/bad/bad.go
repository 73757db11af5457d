// Package bad logs a message the scanner cannot trace to a constant.
package bad

import (
	"fmt"
	"log/slog"
)

func f(logger *slog.Logger, n int) {
	logger.Info(fmt.Sprintf("%d things", n))
}
