package config

import (
	"fmt"
	"net"
	"net/url"
	"path"
	"path/filepath"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// FieldError is one problem in a config: where, what, and how to fix it.
type FieldError struct {
	Path string
	Msg  string
	Hint string
}

func (e FieldError) Error() string {
	s := e.Path + ": " + e.Msg
	if e.Hint != "" {
		s += " (" + e.Hint + ")"
	}
	return s
}

// ValidationError lists every problem found, so an operator fixes them in one edit, not one per restart.
type ValidationError struct{ Problems []FieldError }

func (e *ValidationError) Error() string {
	lines := make([]string, 0, len(e.Problems)+1)
	lines = append(lines, fmt.Sprintf("invalid config: %d problem(s):", len(e.Problems)))
	for _, p := range e.Problems {
		lines = append(lines, "  "+p.Error())
	}
	return strings.Join(lines, "\n")
}

type problems []FieldError

func (p *problems) add(path, msg, hint string) { *p = append(*p, FieldError{path, msg, hint}) }

// Validate checks the defaulted config and returns a *ValidationError naming every problem, or nil.
func (c *NodeConfig) Validate() error {
	var p problems
	if c.APIVersion != APIVersion {
		p.add("apiVersion", fmt.Sprintf("%q is not supported", c.APIVersion), "set apiVersion: "+APIVersion)
	}
	if c.Kind != Kind {
		p.add("kind", fmt.Sprintf("%q is not supported", c.Kind), "set kind: "+Kind)
	}
	if c.NodeName == "" {
		p.add("nodeName", "is empty", "set nodeName or the NODE_NAME environment variable")
	}
	if !filepath.IsAbs(c.DataDir) {
		p.add("dataDir", fmt.Sprintf("%q is not an absolute path", c.DataDir), "use an absolute path such as "+DefaultDataDir)
	}
	if !filepath.IsAbs(c.Containerd.Address) {
		p.add("containerd.address", fmt.Sprintf("%q is not an absolute socket path", c.Containerd.Address), "use e.g. "+DefaultContainerdSocket)
	}
	switch c.Containerd.Backend {
	case "auto", "containerd", "embedded":
	default:
		p.add("containerd.backend", fmt.Sprintf("%q is not a backend", c.Containerd.Backend), "use auto, containerd or embedded")
	}
	if c.S3.Endpoint != "" {
		if u, err := url.Parse(c.S3.Endpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			p.add("s3.endpoint", fmt.Sprintf("%q is not an http(s) URL", c.S3.Endpoint), "use e.g. http://127.0.0.1:9000")
		}
	}
	seen := map[string]int{}
	for i, m := range c.Models {
		c.validateModel(&p, fmt.Sprintf("models[%d]", i), m)
		if j, dup := seen[m.Name]; dup && m.Name != "" {
			p.add(fmt.Sprintf("models[%d].name", i), fmt.Sprintf("%q repeats models[%d]", m.Name, j), "give each model one entry")
		}
		seen[m.Name] = i
	}
	for i, im := range c.Images {
		if strings.TrimSpace(im.Ref) == "" {
			p.add(fmt.Sprintf("images[%d].ref", i), "is empty", "name an image, e.g. docker.io/vllm/vllm-openai:v0.11.0")
		}
	}
	switch c.ImagePull.OnRemove {
	case "unpin", "keep", "remove":
	default:
		p.add("imagePull.onRemove", fmt.Sprintf("%q is not a policy", c.ImagePull.OnRemove), "use unpin, keep or remove")
	}
	positive(&p, "imagePull.concurrency", c.ImagePull.Concurrency)
	positive(&p, "weights.concurrency", c.Weights.Concurrency)
	nonNegative(&p, "weights.budget", c.Weights.Budget)
	nonNegative(&p, "weights.bandwidthLimit", c.Weights.BandwidthLimit)
	nonNegative(&p, "compileCache.budget", c.CompileCache.Budget)
	if cs := c.Weights.ChunkSize.Value(); cs < 1<<20 || cs > 1<<30 {
		p.add("weights.chunkSize", fmt.Sprintf("%s is outside 1Mi..1Gi", c.Weights.ChunkSize.String()), "use e.g. 16Mi")
	}
	if c.CompileCache.Remote != "" {
		if _, _, err := ParseS3URL(c.CompileCache.Remote); err != nil {
			p.add("compileCache.remote", err.Error(), "use s3://bucket/prefix")
		}
	}
	positive(&p, "phases.keep", c.Phases.Keep)
	if _, _, err := net.SplitHostPort(c.API.Listen); err != nil {
		p.add("api.listen", fmt.Sprintf("%q is not host:port", c.API.Listen), "use e.g. :9400 or 127.0.0.1:9400")
	}
	if filepath.IsAbs(c.DataDir) && !filepath.IsAbs(c.API.Socket) { // a relative dataDir is reported once, above
		p.add("api.socket", fmt.Sprintf("%q is not an absolute path", c.API.Socket), "leave it empty for <dataDir>/warmd.sock")
	}
	if len(p) == 0 {
		return nil
	}
	return &ValidationError{Problems: p}
}

func (c *NodeConfig) validateModel(p *problems, at string, m Model) {
	if m.Name == "" {
		p.add(at+".name", "is empty", "use the Hugging Face id, e.g. Qwen/Qwen2.5-7B-Instruct")
	} else if strings.Count(m.Name, "/") > 1 || strings.ContainsAny(m.Name, " \\:") || strings.Contains(m.Name, "..") {
		p.add(at+".name", fmt.Sprintf("%q is not an org/name model id", m.Name), "use the Hugging Face id, e.g. Qwen/Qwen2.5-7B-Instruct")
	}
	switch {
	case m.Source == "":
		p.add(at+".source", "is empty", "use s3://bucket/prefix/ or file:///path/")
	case strings.HasPrefix(m.Source, "s3://"):
		if _, _, err := ParseS3URL(m.Source); err != nil {
			p.add(at+".source", err.Error(), "use s3://bucket/prefix/")
		}
	case strings.HasPrefix(m.Source, "file://"):
		if u, err := url.Parse(m.Source); err != nil || !path.IsAbs(u.Path) || u.Host != "" {
			p.add(at+".source", fmt.Sprintf("%q is not a file:///absolute/path URL", m.Source), "use file:///path/ (three slashes)")
		}
	default:
		p.add(at+".source", fmt.Sprintf("%q: scheme must be s3 or file", m.Source), "use s3://bucket/prefix/ or file:///path/")
	}
	if strings.ContainsAny(m.Revision, "/\\ ") || m.Revision == "." || m.Revision == ".." {
		p.add(at+".revision", fmt.Sprintf("%q cannot name a snapshot dir", m.Revision), "use a commit hash or a ref such as main")
	}
	if m.TensorParallelSize < 1 {
		p.add(at+".tensorParallelSize", fmt.Sprintf("%d is below 1", m.TensorParallelSize), "use 1, 2, 4 or 8")
	}
	if m.NodeSelector != nil {
		if _, err := metav1.LabelSelectorAsSelector(m.NodeSelector); err != nil {
			p.add(at+".nodeSelector", err.Error(), "see kubectl explain pod.spec.affinity for selector syntax")
		}
	}
	for j, g := range append(append([]string{}, m.Include...), m.Exclude...) {
		if _, err := path.Match(g, ""); err != nil {
			p.add(fmt.Sprintf("%s.include/exclude[%d]", at, j), fmt.Sprintf("%q is not a glob", g), "use patterns like *.safetensors")
		}
	}
}

// ParseS3URL splits s3://bucket/prefix into bucket and prefix (prefix without a leading slash).
func ParseS3URL(s string) (bucket, prefix string, err error) {
	u, err := url.Parse(s)
	if err != nil || u.Scheme != "s3" {
		return "", "", fmt.Errorf("%q is not an s3:// URL", s)
	}
	if u.Host == "" {
		return "", "", fmt.Errorf("%q has no bucket", s)
	}
	return u.Host, strings.TrimPrefix(u.Path, "/"), nil
}

func positive(p *problems, at string, v int) {
	if v < 1 {
		p.add(at, fmt.Sprintf("%d is below 1", v), "leave it out for the default")
	}
}

func nonNegative(p *problems, at string, q resource.Quantity) {
	if q.Sign() < 0 {
		p.add(at, fmt.Sprintf("%s is negative", q.String()), "use 0 for no limit")
	}
}
