package k8slease

import "fmt"

// This package's errors are lease's: a definitive answer is a
// *leasestore.HeldError or *leasestore.NotHeldError; a call the API server may or
// may not have applied (a timeout, a 5xx or 429 answer, a refused or
// broken connection, a cancelled context, a 404 that is not "this Lease
// does not exist") is a *leasestore.CallError matching leasestore.ErrUnconfirmed
// that unwraps to client-go's own error, so apierrors.IsTooManyRequests(err)
// and errors.Is(err, context.DeadlineExceeded) work: do not treat it as a
// loss of the lease; keep the old deadline and retry. An invalid name is
// NotValid (github.com/juju/errors).

// storeName names the Store of namespace in its *leasestore.CallError values.
func storeName(namespace string) string { return fmt.Sprintf("k8slease namespace %q", namespace) }
