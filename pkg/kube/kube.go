// Package kube is warmd's narrow Kubernetes client: the resources the node daemon, the extender and
// `warmd status` read and write (Nodes, Pods, Events, Namespaces, Leases, TokenReviews) and nothing
// else, on a scheme that registers only their API groups.
//
// Why not client-go's Clientset: it registers every built-in API group (k8s.io/client-go/kubernetes/scheme)
// and so links their types, typed clients, informers, listers and apply configurations, about a
// third of warmd's binary. The daemon runs on every GPU node for days, and an idle process keeps its
// binary's pages resident (issue 26 item 7, `make bench-idle`): what it never calls should not be
// there. The method names follow client-go's (c.CoreV1().Nodes().Get(…)), so call sites read as
// client-go's do, and the requests are the ones client-go's generated clients send, over client-go's
// REST client (pkg/kube/resource.go).
package kube

import (
	"fmt"
	"net/http"
	goruntime "runtime"

	authnv1 "k8s.io/api/authentication/v1"
	coordv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"

	"warmd.io/warmd/pkg/version"
)

// Scheme holds the API types this client reads and writes: core/v1, coordination.k8s.io/v1 and
// authentication.k8s.io/v1. Event recorders take it to build object references.
var Scheme = runtime.NewScheme()

var (
	codecs         = serializer.NewCodecFactory(Scheme)
	parameterCodec = runtime.NewParameterCodec(Scheme)
)

func init() {
	utilruntime.Must(corev1.AddToScheme(Scheme))
	utilruntime.Must(coordv1.AddToScheme(Scheme))
	utilruntime.Must(authnv1.AddToScheme(Scheme))
	metav1.AddToGroupVersion(Scheme, schema.GroupVersion{Version: "v1"})
}

// Interface is the API warmd uses, grouped as client-go's Clientset groups it.
type Interface interface {
	CoreV1() CoreV1
	CoordinationV1() CoordinationV1
	AuthenticationV1() AuthenticationV1
}

// CoreV1 is the core group's resources warmd uses.
type CoreV1 interface {
	Nodes() *Nodes
	Pods(namespace string) *Pods
	Events(namespace string) *Events
	Namespaces() *Namespaces
}

// CoordinationV1 is coordination.k8s.io/v1: the seed's and the extender's Leases.
type CoordinationV1 interface {
	Leases(namespace string) *Leases
}

// AuthenticationV1 is authentication.k8s.io/v1: the peer server's TokenReviews.
type AuthenticationV1 interface {
	TokenReviews() *TokenReviews
}

// The typed clients of the resources warmd uses (pkg/kube/resource.go).
type (
	// Nodes reads, watches and applies Nodes (labels, annotations, the WarmdReady condition).
	Nodes = NodeResource
	// Pods reads and watches Pods (tests also create them).
	Pods = ListResource[*corev1.Pod, *corev1.PodList]
	// Events lists Events and lets the event recorder write them.
	Events = ListResource[*corev1.Event, *corev1.EventList]
	// Namespaces creates the namespaces tests run in.
	Namespaces = ListResource[*corev1.Namespace, *corev1.NamespaceList]
	// Leases reads and writes Leases.
	Leases = ListResource[*coordv1.Lease, *coordv1.LeaseList]
	// TokenReviews asks the API server who a bearer token is.
	TokenReviews = Resource[*authnv1.TokenReview]
)

// Client implements Interface over one HTTP client and one rate limiter shared by its groups, as
// client-go's Clientset does.
type Client struct {
	core, coord, authn rest.Interface
}

var _ Interface = (*Client)(nil)

// NewForConfig builds a Client from a rest.Config (pkg/kubeconfig loads one). QPS and Burst default
// to client-go's (5 and 10) and are shared by every group. The user agent, unless set, names warmd
// and its version ("warmd/v0.4.0 (linux/amd64)"), so an API server's audit log tells its requests
// apart.
func NewForConfig(c *rest.Config) (*Client, error) {
	cfg := *c
	if cfg.UserAgent == "" {
		cfg.UserAgent = UserAgent()
	}
	if cfg.RateLimiter == nil && cfg.QPS > 0 {
		if cfg.Burst <= 0 {
			return nil, fmt.Errorf("kubernetes client: burst must be positive when QPS is set")
		}
		cfg.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(cfg.QPS, cfg.Burst)
	}
	h, err := rest.HTTPClientFor(&cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	return NewForConfigAndClient(&cfg, h)
}

// UserAgent is the user agent warmd's requests carry.
func UserAgent() string {
	return fmt.Sprintf("warmd/%s (%s/%s)", version.Version, goruntime.GOOS, goruntime.GOARCH)
}

// NewForConfigAndClient builds a Client whose requests go through h.
func NewForConfigAndClient(c *rest.Config, h *http.Client) (*Client, error) {
	var cl Client
	for _, g := range []struct {
		rc      *rest.Interface
		gv      schema.GroupVersion
		apiPath string
	}{
		{&cl.core, corev1.SchemeGroupVersion, "/api"},
		{&cl.coord, coordv1.SchemeGroupVersion, "/apis"},
		{&cl.authn, authnv1.SchemeGroupVersion, "/apis"},
	} {
		cfg := *c
		gv := g.gv
		cfg.GroupVersion, cfg.APIPath = &gv, g.apiPath
		cfg.NegotiatedSerializer = rest.CodecFactoryForGeneratedClient(Scheme, codecs).WithoutConversion()
		rc, err := rest.RESTClientForConfigAndClient(&cfg, h)
		if err != nil {
			return nil, fmt.Errorf("kubernetes client for %s: %w", gv, err)
		}
		*g.rc = rc
	}
	return &cl, nil
}

// CoreV1 implements Interface.
func (c *Client) CoreV1() CoreV1 { return core{c.core} }

// CoordinationV1 implements Interface.
func (c *Client) CoordinationV1() CoordinationV1 { return coord{c.coord} }

// AuthenticationV1 implements Interface.
func (c *Client) AuthenticationV1() AuthenticationV1 { return authn{c.authn} }

type core struct{ rc rest.Interface }

func (g core) Nodes() *Nodes {
	return &Nodes{newListResource(g.rc, "nodes", "", func() *corev1.Node { return &corev1.Node{} },
		func() *corev1.NodeList { return &corev1.NodeList{} })}
}

func (g core) Pods(ns string) *Pods {
	return newListResource(g.rc, "pods", ns, func() *corev1.Pod { return &corev1.Pod{} },
		func() *corev1.PodList { return &corev1.PodList{} })
}

func (g core) Events(ns string) *Events {
	return newListResource(g.rc, "events", ns, func() *corev1.Event { return &corev1.Event{} },
		func() *corev1.EventList { return &corev1.EventList{} })
}

func (g core) Namespaces() *Namespaces {
	return newListResource(g.rc, "namespaces", "", func() *corev1.Namespace { return &corev1.Namespace{} },
		func() *corev1.NamespaceList { return &corev1.NamespaceList{} })
}

type coord struct{ rc rest.Interface }

func (g coord) Leases(ns string) *Leases {
	return newListResource(g.rc, "leases", ns, func() *coordv1.Lease { return &coordv1.Lease{} },
		func() *coordv1.LeaseList { return &coordv1.LeaseList{} })
}

type authn struct{ rc rest.Interface }

func (g authn) TokenReviews() *TokenReviews {
	return newResource(g.rc, "tokenreviews", "", func() *authnv1.TokenReview { return &authnv1.TokenReview{} })
}
