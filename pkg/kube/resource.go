package kube

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
)

// object is what a typed client reads and writes: an API object with metadata.
type object interface {
	runtime.Object
	metav1.Object
}

// Resource is the typed client of one resource (its plural name) in one namespace, "" for a
// cluster-scoped one. Requests are the ones client-go's generated clients send: protobuf where the
// API server speaks it, options as query parameters.
//
// Why not client-go's generic client (k8s.io/client-go/gentype): it links client-go's fake-client
// machinery (k8s.io/client-go/testing and, through it, managed fields and structured merge diff),
// about 1.4 MB of code and data the daemon never runs.
type Resource[T object] struct {
	rc       rest.Interface
	resource string
	ns       string
	newObj   func() T
}

// ListResource is a Resource that can also be listed, into L.
type ListResource[T object, L runtime.Object] struct {
	*Resource[T]
	newList func() L
}

func newResource[T object](rc rest.Interface, resource, ns string, newObj func() T) *Resource[T] {
	return &Resource[T]{rc: rc, resource: resource, ns: ns, newObj: newObj}
}

func newListResource[T object, L runtime.Object](rc rest.Interface, resource, ns string, newObj func() T, newList func() L) *ListResource[T, L] {
	return &ListResource[T, L]{Resource: newResource(rc, resource, ns, newObj), newList: newList}
}

// on aims a request at this resource.
func (r *Resource[T]) on(req *rest.Request) *rest.Request {
	return req.UseProtobufAsDefaultIfPreferred(true).NamespaceIfScoped(r.ns, r.ns != "").Resource(r.resource)
}

// into runs req and decodes its answer into a new T.
func (r *Resource[T]) into(ctx context.Context, req *rest.Request) (T, error) {
	out := r.newObj()
	err := req.Do(ctx).Into(out)
	return out, err
}

// timeout is a list or watch's own server-side timeout, also bounding the client's request.
func timeout(o metav1.ListOptions) time.Duration {
	if o.TimeoutSeconds == nil {
		return 0
	}
	return time.Duration(*o.TimeoutSeconds) * time.Second
}

// Get reads the object name.
func (r *Resource[T]) Get(ctx context.Context, name string, o metav1.GetOptions) (T, error) {
	return r.into(ctx, r.on(r.rc.Get()).Name(name).VersionedParams(&o, parameterCodec))
}

// Create writes a new object and returns it as stored.
func (r *Resource[T]) Create(ctx context.Context, obj T, o metav1.CreateOptions) (T, error) {
	return r.into(ctx, r.on(r.rc.Post()).VersionedParams(&o, parameterCodec).Body(obj))
}

// Update replaces the object (its resourceVersion must be current) and returns it as stored.
func (r *Resource[T]) Update(ctx context.Context, obj T, o metav1.UpdateOptions) (T, error) {
	return r.into(ctx, r.on(r.rc.Put()).Name(obj.GetName()).VersionedParams(&o, parameterCodec).Body(obj))
}

// UpdateStatus replaces the object's status subresource.
func (r *Resource[T]) UpdateStatus(ctx context.Context, obj T, o metav1.UpdateOptions) (T, error) {
	return r.into(ctx, r.on(r.rc.Put()).Name(obj.GetName()).SubResource("status").VersionedParams(&o, parameterCodec).Body(obj))
}

// Delete deletes the object name.
func (r *Resource[T]) Delete(ctx context.Context, name string, o metav1.DeleteOptions) error {
	return r.on(r.rc.Delete()).Name(name).Body(&o).Do(ctx).Error()
}

// Patch applies a patch of type pt to the object name (or to one of its subresources).
func (r *Resource[T]) Patch(ctx context.Context, name string, pt types.PatchType, data []byte, o metav1.PatchOptions, subresources ...string) (T, error) {
	return r.into(ctx, r.on(r.rc.Patch(pt)).Name(name).SubResource(subresources...).VersionedParams(&o, parameterCodec).Body(data))
}

// Watch watches the objects o selects.
func (r *Resource[T]) Watch(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
	o.Watch = true
	return r.on(r.rc.Get()).VersionedParams(&o, parameterCodec).Timeout(timeout(o)).Watch(ctx)
}

// List lists the objects o selects.
func (r *ListResource[T, L]) List(ctx context.Context, o metav1.ListOptions) (L, error) {
	out := r.newList()
	err := r.on(r.rc.Get()).VersionedParams(&o, parameterCodec).Timeout(timeout(o)).Do(ctx).Into(out)
	return out, err
}

// NodeResource is the Nodes client: a ListResource that also applies what warmd owns of a Node
// (server-side apply, pkg/kube/apply.go).
type NodeResource struct {
	*ListResource[*corev1.Node, *corev1.NodeList]
}

// Apply server-side applies a's labels and annotations.
func (r NodeResource) Apply(ctx context.Context, a *NodeApply, o metav1.ApplyOptions) (*corev1.Node, error) {
	return r.apply(ctx, a, o)
}

// ApplyStatus server-side applies a's conditions to the status subresource.
func (r NodeResource) ApplyStatus(ctx context.Context, a *NodeApply, o metav1.ApplyOptions) (*corev1.Node, error) {
	return r.apply(ctx, a, o, "status")
}

func (r NodeResource) apply(ctx context.Context, a *NodeApply, o metav1.ApplyOptions, subresources ...string) (*corev1.Node, error) {
	if a == nil || a.GetName() == nil || *a.GetName() == "" {
		return nil, errors.New("apply: the configuration must name its Node")
	}
	body, err := json.Marshal(a)
	if err != nil {
		return nil, fmt.Errorf("apply to Node %s: %w", *a.GetName(), err)
	}
	return r.Patch(ctx, *a.GetName(), types.ApplyPatchType, body, o.ToPatchOptions(), subresources...)
}
