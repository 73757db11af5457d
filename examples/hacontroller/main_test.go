package main

import (
	"bytes"
	"errors"
	"flag"
	"io"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestRunHoldsEveryInvariant runs the main job at a small scale: every
// self-dial local, every agent admitted, the leader keeps its term through
// the store fault, and each API port opens only once its controller is stable.
func TestRunHoldsEveryInvariant(t *testing.T) {
	o, err := parseFlags([]string{"-agents", "300", "-api-rate", "2000", "-steps", "200ms", "-fault", "700ms"}, io.Discard)
	require.NoError(t, err)
	var out bytes.Buffer
	require.NoError(t, run(o, &out), out.String())
	s := out.String()
	m := regexp.MustCompile(`controller self-dials     (\d+)/(\d+) local \(0 to peers\)`).FindStringSubmatch(s)
	require.NotNil(t, m, s)
	assert.Equal(t, m[1], m[2], "every self-dial local")
	assert.Contains(t, s, "agents admitted           300/300")
	assert.Contains(t, s, "0 not-leader")
	assert.Contains(t, s, "ok: every invariant held")
	for _, c := range []string{"c0", "c1", "c2"} {
		assert.Contains(t, s, c+"      self-dial -> 127.0.0.1:")
	}
}

func TestFlags(t *testing.T) {
	o, err := parseFlags(nil, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, 3, o.controllers)
	assert.Equal(t, 3000, o.agents)
	assert.Equal(t, 500*time.Millisecond, o.leaseTerm)

	var help bytes.Buffer
	_, err = parseFlags([]string{"-h"}, &help)
	assert.True(t, errors.Is(err, flag.ErrHelp))
	for _, f := range []string{"-controllers", "-agents", "-api-rate", "-api-burst", "-steps", "-lease", "-fault", "-timeout"} {
		assert.Contains(t, help.String(), f)
	}

	for _, bad := range [][]string{
		{"-controllers", "0"}, {"-agents", "-1"}, {"-api-rate", "0"}, {"-lease", "0s"},
		{"-fault", "-1s"}, {"-timeout", "0s"}, {"-agent-backoff", "0s"}, {"-nonsense"},
	} {
		_, err := parseFlags(bad, io.Discard)
		assert.Error(t, err, strings.Join(bad, " "))
	}
}
