// Package config owns warmd's NodeConfig: its types, the defaults (filled in one place, Default),
// strict loading (unknown fields are errors, reported together with every other problem), the bounds
// of every number and duration (bounds.go), a size cap on the file, and Validate, which reports every
// problem at once with a field path, the rule and a hint. It does not own what the parts do with the
// config.
//
// The file is a ConfigMap mounted into the DaemonSet; Watch (watch.go) reloads it on change.
package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"syscall"
)

// APIVersion and Kind identify a NodeConfig document; both are required so a stray file is not taken
// for a config.
const (
	APIVersion = "warmd.io/v1alpha1"
	Kind       = "NodeConfig"
)

// NodeConfig is everything one warmd daemon needs to know. One document serves a whole fleet: each
// model says which nodes want it with a label selector, so the same ConfigMap can be mounted everywhere.
type NodeConfig struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`

	// NodeName is this node's name. Default: the NODE_NAME environment variable (the DaemonSet sets it
	// from the downward API), else the host name. At most 253 bytes; a DNS subdomain (the Node's name) unless
	// readiness is disabled.
	NodeName string `json:"nodeName,omitempty"`
	// DataDir holds everything warmd keeps on the node. Default /var/lib/warmd. Absolute and clean, not "/".
	DataDir string `json:"dataDir,omitempty"`

	Containerd Containerd `json:"containerd,omitempty"`
	S3         S3         `json:"s3,omitempty"`
	// Models are the models to keep warm on the nodes their selector picks. At most 1000.
	Models []Model `json:"models,omitempty"`
	// Images are extra images to keep warm on every node (each model's own image is kept too). At most 1000.
	Images       []Image      `json:"images,omitempty"`
	ImagePull    ImagePull    `json:"imagePull,omitempty"`
	Weights      Weights      `json:"weights,omitempty"`
	CompileCache CompileCache `json:"compileCache,omitempty"`
	Prewarm      Prewarm      `json:"prewarm,omitempty"`
	Phases       Phases       `json:"phases,omitempty"`
	Readiness    Readiness    `json:"readiness,omitempty"`
	GPU          GPU          `json:"gpu,omitempty"`
	API          API          `json:"api,omitempty"`
	Peers        Peers        `json:"peers,omitempty"`
}

// Load reads, decodes, defaults and validates the config file at path. A file that does not
// validate returns a *ValidationError listing every problem, unknown fields included.
func Load(path string) (*NodeConfig, error) {
	data, err := Read(path)
	if err != nil {
		return nil, err
	}
	return Parse(data)
}

// Read returns the content of the config file at path, refusing anything but a regular file of at
// most MaxFileBytes before reading it whole (a 50 MB file would cost a gigabyte to decode, and a
// FIFO or /dev/zero would never end). The daemon reads its config, at start and on every reload,
// only through Read.
func Read(path string) ([]byte, error) {
	// O_NONBLOCK: opening a FIFO must not wait for a writer; it is refused below.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("read config %s: not a regular file (%s)", path, fi.Mode().Type())
	}
	if fi.Size() > MaxFileBytes {
		return nil, tooLarge(fi.Size())
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1)) // the file may grow after Stat
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	if len(data) > MaxFileBytes {
		return nil, tooLarge(int64(len(data)))
	}
	return data, nil
}

// ErrTooLarge is what errors.Is matches for a config file over MaxFileBytes.
var ErrTooLarge = errors.New("config file too large")

func tooLarge(n int64) error {
	return fmt.Errorf("%w: %d bytes, the limit is %d (1 MiB, what a ConfigMap can hold): "+
		"a NodeConfig for a whole fleet fits in a few KiB, so check that the right file is mounted", ErrTooLarge, n, MaxFileBytes)
}

// Parse is Load for bytes already read. Every problem is reported at once: unknown fields, values of
// the wrong type and every Validate problem, in one *ValidationError.
func Parse(data []byte) (*NodeConfig, error) {
	if len(data) > MaxFileBytes {
		return nil, tooLarge(int64(len(data)))
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, errEmpty
	}
	c, decodeProblems, err := decode(data)
	if err != nil {
		return nil, err
	}
	c.Default()
	var all problems
	all = append(all, decodeProblems...)
	if err := c.Validate(); err != nil {
		var ve *ValidationError
		if !errors.As(err, &ve) {
			return nil, err
		}
		// A field whose value could not be decoded is reported once, as decoded, not again as the
		// default or zero value that took its place.
		for _, vp := range ve.Problems {
			if !under(vp.Path, decodeProblems) {
				all = append(all, vp)
			}
		}
	}
	if len(all) > 0 {
		return nil, &ValidationError{Problems: all}
	}
	return c, nil
}

// under reports whether path is, or lies below, a path some problem already names.
func under(path string, ps problems) bool {
	for _, p := range ps {
		if path == p.Path || strings.HasPrefix(path, p.Path+".") || strings.HasPrefix(path, p.Path+"[") {
			return true
		}
	}
	return false
}

// cleanYAMLError drops the library's prefix so the message starts with what is wrong.
func cleanYAMLError(err error) error {
	msg := strings.TrimPrefix(err.Error(), "error unmarshaling JSON: while decoding JSON: ")
	return errors.New(msg)
}

// LogValue makes the effective config log as one JSON value. The config holds no secrets (credentials
// come from the AWS chain), so all of it can be logged.
func (c *NodeConfig) LogValue() slog.Value {
	b, err := json.Marshal(c)
	if err != nil {
		return slog.StringValue("unprintable config: " + err.Error())
	}
	return slog.StringValue(string(b))
}
