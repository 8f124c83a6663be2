package kube

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// NodeInformer is a shared informer of the Nodes tweak selects (nil: all), as client-go's informer
// factory builds one, without the factory (which links an informer for every API group).
func NodeInformer(c Interface, resync time.Duration, tweak func(*metav1.ListOptions)) cache.SharedIndexInformer {
	nodes := c.CoreV1().Nodes()
	return informer(&corev1.Node{}, resync, cache.Indexers{}, tweak,
		func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return nodes.List(ctx, o) },
		nodes.Watch)
}

// PodInformer is a shared informer of the Pods tweak selects in every namespace, indexed by
// namespace as the factory's is (so corev1 listers work on it).
func PodInformer(c Interface, resync time.Duration, tweak func(*metav1.ListOptions)) cache.SharedIndexInformer {
	pods := c.CoreV1().Pods(metav1.NamespaceAll)
	return informer(&corev1.Pod{}, resync, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}, tweak,
		func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return pods.List(ctx, o) },
		pods.Watch)
}

func informer(obj runtime.Object, resync time.Duration, idx cache.Indexers, tweak func(*metav1.ListOptions),
	list func(context.Context, metav1.ListOptions) (runtime.Object, error),
	watchf func(context.Context, metav1.ListOptions) (watch.Interface, error)) cache.SharedIndexInformer {
	if tweak == nil {
		tweak = func(*metav1.ListOptions) {}
	}
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			tweak(&o)
			return list(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			tweak(&o)
			return watchf(ctx, o)
		},
	}
	return cache.NewSharedIndexInformer(lw, obj, resync, idx)
}
