package status

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"warmd.io/warmd/pkg/api"
	"warmd.io/warmd/pkg/cache"
)

func renderCache(w io.Writer, st *api.RawStatus, now time.Time) error {
	s, _, err := cache.Section.Decode(st.Sections)
	if err != nil {
		return err
	}
	return WriteCache(w, s, now)
}

// WriteCache writes the compile-cache section for people: the SKU tree and its state, one row per
// component, then what was shared, restored, refused and missed.
func WriteCache(w io.Writer, s cache.Status, now time.Time) error {
	if s.SKU == "" || s.State == cache.StateWaiting || s.State == cache.StateError {
		fmt.Fprintf(w, "COMPILE CACHES: %s", s.State)
		if s.Message != "" {
			fmt.Fprintf(w, " - %s", firstLine(s.Message))
		}
		fmt.Fprintln(w)
		return nil
	}
	remote := "node-local only"
	if s.Remote != "" {
		remote = "shared via " + s.Remote
	}
	budget := "no budget"
	if s.Budget > 0 {
		budget = "budget " + cacheSize(s.Budget)
	}
	fmt.Fprintf(w, "COMPILE CACHES for SKU %s (%s): %s, %s in %s, %s\n", s.SKU, s.State, remote, cacheSize(s.Bytes), s.Root, budget)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  COMPONENT\tFILES\tBYTES\tBUNDLES")
	for _, c := range s.Components {
		fmt.Fprintf(tw, "  %s\t%d\t%s\t%d\n", c.Name, c.Files, cacheSize(c.Bytes), c.Bundles)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "  bundles: %d local, %d in the bucket; captured %d, uploaded %d, restored %d, evicted %d, refused %d\n",
		s.BundlesLocal, s.RemoteBundles, s.Captured, s.Uploaded, s.Restored, s.Evicted, s.Rejected)
	if s.PeerBytes > 0 || s.OriginBytes > 0 || s.KeptBundles > 0 {
		fmt.Fprintf(w, "  restored bytes: %s from peers, %s from the bucket; %d peer(s) dropped; %d bundle(s) (%s) kept for peers\n",
			cacheSize(s.PeerBytes), cacheSize(s.OriginBytes), s.PeersDropped, s.KeptBundles, cacheSize(s.KeptBytes))
	}
	fmt.Fprintf(w, "  last capture %s, last restore %s; vLLM starts: %d hit, %d missed after restore\n",
		cacheAgo(s.LastCapture, now), cacheAgo(s.LastRestore, now), s.Hits, s.Misses)
	if s.Pending > 0 {
		fmt.Fprintf(w, "  %d file(s) still being written; captured once complete\n", s.Pending)
	}
	if s.LastMiss != "" {
		fmt.Fprintf(w, "  last miss: %s\n", s.LastMiss)
	}
	for _, r := range s.Refused {
		fmt.Fprintf(w, "  refused: %s\n", firstLine(r))
	}
	if s.LastError != "" {
		fmt.Fprintf(w, "  error: %s\n", firstLine(s.LastError))
	}
	return nil
}

func cacheAgo(t *time.Time, now time.Time) string {
	if t == nil {
		return "never"
	}
	return now.Sub(*t).Truncate(time.Second).String() + " ago"
}

func cacheSize(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
