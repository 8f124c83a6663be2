// Package config owns warmd's NodeConfig: its types, the defaults (filled in one place, Default),
// strict loading (unknown fields are errors) and Validate, which reports every problem at once with
// a field path and a hint. It does not own what the parts do with the config.
//
// The file is a ConfigMap mounted into the DaemonSet; Watch (watch.go) reloads it on change.
package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"sigs.k8s.io/yaml"
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
	// from the downward API), else the host name.
	NodeName string `json:"nodeName,omitempty"`
	// DataDir holds everything warmd keeps on the node. Default /var/lib/warmd.
	DataDir string `json:"dataDir,omitempty"`

	Containerd Containerd `json:"containerd,omitempty"`
	S3         S3         `json:"s3,omitempty"`
	// Models are the models to keep warm on the nodes their selector picks.
	Models []Model `json:"models,omitempty"`
	// Images are extra images to keep warm on every node (each model's own image is kept too).
	Images       []Image      `json:"images,omitempty"`
	ImagePull    ImagePull    `json:"imagePull,omitempty"`
	Weights      Weights      `json:"weights,omitempty"`
	CompileCache CompileCache `json:"compileCache,omitempty"`
	Phases       Phases       `json:"phases,omitempty"`
	Readiness    Readiness    `json:"readiness,omitempty"`
	GPU          GPU          `json:"gpu,omitempty"`
	API          API          `json:"api,omitempty"`
}

// Load reads, strictly decodes, defaults and validates the config file at path. A file that does not
// validate returns a *ValidationError listing every problem.
func Load(path string) (*NodeConfig, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	return Parse(data)
}

// Parse is Load for bytes already read.
func Parse(data []byte) (*NodeConfig, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, errors.New("config is empty: want a NodeConfig document (apiVersion: warmd.io/v1alpha1, kind: NodeConfig)")
	}
	var c NodeConfig
	if err := yaml.UnmarshalStrict(data, &c); err != nil {
		return nil, fmt.Errorf("decode config: %w (check the field names against docs/operations.md or `warmd run --help`)", cleanYAMLError(err))
	}
	c.Default()
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return &c, nil
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
