// Package cli is warmd's command line: every command (one file each: run, status, prefetch, cache,
// gpu, phases, extender, version), the exit-status mapping, and what the commands share for talking
// to people: the IOStreams seam (so every command's output is tested by reading a buffer), output
// formats (-o table|json|yaml) and progress. cmd/warmd only calls Main, so what a command does is
// tested here, in the package, through the same root command the binary runs.
package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"

	"sigs.k8s.io/yaml"
)

// IOStreams are a command's standard streams. Tests pass buffers; main passes the process's streams.
type IOStreams struct {
	In     io.Reader
	Out    io.Writer
	ErrOut io.Writer
}

// Standard returns the process's own streams.
func Standard() IOStreams { return IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr} }

// IsTerminal reports whether w is a character device (a TTY): colour and redraws only make sense there.
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// ExitError carries a process exit code through cobra's error path without printing twice.
type ExitError struct {
	Code int
	Err  error
}

func (e *ExitError) Error() string { return e.Err.Error() }
func (e *ExitError) Unwrap() error { return e.Err }

// PrintObject writes v as JSON or YAML; format "json" or "yaml".
func PrintObject(w io.Writer, format string, v any) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("encode output: %w", err)
	}
	switch format {
	case "json":
		_, err := w.Write(buf.Bytes())
		return err
	case "yaml":
		y, err := yaml.JSONToYAML(buf.Bytes())
		if err != nil {
			return fmt.Errorf("encode output: %w", err)
		}
		_, err = w.Write(y)
		return err
	}
	return fmt.Errorf("unknown output format %q: use one of table, json, yaml", format)
}

// CheckFormat validates an -o value against the allowed formats.
func CheckFormat(format string, allowed ...string) error {
	for _, a := range allowed {
		if format == a {
			return nil
		}
	}
	return &ExitError{Code: 2, Err: fmt.Errorf("unknown output format %q: use one of %v", format, allowed)}
}
