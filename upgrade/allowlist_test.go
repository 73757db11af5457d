package upgrade_test

import (
	"testing"

	"github.com/juju/clock/testclock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/coldstart-go/coldstart/upgrade"
)

func TestAllowlistGuardsEachCallInOneLine(t *testing.T) {
	g := upgrade.NewGate(testclock.NewClock(t0))
	al := upgrade.NewAllowlist(
		upgrade.Call{Service: "Client", Method: "FullStatus"},             // any version
		upgrade.Call{Service: "Upgrader", Version: 2, Method: "SetTools"}, // only v2
	)
	require.NoError(t, g.Enter(upgrade.RunningSteps))

	assert.NoError(t, al.Check(g, "Client", "FullStatus"))
	assert.NoError(t, al.CheckVersion(g, "Client", 7, "FullStatus"))
	assert.NoError(t, al.CheckVersion(g, "Upgrader", 2, "SetTools"))
	assert.ErrorIs(t, al.CheckVersion(g, "Upgrader", 1, "SetTools"), upgrade.ErrUpgradeInProgress)
	assert.ErrorIs(t, al.Check(g, "Upgrader", "SetTools"), upgrade.ErrUpgradeInProgress, "no version given: only any-version entries match")
	assert.ErrorIs(t, al.Check(g, "Application", "Deploy"), upgrade.ErrUpgradeInProgress)
	assert.ErrorIs(t, al.Check(g, "Client", "fullstatus"), upgrade.ErrUpgradeInProgress, "names are exact")

	g.Fail(nil)
	assert.ErrorIs(t, al.Check(g, "Application", "Deploy"), upgrade.ErrUpgradeFailed)
	assert.NoError(t, al.Check(g, "Client", "FullStatus"), "status stays available after a failure")

	require.NoError(t, g.Enter(upgrade.Checking))
	g.Complete()
	assert.NoError(t, al.Check(g, "Application", "Deploy"))
	require.NoError(t, g.Enter(upgrade.Checking))
	assert.ErrorIs(t, al.Check(g, "Application", "Deploy"), upgrade.ErrUpgradeInProgress, "evaluated per call, never cached")
}

func TestAllowlistAllows(t *testing.T) {
	al := upgrade.NewAllowlist(upgrade.Call{Service: "S", Version: 3, Method: "M"})
	assert.True(t, al.Allows("S", 3, "M"))
	assert.False(t, al.Allows("S", 0, "M"))
	assert.False(t, al.Allows("S", 4, "M"))
	assert.False(t, upgrade.NewAllowlist().Allows("S", 3, "M"))

	var none *upgrade.Allowlist // allows nothing, and does not panic
	assert.False(t, none.Allows("S", 3, "M"))
	g := upgrade.NewGate(testclock.NewClock(t0))
	assert.ErrorIs(t, none.Check(g, "S", "M"), upgrade.ErrUpgradeInProgress)
	g.Complete()
	assert.NoError(t, none.Check(g, "S", "M"))
}

func TestNewAllowlistPanicsOnATypo(t *testing.T) {
	for _, c := range []upgrade.Call{{Method: "M"}, {Service: "S"}, {Service: "S", Method: "M", Version: -1}} {
		assert.Panics(t, func() { upgrade.NewAllowlist(c) }, "%+v", c)
	}
}

func TestAllowlistCheckAllocatesNothing(t *testing.T) {
	g := upgrade.NewGate(testclock.NewClock(t0))
	al := upgrade.NewAllowlist(upgrade.Call{Service: "Client", Method: "FullStatus"})
	assert.Zero(t, testing.AllocsPerRun(100, func() {
		_ = al.Check(g, "Client", "FullStatus")
		_ = al.CheckVersion(g, "Application", 3, "Deploy")
	}))
}
