package main

import (
	"bytes"
	"context"
	"io"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRollingUpgradeFailsNoAgentCall runs the main job with -rolling at a
// small scale: each controller drains, stops and starts again on
// newVersion while the agents keep calling, and the run's own checks hold
// (no failed agent call, no self-dial to a peer after a restart, each
// group step run once by one token, the lease handed over).
func TestRollingUpgradeFailsNoAgentCall(t *testing.T) {
	o, err := parseFlags([]string{"-rolling", "-agents", "300", "-api-rate", "200", "-api-burst", "10", "-steps", "200ms",
		"-lease", "1s", "-fault", "1.4s", "-agent-every", "200ms", "-timeout", "40s"}, io.Discard)
	require.NoError(t, err)
	var out bytes.Buffer
	require.NoError(t, run(context.Background(), o, &out, nil), out.String())
	s := out.String()
	m := regexp.MustCompile(`agent calls +(\d+), 0 failed;`).FindStringSubmatch(s)
	require.NotNil(t, m, s)
	assert.NotEqual(t, "0", m[1])
	for _, step := range groupSteps {
		assert.Regexp(t, regexp.QuoteMeta(step)+` ×1 \(token \[\d+\]\)`, s)
	}
	assert.Regexp(t, `c\d +drained in .*led: handed over to c\d, leaderless`, s)
	for _, c := range []string{"c0", "c1", "c2"} {
		assert.Regexp(t, `(?m)^ +\d+ms  `+c+` +restarted on 4\.3\.0 at `, s)
		assert.Regexp(t, `(?m)^  `+c+` +drained in .* self-dials (\d+)/\d+ local`, s)
	}
	assert.Contains(t, s, "ok: every invariant held")
}

// The rolling upgrade's checks fail when what they guard breaks: a step
// run by two tokens, two steps at once, a failed call, a restarted
// controller that dialled a peer.
func TestRollingChecksCatchWhatTheyGuard(t *testing.T) {
	o, err := parseFlags([]string{"-controllers", "1"}, io.Discard)
	require.NoError(t, err)
	r := &rollReport{steps: newStepRecord()}
	endA := r.steps.begin("s1", 3)
	endB := r.steps.begin("s1", 4) // a second token while the first still runs
	endA()
	endB()
	r.calls.Add(10)
	r.failed.Add(1)
	callErr := io.ErrUnexpectedEOF
	errp := error(callErr)
	r.firstErr.Store(&errp)
	r.restarts = []restartReport{{name: "c0", selfDials: 3, local: 2, ledBefore: true}}
	problems := r.violations(o)
	for _, want := range []string{
		"1 agent calls failed, the first with: unexpected EOF",
		"c0 dialled a peer 1 times after its restart",
		"nobody took the lease over from c0",
		"upgrade step run twice: s1 by tokens [3 4]",
		"s1 (token 4) began while s1 (token 3) ran",
	} {
		assert.Contains(t, problems, want)
	}
	assert.Len(t, problems, 5)
}
