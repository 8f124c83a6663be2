package config

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/distribution/reference"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"warmd.io/warmd/pkg/fsroot"
	"warmd.io/warmd/pkg/model"
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
	const shown = 100 // a file with a thousand broken entries still prints a readable message
	lines := make([]string, 0, min(len(e.Problems), shown)+2)
	lines = append(lines, fmt.Sprintf("invalid config: %d problem(s):", len(e.Problems)))
	for i, p := range e.Problems {
		if i == shown {
			lines = append(lines, fmt.Sprintf("  ... and %d more", len(e.Problems)-shown))
			break
		}
		lines = append(lines, "  "+p.Error())
	}
	return strings.Join(lines, "\n")
}

type problems []FieldError

func (p *problems) add(path, msg, hint string) { *p = append(*p, FieldError{path, msg, hint}) }

// Without returns the error less the problems at the given field paths, or nil when none remain:
// for a caller that builds a config and never uses some of it (the ad hoc `warmd prefetch weights
// SOURCE DIR` serves no API, so its derived socket path may be as long as DIR makes it).
func (e *ValidationError) Without(fields ...string) error {
	var kept []FieldError
	for _, p := range e.Problems {
		if !slices.Contains(fields, p.Path) {
			kept = append(kept, p)
		}
	}
	if len(kept) == 0 {
		return nil
	}
	return &ValidationError{Problems: kept}
}

// Validate checks the defaulted config and returns a *ValidationError naming every problem, or nil.
// Every number and duration is checked against its range (bounds.go), every path that must be
// absolute is, and every name that becomes a path passes pkg/model or pkg/fsroot's validator.
func (c *NodeConfig) Validate() error {
	var p problems
	if c.APIVersion != APIVersion {
		p.add("apiVersion", fmt.Sprintf("%s is not supported", quote(c.APIVersion)), "set apiVersion: "+APIVersion)
	}
	if c.Kind != Kind {
		p.add("kind", fmt.Sprintf("%s is not supported", quote(c.Kind)), "set kind: "+Kind)
	}
	c.validateNodeName(&p)
	p.absDir("dataDir", c.DataDir, "use an absolute path such as "+DefaultDataDir)
	if c.DataDir == "/" {
		p.add("dataDir", `"/" is the whole filesystem`, "give warmd a dir of its own such as "+DefaultDataDir)
	}
	p.socket("containerd.address", c.Containerd.Address, "use e.g. "+DefaultContainerdSocket)
	switch c.Containerd.Backend {
	case "auto", "containerd", "embedded":
	default:
		p.add("containerd.backend", fmt.Sprintf("%s is not a backend", quote(c.Containerd.Backend)), "use auto, containerd or embedded")
	}
	switch c.Containerd.Unpack {
	case "daemon", "parallel", "warmd":
	default:
		p.add("containerd.unpack", fmt.Sprintf("%s is not a way to unpack", quote(c.Containerd.Unpack)),
			"use warmd (warmd inflates and untars each layer itself, the big one on every core), daemon (the daemon unpacks, as the kubelet does) or parallel (layers side by side; containerd 2.x with a rebase-capable snapshotter)")
	}
	if !containerdNamespace.MatchString(c.Containerd.Namespace) {
		p.add("containerd.namespace", fmt.Sprintf("%s is not a containerd namespace", quote(c.Containerd.Namespace)),
			"letters and digits separated by '.', '_' or '-', at most 76 characters; the kubelet's is "+DefaultNamespace)
	}
	if !snapshotterName.MatchString(c.Containerd.Snapshotter) {
		p.add("containerd.snapshotter", fmt.Sprintf("%s is not a snapshotter name", quote(c.Containerd.Snapshotter)), "use the CRI plugin's, e.g. "+DefaultSnapshotter)
	}
	if c.S3.Endpoint != "" {
		if u, err := url.Parse(c.S3.Endpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			p.add("s3.endpoint", fmt.Sprintf("%s is not an http(s) URL", quote(c.S3.Endpoint)), "use e.g. http://127.0.0.1:9000")
		}
	}
	if !regionName.MatchString(c.S3.Region) {
		p.add("s3.region", fmt.Sprintf("%s is not a region name", quote(c.S3.Region)), "use e.g. "+DefaultRegion)
	}
	if len(c.S3.Profile) > maxStr || hasControl(c.S3.Profile) {
		p.add("s3.profile", fmt.Sprintf("%s is not a profile name", quote(c.S3.Profile)), "name a profile of the shared AWS config files")
	}
	p.intIn("s3.maxListKeys", c.S3.MaxListKeys, "")
	p.intIn("s3.maxListPages", c.S3.MaxListPages, "")
	p.durIn("s3.stallTimeout", c.S3.StallTimeout.Duration)
	models := c.Models
	if !p.countIn("models", len(models), "") {
		models = nil
	}
	for i, m := range models {
		c.validateModel(&p, fmt.Sprintf("models[%d]", i), m)
		for j := range i {
			if m.Name == "" || !model.SameModel(m.Name, models[j].Name) {
				continue
			}
			if m.Name == models[j].Name {
				p.add(fmt.Sprintf("models[%d].name", i), fmt.Sprintf("%s repeats models[%d]", quote(m.Name), j), "give each model one entry")
			} else { // they would share a compile-cache tree (model.Slug), and the Hub takes them for one repo
				p.add(fmt.Sprintf("models[%d].name", i), fmt.Sprintf("%s is models[%d] (%s) in another case", quote(m.Name), j, quote(models[j].Name)),
					"model ids are case-insensitive on the Hub; give each model one entry")
			}
			break
		}
	}
	images := c.Images
	if !p.countIn("images", len(images), "") {
		images = nil
	}
	for i, im := range images {
		p.imageRef(fmt.Sprintf("images[%d].ref", i), im.Ref)
	}
	c.validateImagePull(&p)
	p.intIn("weights.concurrency", c.Weights.Concurrency, "")
	p.qtyIn("weights.budget", c.Weights.Budget)
	p.qtyIn("weights.bandwidthLimit", c.Weights.BandwidthLimit)
	p.qtyIn("weights.chunkSize", c.Weights.ChunkSize)
	p.durIn("weights.inUseWindow", c.Weights.InUseWindow.Duration)
	switch c.Weights.PageCache {
	case "", PageCacheBypass, PageCacheKeep:
	default:
		p.add("weights.pageCache", fmt.Sprintf("%s is not a page-cache mode", quote(c.Weights.PageCache)), "use bypass (O_DIRECT, the default) or keep")
	}
	if c.CompileCache.Remote != "" {
		if _, _, err := ParseS3URL(c.CompileCache.Remote); err != nil {
			p.add("compileCache.remote", err.Error(), "use s3://bucket/prefix")
		}
	}
	p.durIn("compileCache.quietPeriod", c.CompileCache.QuietPeriod.Duration)
	p.durIn("compileCache.restoreInterval", c.CompileCache.RestoreInterval.Duration)
	p.qtyIn("compileCache.budget", c.CompileCache.Budget)
	p.qtyIn("prewarm.maxBytes", c.Prewarm.MaxBytes)
	p.intIn("prewarm.memAvailablePercent", c.Prewarm.MemAvailablePercent, "")
	p.absDir("phases.podLogDir", c.Phases.PodLogDir, "use the kubelet's pod log dir, "+DefaultPodLogDir)
	p.intIn("phases.keep", c.Phases.Keep, "")
	if c.Readiness.Kubeconfig != "" {
		p.absDir("readiness.kubeconfig", c.Readiness.Kubeconfig, "use an absolute path, or leave it empty for the in-cluster config")
	}
	p.durIn("readiness.resync", c.Readiness.Resync.Duration)
	if host, port, err := net.SplitHostPort(c.API.Listen); err != nil || !validPort(port) || hasControl(host) {
		p.add("api.listen", fmt.Sprintf("%s is not host:port", quote(c.API.Listen)), "use e.g. :9400 or 127.0.0.1:9400")
	}
	c.validatePeers(&p)
	if filepath.IsAbs(c.DataDir) { // a relative dataDir is reported once, above
		p.socket("api.socket", c.API.Socket, "leave it empty for <dataDir>/warmd.sock")
	}
	if len(p) == 0 {
		return nil
	}
	return &ValidationError{Problems: p}
}

func (c *NodeConfig) validateNodeName(p *problems) {
	switch {
	case c.NodeName == "":
		p.add("nodeName", "is empty", "set nodeName or the NODE_NAME environment variable")
	case len(c.NodeName) > maxNodeName || hasControl(c.NodeName) || strings.Contains(c.NodeName, "/"):
		p.add("nodeName", fmt.Sprintf("%s is not a node name", quote(c.NodeName)), "use the Node's name (at most 253 characters)")
	case !c.Readiness.Disabled && len(validation.IsDNS1123Subdomain(c.NodeName)) > 0:
		p.add("nodeName", fmt.Sprintf("%s is not a Node name (lower-case DNS subdomain)", quote(c.NodeName)),
			"set NODE_NAME from the downward API (spec.nodeName), or disable readiness off-cluster")
	}
}

func (c *NodeConfig) validateImagePull(p *problems) {
	ip := c.ImagePull
	switch ip.OnRemove {
	case "unpin", "keep", "remove":
	default:
		p.add("imagePull.onRemove", fmt.Sprintf("%s is not a policy", quote(ip.OnRemove)), "use unpin, keep or remove")
	}
	p.intIn("imagePull.concurrency", ip.Concurrency, "")
	p.durIn("imagePull.resolveInterval", ip.ResolveInterval.Duration)
	authFiles := ip.AuthFiles
	if !p.countIn("imagePull.authFiles", len(authFiles), "") {
		authFiles = nil
	}
	for i, f := range authFiles {
		p.absDir(fmt.Sprintf("imagePull.authFiles[%d]", i), f, "use an absolute path to a docker config.json")
	}
	p.absDir("imagePull.hostsDir", ip.HostsDir, "use containerd's hosts dir, "+DefaultHostsDir)
	plainHTTP := ip.PlainHTTP
	if !p.countIn("imagePull.plainHTTP", len(plainHTTP), "") {
		plainHTTP = nil
	}
	for i, h := range plainHTTP {
		if !validHost(h) {
			p.add(fmt.Sprintf("imagePull.plainHTTP[%d]", i), fmt.Sprintf("%s is not host or host:port", quote(h)), "use e.g. registry.local:5000")
		}
	}
}

func (c *NodeConfig) validateModel(p *problems, at string, m Model) {
	if err := model.ValidateName(m.Name); err != nil {
		p.add(at+".name", ruleOf(err), "")
	}
	switch {
	case m.Source == "":
		p.add(at+".source", "is empty", "use s3://bucket/prefix/ or file:///path/")
	case strings.HasPrefix(m.Source, "s3://"):
		if _, _, err := ParseS3URL(m.Source); err != nil {
			p.add(at+".source", err.Error(), "use s3://bucket/prefix/")
		}
	case strings.HasPrefix(m.Source, "file://"):
		u, err := url.Parse(m.Source)
		if err != nil || u.Host != "" || !path.IsAbs(u.Path) || hasControl(u.Path) {
			p.add(at+".source", fmt.Sprintf("%s is not a file:///absolute/path URL", quote(m.Source)), "use file:///path/ (three slashes)")
		} else if !isClean(u.Path) {
			p.add(at+".source", fmt.Sprintf("%s has . or .. or empty parts", quote(m.Source)), "use the clean path, "+quote("file://"+path.Clean(u.Path)+"/"))
		}
	default:
		p.add(at+".source", fmt.Sprintf("%s: scheme must be s3 or file", quote(m.Source)), "use s3://bucket/prefix/ or file:///path/")
	}
	if err := model.ValidateRevision(m.Revision); err != nil {
		p.add(at+".revision", ruleOf(err), "")
	}
	if m.Image != "" {
		p.imageRef(at+".image", m.Image)
	}
	p.intIn("tensorParallelSize", m.TensorParallelSize, at+".tensorParallelSize")
	if m.NodeSelector != nil {
		if _, err := metav1.LabelSelectorAsSelector(m.NodeSelector); err != nil {
			p.add(at+".nodeSelector", err.Error(), "see kubectl explain pod.spec.affinity for selector syntax")
		}
	}
	for _, list := range []struct {
		name  string
		globs []string
	}{{"include", m.Include}, {"exclude", m.Exclude}} {
		if !p.countIn("globs", len(list.globs), at+"."+list.name) {
			continue
		}
		for j, g := range list.globs {
			gat := fmt.Sprintf("%s.%s[%d]", at, list.name, j)
			if _, err := path.Match(g, ""); err != nil || g == "" || len(g) > maxGlobLen || hasControl(g) {
				p.add(gat, fmt.Sprintf("%s is not a glob", quote(g)), "use patterns like *.safetensors (at most 1024 bytes)")
			}
		}
	}
	if m.SHA256Manifest != "" {
		if _, err := fsroot.ParsePath(m.SHA256Manifest); err != nil {
			p.add(at+".sha256Manifest", fmt.Sprintf("%s is not a relative object name under source", quote(m.SHA256Manifest)),
				"name the object relative to source, e.g. SHA256SUMS (no leading /, no . or .. parts)")
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

// absDir requires an absolute, clean path.
func (p *problems) absDir(at, v, hint string) {
	switch {
	case v == "":
		p.add(at, "is empty", hint)
	case hasControl(v):
		p.add(at, fmt.Sprintf("%s has control characters", quote(v)), hint)
	case !filepath.IsAbs(v):
		p.add(at, fmt.Sprintf("%s is not an absolute path", quote(v)), hint)
	case !isClean(v):
		p.add(at, fmt.Sprintf("%s has . or .. or empty parts", quote(v)), "use the clean path "+quote(filepath.Clean(v)))
	}
}

// socket requires an absolute unix socket path short enough to bind.
func (p *problems) socket(at, v, hint string) {
	p.absDir(at, v, hint)
	if filepath.IsAbs(v) && len(v) > maxSocketPath {
		p.add(at, fmt.Sprintf("is %d bytes; a unix socket path may be at most %d", len(v), maxSocketPath), "use a shorter path (or a shorter dataDir)")
	}
}

func (p *problems) imageRef(at, ref string) {
	if strings.TrimSpace(ref) == "" {
		p.add(at, "is empty", "name an image, e.g. docker.io/vllm/vllm-openai:v0.11.0")
		return
	}
	if _, err := reference.ParseNormalizedNamed(ref); err != nil {
		p.add(at, fmt.Sprintf("%s is not an image reference: %v", quote(ref), err), "use e.g. docker.io/vllm/vllm-openai:v0.11.0 or name@sha256:<digest>")
	}
}

// isClean: no ".", ".." or empty components (a trailing slash is fine).
func isClean(v string) bool {
	t := strings.TrimSuffix(v, "/")
	return t == "" || filepath.Clean(t) == t
}

func hasControl(s string) bool {
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return true
		}
	}
	return false
}

func validPort(s string) bool {
	n, err := strconv.Atoi(s)
	return err == nil && n >= 0 && n <= 65535
}

func validHost(h string) bool {
	if h == "" || len(h) > maxStr || hasControl(h) || strings.ContainsAny(h, "/ ") {
		return false
	}
	if host, port, err := net.SplitHostPort(h); err == nil {
		return host != "" && validPort(port)
	}
	return !strings.Contains(h, ":") || net.ParseIP(h) != nil
}

// ruleOf renders a pkg/model error after the field path (its rule already names the fix).
func ruleOf(err error) string {
	var ne *model.NameError
	if errors.As(err, &ne) {
		if ne.Value == "" {
			return ne.Rule
		}
		return quote(ne.Value) + " " + ne.Rule
	}
	return err.Error()
}

// quote renders a config value in a message (escaped, shortened).
func quote(s string) string { return fsroot.Quote(s) }

var (
	containerdNamespace = regexp.MustCompile(`^[A-Za-z0-9]+(?:[._-][A-Za-z0-9]+)*$`)
	snapshotterName     = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)
	regionName          = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)
)
