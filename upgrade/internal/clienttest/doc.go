// Package clienttest holds no code: its tests drive upgrade.Middleware with
// real HTTP clients nobody here wrote (hashicorp/go-retryablehttp, default
// policy), in a module of its own so that the root module's dependency
// list stays what the README says it is.
package clienttest
