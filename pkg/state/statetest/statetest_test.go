package statetest

import (
	"testing"

	"warmd.io/warmd/pkg/state"
)

func TestWaitReturnsTheFirstAcceptedValue(t *testing.T) {
	s := state.New(nil)
	k := state.NewKey[int]("n")
	go func() {
		for i := 1; i <= 5; i++ {
			k.Publish(s, i)
		}
	}()
	if got := Wait(t, s, k, func(n int) bool { return n >= 5 }); got != 5 {
		t.Errorf("Wait = %d, want 5", got)
	}
	// Already true: no publish needed.
	if got := Wait(t, s, k, func(n int) bool { return n == 5 }); got != 5 {
		t.Errorf("Wait = %d, want 5", got)
	}
}
