package main

import (
	"fmt"
	"io"
	"sync"
	"time"
)

// timeline prints one line per milestone, in milliseconds since start.
type timeline struct {
	start time.Time
	mu    sync.Mutex
	w     io.Writer
}

func newTimeline(w io.Writer) *timeline { return &timeline{start: time.Now(), w: w} }

func (t *timeline) log(who, format string, args ...any) {
	t.mu.Lock()
	defer t.mu.Unlock()
	fmt.Fprintf(t.w, "%6dms  %-7s %s\n", time.Since(t.start).Milliseconds(), who, fmt.Sprintf(format, args...))
}

// write lets f write to the timeline's writer with no line interleaved.
func (t *timeline) write(f func(w io.Writer)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	f(t.w)
}
