package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// Every kind of exported name counts once; unexported names, methods of
// unexported types, the standard methods and test files do not.
func TestCountFollowsTheRule(t *testing.T) {
	names, lines, err := count("testdata/pkg")
	require.NoError(t, err)
	assert.Equal(t, []string{"ErrX", "List", "List.Len", "Max", "New", "Thing", "Thing.Do", "Waiter", "Waiter.Wait"}, names)
	assert.Equal(t, 28, lines)
}
