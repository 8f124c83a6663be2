package state

import (
	"encoding/json"
	"testing"
	"time"
)

type testSection struct {
	Name  string `json:"name"`
	Count int    `json:"count"`
}

var (
	testKey  = NewKey[testSection]("test")
	otherKey = NewKey[string]("other")
)

func TestKeyPublishGetFrom(t *testing.T) {
	s := New(func() time.Time { return time.Unix(0, 0) })
	if _, ok := testKey.Get(s); ok {
		t.Fatal("section present before any publish")
	}
	testKey.Publish(s, testSection{Name: "a", Count: 1})
	otherKey.Publish(s, "x")
	snap := s.Snapshot()
	if snap.Version != 2 {
		t.Errorf("version %d, want 2", snap.Version)
	}
	if v, ok := testKey.From(snap); !ok || v != (testSection{Name: "a", Count: 1}) {
		t.Errorf("From = %+v, %v", v, ok)
	}
	if v, ok := otherKey.Get(s); !ok || v != "x" {
		t.Errorf("Get = %q, %v", v, ok)
	}
	// A key of another type under the same name reads as absent, never as a wrong value.
	if _, ok := NewKey[int]("test").From(snap); ok {
		t.Error("a mistyped key read the section")
	}
}

// TestKeyDecodeReadsTheWireForm: the snapshot's JSON (what /v1/status serves) keeps the sections keyed
// by name, and Decode reads a section back from it; absent and null sections read as not there.
func TestKeyDecodeReadsTheWireForm(t *testing.T) {
	s := New(func() time.Time { return time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC) })
	testKey.Publish(s, testSection{Name: "a", Count: 3})
	raw, err := json.Marshal(s.Snapshot())
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"version":1,"updated":"2026-01-02T03:04:05Z","sections":{"test":{"name":"a","count":3}}}`
	if string(raw) != want {
		t.Fatalf("wire form\n got %s\nwant %s", raw, want)
	}
	var wire struct {
		Sections map[string]json.RawMessage `json:"sections"`
	}
	if err := json.Unmarshal(raw, &wire); err != nil {
		t.Fatal(err)
	}
	if v, ok, err := testKey.Decode(wire.Sections); !ok || err != nil || v.Count != 3 {
		t.Errorf("Decode = %+v, %v, %v", v, ok, err)
	}
	if _, ok, err := otherKey.Decode(wire.Sections); ok || err != nil {
		t.Errorf("absent section: ok %v err %v", ok, err)
	}
	if _, ok, err := otherKey.Decode(map[string]json.RawMessage{"other": json.RawMessage("null")}); ok || err != nil {
		t.Errorf("null section: ok %v err %v", ok, err)
	}
	if _, ok, err := otherKey.Decode(map[string]json.RawMessage{"other": json.RawMessage("{}")}); !ok || err == nil {
		t.Errorf("undecodable section: ok %v err %v, want an error", ok, err)
	}
}
