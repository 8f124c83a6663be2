package serve

import "time"

// SetSlotClock replaces the serving slots' clock, so a test steps the idle time instead of sleeping
// through it (and cannot be outrun by a slow machine).
func SetSlotClock(h *Handler, now func() time.Time) {
	h.slots.mu.Lock()
	defer h.slots.mu.Unlock()
	h.slots.now = now
}

// SetSpreadClock replaces the clock of the one-downloader-per-file rule (spread.go).
func SetSpreadClock(h *Handler, now func() time.Time) {
	h.spread.mu.Lock()
	defer h.spread.mu.Unlock()
	h.spread.now = now
}
