package seed_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"warmd.io/warmd/internal/testenv/kubeenv"
	"warmd.io/warmd/pkg/peer/seed"
)

const ns = "warmd"

// TestLease runs on a real kube-apiserver: it decides who wins a create or an update from a version.
func TestLease(t *testing.T) {
	kube := kubeenv.Start(t)
	ctx := context.Background()
	if _, err := kube.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}

	// Eight nodes start at once: exactly one holds the Lease, and every other names it.
	t.Run("one seed among several starters", func(t *testing.T) {
		var wg sync.WaitGroup
		held := make([]bool, 8)
		holders := make([]string, 8)
		errs := make([]error, 8)
		start := make(chan struct{})
		for i := range held {
			l := seed.New(kube.Client, ns, "acme/Llama-70B", "r1", fmt.Sprintf("node-%d", i), time.Minute)
			wg.Go(func() {
				<-start
				held[i], holders[i], errs[i] = l.Acquire(ctx)
			})
		}
		close(start)
		wg.Wait()
		winners := 0
		winner := ""
		for i := range held {
			if errs[i] != nil {
				t.Fatalf("node-%d: %v", i, errs[i])
			}
			if held[i] {
				winners++
				winner = fmt.Sprintf("node-%d", i)
			}
		}
		if winners != 1 {
			t.Fatalf("%d nodes hold the Lease (%v); want exactly one", winners, held)
		}
		// Everyone asking again sees the same holder (those that lost the create race learn it now).
		for i := range held {
			l := seed.New(kube.Client, ns, "acme/Llama-70B", "r1", fmt.Sprintf("node-%d", i), time.Minute)
			got, by, err := l.Acquire(ctx)
			if err != nil || got != (by == fmt.Sprintf("node-%d", i)) || by != winner {
				t.Errorf("node-%d: held %v, holder %q, %v; want holder %s", i, got, by, err, winner)
			}
		}
		lease, err := kube.Client.CoordinationV1().Leases(ns).Get(ctx, seed.Name("acme/Llama-70B", "r1"), metav1.GetOptions{})
		if err != nil || lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity != winner || lease.Labels[seed.LabelPart] != "warmd" {
			t.Errorf("stored Lease %+v (%v); want holder %s, labelled part-of warmd", lease, err, winner)
		}
	})

	// The holder dies (stops renewing): the other waits while the Lease is fresh and takes it once it
	// has not changed for its duration; while the holder renews, nobody takes it.
	t.Run("taken over when the holder dies", func(t *testing.T) {
		const dur = 2 * time.Second
		a := seed.New(kube.Client, ns, "acme/takeover", "r1", "node-a", dur)
		b := seed.New(kube.Client, ns, "acme/takeover", "r1", "node-b", dur)
		if held, _, err := a.Acquire(ctx); err != nil || !held {
			t.Fatalf("node-a: held %v, %v; want the free Lease", held, err)
		}
		// a renews for 3 durations: b never gets it.
		for end := time.Now().Add(3 * dur); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
			if err := a.Renew(ctx); err != nil {
				t.Fatal(err)
			}
			if held, by, err := b.Acquire(ctx); err != nil || held || by != "node-a" {
				t.Fatalf("node-b while node-a renews: held %v, holder %q, %v", held, by, err)
			}
		}
		// a dies: b takes it once it has seen no change for the duration, not before.
		first := time.Now()
		var took time.Time
		for deadline := first.Add(4 * dur); took.IsZero(); time.Sleep(100 * time.Millisecond) {
			held, by, err := b.Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if held {
				took = time.Now()
			} else if by != "node-a" {
				t.Fatalf("holder %q, want node-a until the takeover", by)
			}
			if time.Now().After(deadline) {
				t.Fatal("node-b did not take the Lease of a dead holder within 4 durations")
			}
		}
		// b had seen the Lease last change during a's renewals, so it may take it from a duration
		// after a's last renewal: check it did not take it before a renewal could have lapsed.
		if took.Sub(first) < dur-dur/3-200*time.Millisecond {
			t.Errorf("taken %s after the holder's last renewal; want about the duration (%s)", took.Sub(first), dur)
		}
		if !b.Held() || a.Held() {
			t.Errorf("held: a %v, b %v; want b only", a.Held(), b.Held())
		}
		lease, err := kube.Client.CoordinationV1().Leases(ns).Get(ctx, seed.Name("acme/takeover", "r1"), metav1.GetOptions{})
		if err != nil || lease.Spec.LeaseTransitions == nil || *lease.Spec.LeaseTransitions != 1 {
			t.Errorf("Lease %+v (%v); want one transition", lease.Spec, err)
		}
		// a comes back: it sees b's fresh Lease and does not take it back.
		if held, by, err := a.Acquire(ctx); err != nil || held || by != "node-b" {
			t.Errorf("node-a back: held %v, holder %q, %v; want node-b's", held, by, err)
		}
	})

	// A holder that releases (its fetch ended) hands the Lease on at once, not after its duration.
	t.Run("released at once", func(t *testing.T) {
		a := seed.New(kube.Client, ns, "acme/release", "r1", "node-a", time.Hour)
		b := seed.New(kube.Client, ns, "acme/release", "r1", "node-b", time.Hour)
		if held, _, err := a.Acquire(ctx); err != nil || !held {
			t.Fatalf("node-a: held %v, %v", held, err)
		}
		if held, _, err := b.Acquire(ctx); err != nil || held {
			t.Fatalf("node-b: held %v, %v; want node-a's for an hour", held, err)
		}
		if err := a.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if held, _, err := b.Acquire(ctx); err != nil || !held {
			t.Fatalf("node-b after the release: held %v, %v; want it", held, err)
		}
		if err := a.Release(ctx); err != nil { // no longer a's: nothing happens
			t.Fatal(err)
		}
		if held, by, err := a.Acquire(ctx); err != nil || held || by != "node-b" {
			t.Errorf("node-a after its second release: held %v, holder %q, %v; want node-b's", held, by, err)
		}
	})

	t.Run("names", func(t *testing.T) {
		n := seed.Name("Meta/Llama-3.1-70B-Instruct", "main")
		if n == seed.Name("Meta/Llama-3.1-70B-Instruct", "other") || len(n) > 63 {
			t.Errorf("name %q: want one per revision, a DNS label", n)
		}
	})
}
