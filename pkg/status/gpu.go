package status

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"warmd.io/warmd/pkg/nvml"
)

// WriteGPU writes the GPU identity for people (`warmd gpu`; `warmd status` shows it in one line). Detection
// times are shown only when s.Detected is set (the daemon's view).
func WriteGPU(w io.Writer, s nvml.Status, now time.Time) error {
	inv := s.Inventory
	when := ""
	if !s.Detected.IsZero() {
		when = fmt.Sprintf(", detected %s ago", now.Sub(s.Detected).Truncate(time.Second))
	}
	if !inv.Present {
		fmt.Fprintf(w, "GPU: none - %s%s\n", inv.Reason, when)
		fmt.Fprintf(w, "  SKU key: %s (compile caches are not keyed or shared on this node)\n", inv.SKU)
		writeProblems(w, s)
		return nil
	}
	cache := "compile caches keyed by it"
	if !s.Cacheable {
		cache = "NOT usable for compile caches: a field that enters the key could not be read"
	}
	fmt.Fprintf(w, "GPU: %d× %s%s\n", inv.DeviceCount, strings.Join(orList(inv.Products()), " + "), when)
	fmt.Fprintf(w, "  SKU key: %s (%s)\n", inv.SKU, cache)
	fmt.Fprintf(w, "  driver %s, CUDA %s, NVML %s", orDash(inv.DriverVersion), orDash(inv.CUDADriverVersion), orDash(inv.NVMLVersion))
	if inv.Clique != "" {
		fmt.Fprintf(w, ", NVLink clique %s", inv.Clique)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  GPU\tPRODUCT\tCC\tMEMORY\tARCH\tMIG\tFABRIC\tPCI BUS ID\tUUID")
	for _, d := range inv.Devices {
		fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", d.Index, orDash(d.Product), orDash(d.ComputeCapability),
			mib(d.MemoryMiB), orDash(d.Architecture), migMode(d.MIG), fabric(d.Fabric), orDash(d.PCIBusID), orDash(d.UUID))
		if d.MIG == nil {
			continue
		}
		for _, m := range d.MIG.Devices {
			fmt.Fprintf(tw, "  %d/%d\tMIG %s\t\t%s\t\tgi %d ci %d\t\t\t%s\n", d.Index, m.Index, orDash(m.Profile), mib(m.MemoryMiB),
				m.GPUInstanceID, m.ComputeInstanceID, orDash(m.UUID))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	writeProblems(w, s)
	if len(s.Labels) > 0 {
		fmt.Fprintln(w, "  labels:")
		for _, k := range slices.Sorted(maps.Keys(s.Labels)) {
			fmt.Fprintf(w, "    %s=%s\n", k, s.Labels[k])
		}
	}
	return nil
}

func writeProblems(w io.Writer, s nvml.Status) {
	if s.Stale {
		fmt.Fprintf(w, "  STALE: %s\n", s.LastError)
	}
	for _, p := range s.Inventory.Problems {
		fmt.Fprintf(w, "  problem: %s\n", p)
	}
}

func migMode(m *nvml.MIG) string {
	switch {
	case m == nil:
		return "-"
	case m.Incomplete:
		return "unreadable"
	case m.Enabled:
		return fmt.Sprintf("on (%d)", len(m.Devices))
	}
	return "off"
}

func fabric(f *nvml.Fabric) string {
	switch {
	case f == nil:
		return "-"
	case f.Attached():
		return fmt.Sprintf("clique %d", f.CliqueID)
	case f.Status != "":
		return f.State + ": " + f.Status
	}
	return f.State
}

func mib(v uint64) string {
	if v == 0 {
		return "-"
	}
	return fmt.Sprintf("%d MiB", v)
}

func orList(s []string) []string {
	if len(s) == 0 {
		return []string{"?"}
	}
	return s
}
