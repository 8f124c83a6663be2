// Package statetest holds the test helpers for code that publishes to a state.Store: one bounded wait
// for a typed section to reach a condition, instead of a hand-rolled poll loop per package.
package statetest

import (
	"context"
	"testing"
	"time"

	"warmd.io/warmd/pkg/state"
)

// Timeout bounds Wait. It is a bound against hangs, not an assertion on speed: the slowest caller
// pulls images from a real registry under -race on a shared CI machine.
const Timeout = 3 * time.Minute

// Wait blocks until k's section is published and cond accepts it, and returns that value. It wakes on
// every publish (no polling interval), and fails the test with the last value seen when Timeout or
// the test's context ends first.
func Wait[T any](t testing.TB, s *state.Store, k state.Key[T], cond func(T) bool) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), Timeout)
	defer cancel()
	var last T
	seen := false
	for {
		ch := s.Changed()
		if v, ok := k.Get(s); ok {
			last, seen = v, true
			if cond(v) {
				return v
			}
		}
		select {
		case <-ch:
		case <-ctx.Done():
			if !seen {
				t.Fatalf("section %s never published: %v", k.Name(), ctx.Err())
			}
			t.Fatalf("section %s never reached the condition: %v; last %+v", k.Name(), ctx.Err(), last)
			return last
		}
	}
}
