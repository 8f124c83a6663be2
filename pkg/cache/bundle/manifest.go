package bundle

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// ParseManifest decodes and checks a manifest (the one inside a bundle, or the copy published next
// to it in the bucket). It is strict: unknown fields, trailing data, a newer schema, unsafe or
// duplicate paths, unknown entry types, sizes that do not add up to Bytes, and file digests that are
// not sha256 hex are all errors. Errors name the field and the entry's index or byte offset, never
// the document's text: a manifest is file content, and whatever reads it may be a link to a secret.
func ParseManifest(data []byte) (*Manifest, error) {
	var m Manifest
	dj := json.NewDecoder(bytes.NewReader(data))
	dj.DisallowUnknownFields()
	if err := dj.Decode(&m); err != nil {
		return nil, fmt.Errorf("%w: manifest: %w", ErrCorrupt, JSONError(err))
	}
	if _, err := dj.Token(); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w: manifest: data after the JSON object (offset %d)", ErrCorrupt, dj.InputOffset())
	}
	if m.Schema < 1 || m.Schema > Schema {
		return nil, fmt.Errorf("%w: manifest schema %d; this warmd reads 1 to %d (upgrade warmd)", ErrCorrupt, m.Schema, Schema)
	}
	if err := m.check(); err != nil {
		return nil, fmt.Errorf("%w: manifest: %w", ErrCorrupt, err)
	}
	return &m, nil
}

// Validate applies ParseManifest's checks to a manifest already decoded (a bundle record read back
// from disk, a manifest about to be trusted as Options.Expect).
func (m *Manifest) Validate() error {
	if m.Schema < 1 || m.Schema > Schema {
		return fmt.Errorf("schema %d; this warmd reads 1 to %d", m.Schema, Schema)
	}
	return m.check()
}

func (m *Manifest) check() error {
	seen := make(map[string]bool, len(m.Entries))
	var sum int64
	for i, e := range m.Entries {
		if _, err := checkName(e.Path); err != nil {
			return fmt.Errorf("entries[%d].path: %w", i, err)
		}
		if seen[e.Path] {
			return fmt.Errorf("entries[%d].path repeats an earlier entry's", i)
		}
		seen[e.Path] = true
		if e.Mode > 0o777 {
			return fmt.Errorf("entries[%d].mode %o is not a permission mode", i, e.Mode)
		}
		switch e.Type {
		case TypeFile:
			if e.Size < 0 || e.Size > DefaultMaxBytes<<4 {
				return fmt.Errorf("entries[%d].size %d is out of range", i, e.Size)
			}
			if b, err := hex.DecodeString(e.SHA256); err != nil || len(b) != 32 || strings.ToLower(e.SHA256) != e.SHA256 {
				return fmt.Errorf("entries[%d].sha256 is not 64 lowercase hex digits", i)
			}
			if e.Target != "" {
				return fmt.Errorf("entries[%d] is a file with a symlink target", i)
			}
			sum += e.Size
		case TypeDir:
			if e.Size != 0 || e.SHA256 != "" || e.Target != "" {
				return fmt.Errorf("entries[%d] is a dir with a size, digest or target", i)
			}
		case TypeSymlink:
			if err := checkLinkTarget(e.Path, e.Target); err != nil {
				return fmt.Errorf("entries[%d].target: %w", i, err)
			}
			if e.Size != 0 || e.SHA256 != "" {
				return fmt.Errorf("entries[%d] is a symlink with a size or digest", i)
			}
		default:
			return fmt.Errorf("entries[%d].type is not one of %s, %s, %s", i, TypeFile, TypeDir, TypeSymlink)
		}
	}
	if sum != m.Bytes {
		return fmt.Errorf("bytes is %d but its files add up to %d", m.Bytes, sum)
	}
	return nil
}

// JSONError rewords a decoding error so it names where the document is wrong (byte offset, our
// field) without quoting any of it: encoding/json's messages carry the offending characters and,
// for unknown fields, the document's own keys.
func JSONError(err error) error {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return fmt.Errorf("not valid JSON at byte offset %d", se.Offset)
	case errors.As(err, &te):
		if te.Field != "" {
			return fmt.Errorf("field %s has the wrong JSON type at byte offset %d (want %s)", te.Field, te.Offset, te.Type)
		}
		return fmt.Errorf("wrong JSON type at byte offset %d (want %s)", te.Offset, te.Type)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return errors.New("truncated JSON")
	case strings.HasPrefix(err.Error(), "json: unknown field"):
		return errors.New("unknown field (this warmd does not know every field of the document: upgrade warmd or fix the writer)")
	}
	return errors.New("not a valid JSON document")
}

// canonical is the manifest's JSON encoding, for comparing two manifests field by field.
func (m *Manifest) canonical() []byte {
	b, _ := json.Marshal(m)
	return b
}
