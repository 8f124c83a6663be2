package daemonstatus

import (
	"warmd.io/warmd/pkg/config"
	"warmd.io/warmd/pkg/state"
)

// ConfigSection is the config section of the node state: the effective config, summarized, published
// by pkg/daemon at start and on every applied reload.
var ConfigSection = state.NewKey[ConfigSummary]("config")

// ConfigSummary is the config section of the status: what an operator needs to see what the daemon
// was told, without repeating the whole file.
type ConfigSummary struct {
	NodeName    string         `json:"nodeName"`
	DataDir     string         `json:"dataDir"`
	Backend     string         `json:"imageBackend"`
	Containerd  string         `json:"containerd"`
	S3Endpoint  string         `json:"s3Endpoint,omitempty"`
	Models      []ModelSummary `json:"models"`
	Images      []string       `json:"images"`
	CacheRemote string         `json:"compileCacheRemote,omitempty"`
}

// ModelSummary names one configured model.
type ModelSummary struct {
	Name     string `json:"name"`
	Source   string `json:"source"`
	Revision string `json:"revision"`
	Image    string `json:"image,omitempty"`
}

// Summarize builds the config section from a config.
func Summarize(c *config.NodeConfig) ConfigSummary {
	s := ConfigSummary{
		NodeName: c.NodeName, DataDir: c.DataDir, Backend: c.Containerd.Backend, Containerd: c.Containerd.Address,
		S3Endpoint: c.S3.Endpoint, CacheRemote: c.CompileCache.Remote, Models: []ModelSummary{}, Images: []string{},
	}
	for _, m := range c.Models {
		s.Models = append(s.Models, ModelSummary{Name: m.Name, Source: m.Source, Revision: m.Revision, Image: m.Image})
	}
	for _, im := range c.Images {
		s.Images = append(s.Images, im.Ref)
	}
	return s
}
