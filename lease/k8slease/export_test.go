package k8slease

// Internals for this module's tests.
var (
	RenewAfter = renewAfter
	IsGone     = isGone
	TermOf     = termOf
	GrantOf    = grantOf
)
