package status

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"warmd.io/warmd/pkg/api"
	"warmd.io/warmd/pkg/prefetch"
	"warmd.io/warmd/pkg/units"
)

func renderImages(w io.Writer, st *api.RawStatus, now time.Time) error {
	s, _, err := prefetch.ImagesSection.Decode(st.Sections)
	if err != nil {
		return err
	}
	return WriteImages(w, s, now)
}

// WriteImages writes the images section for people: which backend and API path is active, then one
// row per wanted image with where it stands.
func WriteImages(w io.Writer, s prefetch.ImagesStatus, now time.Time) error {
	switch {
	case s.Backend.Name == "" && s.Error != "":
		fmt.Fprintf(w, "IMAGES: no backend - %s\n", s.Error)
	case s.Backend.Name == "":
		fmt.Fprintln(w, "IMAGES: backend starting")
	default:
		fmt.Fprintf(w, "IMAGES via %s (%s API): %s\n", s.Backend.Name, s.Backend.Path, s.Backend.Detail)
	}
	if s.Retained > 0 {
		fmt.Fprintf(w, "  %d image(s) no longer configured stay pinned (imagePull.onRemove: keep)\n", s.Retained)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  IMAGE\tMODELS\tSTATE\tPINNED\tDIGEST\tUPDATED")
	for _, im := range s.Images {
		updated := "-"
		if !im.Updated.IsZero() {
			updated = now.Sub(im.Updated).Truncate(time.Second).String() + " ago"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%v\t%s\t%s\n", im.Ref, orDash(strings.Join(im.Models, ",")), imageState(im),
			im.Pinned, imageShortDigest(im.Digest), updated)
	}
	if len(s.Images) == 0 {
		fmt.Fprintln(tw, "  (no images wanted on this node)\t\t\t\t\t")
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, im := range s.Images {
		if im.Reason != "" {
			fmt.Fprintf(w, "  %s: %s\n", im.Ref, firstLine(im.Reason))
		}
	}
	for _, im := range s.Images {
		if err := writeLayers(w, im); err != nil {
			return err
		}
	}
	return nil
}

// writeLayers shows how the layers of an image's current or last pull were unpacked: a row per
// layer while it is pulled, one line once it is ready.
func writeLayers(w io.Writer, im prefetch.ImageStatus) error {
	if len(im.Unpacked) == 0 {
		return nil
	}
	var inflated int64
	var secs float64
	byDecoder := map[string]int{}
	for _, l := range im.Unpacked {
		inflated += l.Inflated
		secs += l.Seconds
		byDecoder[orDash(cmp.Or(l.Decoder, l.By))]++
	}
	if im.State == prefetch.StateReady || im.State == prefetch.StateFailed {
		var parts []string
		for _, d := range slices.Sorted(maps.Keys(byDecoder)) {
			parts = append(parts, fmt.Sprintf("%d %s", byDecoder[d], d))
		}
		fmt.Fprintf(w, "  %s: last pull unpacked %d layer(s) (%s), %s inflated, %.1fs applying\n",
			im.Ref, len(im.Unpacked), strings.Join(parts, ", "), units.Bytes(inflated), secs)
		return nil
	}
	fmt.Fprintf(w, "  %s: %d of %d layer(s) unpacked\n", im.Ref, len(im.Unpacked), im.Layers)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "    LAYER\tSIZE\tFROM\tFETCHED AT\tBY\tDECODER\tINDEX\tINFLATED\tUNPACK")
	for _, l := range im.Unpacked {
		infl := "-" // the daemon does not say
		if l.By != "daemon" {
			infl = units.Bytes(l.Inflated)
		}
		fmt.Fprintf(tw, "    %s\t%s\t%s\t%.1fs\t%s\t%s\t%s\t%s\t%.1fs\n", imageShortDigest(l.Digest), units.Bytes(l.Bytes),
			orDash(l.From), l.FetchSeconds, l.By, orDash(l.Decoder), orDash(l.Index), infl, l.Seconds)
	}
	return tw.Flush()
}

func imageState(im prefetch.ImageStatus) string {
	switch im.State {
	case prefetch.StatePulling:
		s := fmt.Sprintf("pulling layer %d/%d (%s / %s)", im.Layer, im.Layers, units.Bytes(im.Bytes), units.Bytes(im.TotalBytes))
		if im.Attempt > 1 {
			s += fmt.Sprintf(", attempt %d", im.Attempt)
		}
		return s
	case prefetch.StateReady:
		if im.Pending != "" {
			return "ready, refreshing to " + imageShortDigest(im.Pending)
		}
		return "ready"
	case prefetch.StateFailed:
		return "FAILED"
	}
	return string(im.State)
}

func imageShortDigest(d string) string {
	if _, hex, ok := strings.Cut(d, ":"); ok && len(hex) > 12 {
		return d[:len(d)-len(hex)] + hex[:12]
	}
	return orDash(d)
}
