// Package pkg has one of each kind of name.
package pkg

const Max, min = 1, 2

var ErrX error

type Thing struct{}

func New() *Thing { return nil }

func (*Thing) Do()           {}
func (Thing) String() string { return "" }
func (*Thing) Error() string { return "" }
func (*Thing) undo()         {}
func (*inner) Exported()     {}
func (*List[T]) Len() int    { return 0 }
func helper()                {}

type inner struct{}

type List[T any] struct{}

type Waiter interface {
	Wait() error
	String() string
	internal()
}
