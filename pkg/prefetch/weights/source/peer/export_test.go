package peer

import "time"

// SetRefreshEvery sets how often the daemon's fetches look their peers up again, for tests that
// cannot wait the default; it returns the old value.
func SetRefreshEvery(d time.Duration) time.Duration {
	old := refreshEvery
	refreshEvery = d
	return old
}

// SetSeedLease sets how long the daemon's seed Leases last unrenewed, for tests that cannot wait the
// default to see a dead seed replaced; it returns the old value.
func SetSeedLease(d time.Duration) time.Duration {
	old := seedLease
	seedLease = d
	return old
}
