package config

import (
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
)

// valid returns a defaulted config that validates, for the bound tests to bend one field of.
func valid(t *testing.T) *NodeConfig {
	t.Helper()
	c, err := Parse([]byte("apiVersion: warmd.io/v1alpha1\nkind: NodeConfig\nnodeName: n1\n" +
		"models:\n- {name: org/m, source: 's3://b/m/'}\n"))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// problemAt validates c and returns the problem at path, failing if there is not exactly that one.
func problemAt(t *testing.T, c *NodeConfig, path string) *FieldError {
	t.Helper()
	err := c.Validate()
	if err == nil {
		return nil
	}
	var ve *ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("Validate: %v", err)
	}
	var found *FieldError
	for i, p := range ve.Problems {
		if p.Path != path {
			t.Errorf("unexpected problem besides %s: %v", path, p)
			continue
		}
		found = &ve.Problems[i]
	}
	return found
}

func TestIntBounds(t *testing.T) {
	set := map[string]func(*NodeConfig, int){
		"imagePull.concurrency":       func(c *NodeConfig, v int) { c.ImagePull.Concurrency = v },
		"weights.concurrency":         func(c *NodeConfig, v int) { c.Weights.Concurrency = v },
		"phases.keep":                 func(c *NodeConfig, v int) { c.Phases.Keep = v },
		"prewarm.memAvailablePercent": func(c *NodeConfig, v int) { c.Prewarm.MemAvailablePercent = v },
		"tensorParallelSize":          func(c *NodeConfig, v int) { c.Models[0].TensorParallelSize = v },
		"peers.maxPeers":              func(c *NodeConfig, v int) { c.Peers.MaxPeers = v },
		"peers.serveSlots":            func(c *NodeConfig, v int) { c.Peers.ServeSlots = v },
		"s3.maxListKeys":              func(c *NodeConfig, v int) { c.S3.MaxListKeys = v },
		"s3.maxListPages":             func(c *NodeConfig, v int) { c.S3.MaxListPages = v },
	}
	at := map[string]string{"tensorParallelSize": "models[0].tensorParallelSize"}
	for key, b := range intBounds {
		path := b.path
		if p, ok := at[key]; ok {
			path = p
		}
		for _, tc := range []struct {
			v  int
			ok bool
		}{{b.min, true}, {b.max, true}, {b.min - 1, false}, {b.max + 1, false}, {-1, false}, {2_000_000_000, false}} {
			t.Run(fmt.Sprintf("%s=%d", path, tc.v), func(t *testing.T) {
				c := valid(t)
				set[key](c, tc.v)
				fe := problemAt(t, c, path)
				if tc.ok {
					if fe != nil {
						t.Fatalf("%d refused: %v", tc.v, fe)
					}
					return
				}
				if fe == nil {
					t.Fatalf("%d accepted; want outside %d..%d", tc.v, b.min, b.max)
				}
				want := fmt.Sprintf("%d is outside %d..%d", tc.v, b.min, b.max)
				if fe.Msg != want || fe.Hint != b.why {
					t.Fatalf("problem = %v, want %q with the reason", fe, want)
				}
			})
		}
	}
	if len(set) != len(intBounds) {
		t.Fatalf("%d setters for %d int bounds", len(set), len(intBounds))
	}
}

func TestDurationBounds(t *testing.T) {
	set := map[string]func(*NodeConfig, time.Duration){
		"imagePull.resolveInterval":    func(c *NodeConfig, v time.Duration) { c.ImagePull.ResolveInterval.Duration = v },
		"weights.inUseWindow":          func(c *NodeConfig, v time.Duration) { c.Weights.InUseWindow.Duration = v },
		"compileCache.quietPeriod":     func(c *NodeConfig, v time.Duration) { c.CompileCache.QuietPeriod.Duration = v },
		"compileCache.restoreInterval": func(c *NodeConfig, v time.Duration) { c.CompileCache.RestoreInterval.Duration = v },
		"readiness.resync":             func(c *NodeConfig, v time.Duration) { c.Readiness.Resync.Duration = v },
		"peers.seedWait":               func(c *NodeConfig, v time.Duration) { c.Peers.SeedWait.Duration = v },
		"s3.stallTimeout":              func(c *NodeConfig, v time.Duration) { c.S3.StallTimeout.Duration = v },
		"peers.stallTimeout":           func(c *NodeConfig, v time.Duration) { c.Peers.StallTimeout.Duration = v },
	}
	for key, b := range durBounds {
		for _, tc := range []struct {
			v  time.Duration
			ok bool
		}{{b.min, true}, {b.max, true}, {b.min - time.Millisecond, false}, {b.max + time.Second, false},
			{-time.Hour, false}, {-time.Second, false}, {1<<63 - 1, false}} {
			t.Run(fmt.Sprintf("%s=%s", b.path, tc.v), func(t *testing.T) {
				c := valid(t)
				set[key](c, tc.v)
				fe := problemAt(t, c, b.path)
				if tc.ok != (fe == nil) {
					t.Fatalf("%s: problem %v, want ok=%v", tc.v, fe, tc.ok)
				}
				if fe != nil && (!strings.Contains(fe.Msg, "is outside "+fmtDur(b.min)+".."+fmtDur(b.max)) || fe.Hint != b.why) {
					t.Fatalf("problem %v does not name the range and why", fe)
				}
			})
		}
	}
	if len(set) != len(durBounds) {
		t.Fatalf("%d setters for %d duration bounds", len(set), len(durBounds))
	}
}

func TestQuantityBounds(t *testing.T) {
	set := map[string]func(*NodeConfig, resource.Quantity){
		"weights.budget":         func(c *NodeConfig, v resource.Quantity) { c.Weights.Budget = v },
		"weights.bandwidthLimit": func(c *NodeConfig, v resource.Quantity) { c.Weights.BandwidthLimit = v },
		"weights.chunkSize":      func(c *NodeConfig, v resource.Quantity) { c.Weights.ChunkSize = v },
		"compileCache.budget":    func(c *NodeConfig, v resource.Quantity) { c.CompileCache.Budget = v },
		"prewarm.maxBytes":       func(c *NodeConfig, v resource.Quantity) { c.Prewarm.MaxBytes = v },
		"peers.uploadLimit":      func(c *NodeConfig, v resource.Quantity) { c.Peers.UploadLimit = v },
	}
	for key, b := range qtyBounds {
		cases := []struct {
			v  string
			ok bool
		}{{b.min, true}, {b.max, true}, {"-1", false}, {"500", false}, {"1e30", false}, {"1023Ki", false}}
		if b.zeroOff {
			cases = append(cases, struct {
				v  string
				ok bool
			}{"0", true})
		}
		for _, tc := range cases {
			t.Run(b.path+"="+tc.v, func(t *testing.T) {
				c := valid(t)
				set[key](c, resource.MustParse(tc.v))
				fe := problemAt(t, c, b.path)
				if tc.ok != (fe == nil) {
					t.Fatalf("%s: problem %v, want ok=%v", tc.v, fe, tc.ok)
				}
				if fe != nil && (!strings.Contains(fe.Msg, b.min+".."+b.max) || fe.Hint != b.why) {
					t.Fatalf("problem %v does not name the range and why", fe)
				}
			})
		}
	}
	if len(set) != len(qtyBounds) {
		t.Fatalf("%d setters for %d quantity bounds", len(set), len(qtyBounds))
	}
}

func TestPathsAndNames(t *testing.T) {
	long := "/" + strings.Repeat("s", maxSocketPath)
	tests := []struct {
		name, path string
		mut        func(*NodeConfig)
		want       string
	}{
		{"relative podLogDir", "phases.podLogDir", func(c *NodeConfig) { c.Phases.PodLogDir = "var/log/pods" }, "not an absolute path"},
		{"unclean podLogDir", "phases.podLogDir", func(c *NodeConfig) { c.Phases.PodLogDir = "/var/log/../../etc" }, "use the clean path"},
		{"root dataDir", "dataDir", func(c *NodeConfig) { c.DataDir = "/"; c.API.Socket = "/warmd.sock" }, "whole filesystem"},
		{"unclean dataDir", "dataDir", func(c *NodeConfig) { c.DataDir = "/var/lib/../lib/warmd"; c.API.Socket = "/s.sock" }, "clean path"},
		{"relative hostsDir", "imagePull.hostsDir", func(c *NodeConfig) { c.ImagePull.HostsDir = "certs.d" }, "absolute"},
		{"relative authFile", "imagePull.authFiles[0]", func(c *NodeConfig) { c.ImagePull.AuthFiles = []string{"config.json"} }, "absolute"},
		{"relative kubeconfig", "readiness.kubeconfig", func(c *NodeConfig) { c.Readiness.Kubeconfig = "kc" }, "absolute"},
		{"long socket", "api.socket", func(c *NodeConfig) { c.API.Socket = long }, "at most 107"},
		{"long containerd socket", "containerd.address", func(c *NodeConfig) { c.Containerd.Address = long }, "at most 107"},
		{"relative socket", "api.socket", func(c *NodeConfig) { c.API.Socket = "warmd.sock" }, "absolute"},
		{"model name slash", "models[0].name", func(c *NodeConfig) { c.Models[0].Name = "/" }, "namespace is empty"},
		{"model name dot", "models[0].name", func(c *NodeConfig) { c.Models[0].Name = "." }, "starts or ends"},
		{"model name org/", "models[0].name", func(c *NodeConfig) { c.Models[0].Name = "org/" }, "name is empty"},
		{"model name 300", "models[0].name", func(c *NodeConfig) { c.Models[0].Name = strings.Repeat("m", 300) }, "at most 96"},
		{"model name traversal", "models[0].name", func(c *NodeConfig) { c.Models[0].Name = "../../etc" }, `more than one "/"`},
		{"revision traversal", "models[0].revision", func(c *NodeConfig) { c.Models[0].Revision = ".." }, "starts with"},
		{"revision slash", "models[0].revision", func(c *NodeConfig) { c.Models[0].Revision = "a/b" }, `contains "/"`},
		{"manifest absolute", "models[0].sha256Manifest", func(c *NodeConfig) { c.Models[0].SHA256Manifest = "/etc/shadow" }, "relative object name"},
		{"manifest traversal", "models[0].sha256Manifest", func(c *NodeConfig) { c.Models[0].SHA256Manifest = "../SHA256SUMS" }, "relative object name"},
		{"file source unclean", "models[0].source", func(c *NodeConfig) { c.Models[0].Source = "file:///srv/../etc/" }, "clean path"},
		{"image ref", "models[0].image", func(c *NodeConfig) { c.Models[0].Image = "Not A Ref" }, "not an image reference"},
		{"extra image ref", "images[0].ref", func(c *NodeConfig) { c.Images = []Image{{Ref: "busybox:bad tag!"}} }, "not an image reference"},
		{"too many models", "models", func(c *NodeConfig) {
			for i := range 1000 {
				c.Models = append(c.Models, Model{Name: fmt.Sprintf("org/m%d", i), Source: "s3://b/m/", Revision: "main", TensorParallelSize: 1})
			}
		}, "at most 1000"},
		{"too many globs", "models[0].include", func(c *NodeConfig) { c.Models[0].Include = slices.Repeat([]string{"*.bin"}, 101) }, "at most 100"},
		{"empty glob", "models[0].exclude[0]", func(c *NodeConfig) { c.Models[0].Exclude = []string{""} }, "not a glob"},
		{"namespace", "containerd.namespace", func(c *NodeConfig) { c.Containerd.Namespace = "k8s io" }, "containerd namespace"},
		{"node name", "nodeName", func(c *NodeConfig) { c.NodeName = "Node_1" }, "DNS subdomain"},
		{"node name control", "nodeName", func(c *NodeConfig) { c.NodeName = "n\n1" }, "not a node name"},
		{"listen port", "api.listen", func(c *NodeConfig) { c.API.Listen = ":99999" }, "host:port"},
		{"plain http", "imagePull.plainHTTP[0]", func(c *NodeConfig) { c.ImagePull.PlainHTTP = []string{"http://x/"} }, "host:port"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := valid(t)
			tc.mut(c)
			fe := problemAt(t, c, tc.path)
			if fe == nil || !strings.Contains(fe.Error(), tc.want) {
				t.Fatalf("problem at %s = %v, want it to say %q", tc.path, fe, tc.want)
			}
		})
	}
}

// TestBoundsDocumented keeps the struct doc comments and the bounds tables in step: every bounded
// field's comment states its range exactly as Validate enforces it.
func TestBoundsDocumented(t *testing.T) {
	fset := token.NewFileSet()
	docs := map[string]string{} // "Type.Field" -> doc comment
	for _, file := range []string{"types.go", "config.go", "peers.go"} {
		f, err := parser.ParseFile(fset, file, nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			ts, ok := n.(*ast.TypeSpec)
			if !ok {
				return true
			}
			st, ok := ts.Type.(*ast.StructType)
			if !ok {
				return true
			}
			for _, fld := range st.Fields.List {
				for _, name := range fld.Names {
					docs[ts.Name.Name+"."+name.Name] = strings.Join(strings.Fields(fld.Doc.Text()), " ")
				}
			}
			return false
		})
	}
	check := func(field, want string) {
		t.Helper()
		doc, ok := docs[field]
		if !ok {
			t.Errorf("%s: no such field", field)
		} else if !strings.Contains(doc, want) {
			t.Errorf("%s's doc comment lacks %q: %s", field, want, doc)
		}
	}
	for _, b := range intBounds {
		check(b.field, fmt.Sprintf("Range: %d..%d.", b.min, b.max))
	}
	for _, b := range durBounds {
		check(b.field, fmt.Sprintf("Range: %s..%s.", fmtDur(b.min), fmtDur(b.max)))
	}
	for _, b := range qtyBounds {
		want := fmt.Sprintf("Range: %s..%s", b.min, b.max)
		if b.zeroOff {
			want = fmt.Sprintf("Range: 0, or %s..%s", b.min, b.max)
		}
		check(b.field, want)
	}
}

// The peers section validates each field, and enabling peers without the API server is refused.
func TestPeersValidation(t *testing.T) {
	c := valid(t)
	if c.Peers.Enabled || c.Peers.Listen != DefaultPeerListen || c.Peers.Audience != DefaultPeerAudience ||
		c.Peers.MaxPeers != 4 || c.Peers.ServeSlots != 2 || c.Peers.UploadLimit.String() != "256Mi" || c.Peers.PeerUsername() != "system:serviceaccount:warmd:warmd" {
		t.Fatalf("defaults: %+v", c.Peers)
	}
	for _, tc := range []struct {
		path string
		set  func(*NodeConfig)
	}{
		{"peers.listen", func(c *NodeConfig) { c.Peers.Listen = "nope" }},
		{"peers.listen", func(c *NodeConfig) { c.Peers.Listen = c.API.Listen }},
		{"peers.listen", func(c *NodeConfig) { c.Peers.Listen = ":0" }},
		{"peers.audience", func(c *NodeConfig) { c.Peers.Audience = "a b" }},
		{"peers.tokenFile", func(c *NodeConfig) { c.Peers.TokenFile = "rel/token" }},
		{"peers.serviceAccount", func(c *NodeConfig) { c.Peers.ServiceAccount = "warmd" }},
		{"peers.serviceAccount", func(c *NodeConfig) { c.Peers.ServiceAccount = "Bad_NS/warmd" }},
		{"peers.enabled", func(c *NodeConfig) { c.Peers.Enabled = true; c.Readiness.Disabled = true }},
	} {
		c := valid(t)
		tc.set(c)
		if fe := problemAt(t, c, tc.path); fe == nil {
			t.Errorf("%s: accepted %+v", tc.path, c.Peers)
		}
	}
}
