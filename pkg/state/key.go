package state

import (
	"encoding/json"
	"fmt"
)

// Key names one section and the type its producer publishes there. The producer declares it next to
// its status type (var Section = state.NewKey[Status]("gpu")), so the name is spelled once and every
// reader gets a T back instead of type-asserting an any.
type Key[T any] struct{ name string }

// NewKey returns the key of the section called name (its key in the /v1/status JSON). Names are part
// of the wire contract: `warmd status` of another version reads them.
func NewKey[T any](name string) Key[T] { return Key[T]{name: name} }

// Name is the section's name in the snapshot and in the /v1/status JSON.
func (k Key[T]) Name() string { return k.name }

// Publish replaces the section with v. v must not be mutated afterwards: readers share it.
func (k Key[T]) Publish(s *Store, v T) { s.publish(k.name, v) }

// From returns the section of snap; ok is false while its producer has not published.
func (k Key[T]) From(snap Snapshot) (v T, ok bool) {
	v, ok = snap.Sections[k.name].(T)
	return v, ok
}

// Get returns the section's current value; ok is false while its producer has not published.
func (k Key[T]) Get(s *Store) (T, bool) { return k.From(s.Snapshot()) }

// Decode reads the section from a snapshot's JSON form (sections keyed by name, as /v1/status serves
// them); ok is false when the section is absent or null, so a client shows what it knows of a daemon of
// another version.
func (k Key[T]) Decode(sections map[string]json.RawMessage) (v T, ok bool, err error) {
	raw, ok := sections[k.name]
	if !ok || string(raw) == "null" {
		return v, false, nil
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		return v, true, fmt.Errorf("decode status section %s: %w", k.name, err)
	}
	return v, true, nil
}
