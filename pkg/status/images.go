package status

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"warmd.io/warmd/pkg/api"
	"warmd.io/warmd/pkg/cli"
	"warmd.io/warmd/pkg/prefetch"
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
	return nil
}

func imageState(im prefetch.ImageStatus) string {
	switch im.State {
	case prefetch.StatePulling:
		s := fmt.Sprintf("pulling layer %d/%d (%s / %s)", im.Layer, im.Layers, cli.Bytes(im.Bytes), cli.Bytes(im.TotalBytes))
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
