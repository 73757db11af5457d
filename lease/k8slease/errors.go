package k8slease

import "fmt"

// This package's errors are lease's (README.md, "Errors"): an ambiguous
// answer is a *leasestore.CallError that unwraps to client-go's own error.

// storeName names the Store of namespace in its *leasestore.CallError values.
func storeName(namespace string) string { return fmt.Sprintf("k8slease namespace %q", namespace) }
