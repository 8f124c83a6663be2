// Package embedded is the Images backend for nodes without a containerd daemon and for `make demo`:
// it pulls into a content store of its own under <dataDir>/images using containerd's library
// (plugins/content/local for the store, core/remotes/docker for the registry, core/images handlers
// for the walk), verifying every blob by digest as it commits. It keeps image records as small JSON
// files beside the store. It does not unpack layers (there is no snapshotter to serve) and does not
// decide what to pull (pkg/prefetch/images does).
package embedded

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"path/filepath"
	"sync"
	"time"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/core/remotes"
	"github.com/containerd/containerd/v2/plugins/content/local"
	"github.com/containerd/platforms"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"golang.org/x/sync/semaphore"

	"warmd.io/warmd/pkg/fsroot"
	"warmd.io/warmd/pkg/prefetch"
	"warmd.io/warmd/pkg/prefetch/images/oci"
)

// Options configure the embedded store.
type Options struct {
	// Dir is the store's root (<dataDir>/images): content/ and refs/ live under it.
	Dir      string
	Registry oci.Registry
	// MaxConcurrentDownloads bounds blobs fetched at once. Default 3.
	MaxConcurrentDownloads int
	Log                    *slog.Logger
}

// Store is the embedded backend.
type Store struct {
	opts    Options
	content content.Store
	// root is opts.Dir: the records under refs/ are read, written (the one atomic writer) and
	// removed through it, never through a link.
	root *fsroot.Root
	mu   sync.Mutex // serializes record writes and garbage collection
}

// refsDir holds one record per image name, named by the sha256 of the name.
var refsDir = fsroot.MustPath("refs")

// maxRecord bounds reading a record back (a name and a descriptor: a few hundred bytes).
const maxRecord = 1 << 20

var _ prefetch.Images = (*Store)(nil)

// record is one image name, as a JSON file under refs/.
type record struct {
	Name    string             `json:"name"`
	Target  ocispec.Descriptor `json:"target"`
	Pinned  bool               `json:"pinned"`
	Managed bool               `json:"managed"`
	Created time.Time          `json:"created"`
}

// New opens (creating) the store under opts.Dir.
func New(opts Options) (*Store, error) {
	if opts.Dir == "" || !filepath.IsAbs(opts.Dir) {
		return nil, fmt.Errorf("embedded image store dir %q must be an absolute path (set dataDir)", opts.Dir)
	}
	if opts.MaxConcurrentDownloads <= 0 {
		opts.MaxConcurrentDownloads = 3
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.Registry.Platform.OS == "" {
		opts.Registry.Platform = platforms.DefaultSpec()
	}
	root, err := fsroot.Open(opts.Dir)
	if err != nil {
		return nil, fmt.Errorf("create embedded image store: %w", err)
	}
	if err := root.MkdirAll(refsDir, 0o755); err != nil {
		root.Close()
		return nil, fmt.Errorf("create embedded image store: %w", err)
	}
	// Temps of ref writes a crash interrupted: the store's owner holds the data dir lock and has
	// written nothing yet.
	if n, err := root.RemoveTemps(refsDir); err != nil {
		root.Close()
		return nil, fmt.Errorf("open embedded image store: %w", err)
	} else if n > 0 {
		opts.Log.Info("removed temp files of interrupted ref writes", "files", n)
	}
	// containerd's local store does its own I/O below content/, naming blobs by validated digests
	// (digest.Validate: a known algorithm and its hex encoding) and ingests by the sha256 of their
	// ref, so no name from a registry becomes a path there unchecked.
	cs, err := local.NewStore(filepath.Join(opts.Dir, "content"))
	if err != nil {
		root.Close()
		return nil, fmt.Errorf("open embedded content store: %w", err)
	}
	opts.Log.Info("image backend ready", "backend", "embedded", "dir", opts.Dir)
	return &Store{opts: opts, content: cs, root: root}, nil
}

// Backend implements prefetch.Images.
func (s *Store) Backend() prefetch.BackendInfo {
	return prefetch.BackendInfo{Name: "embedded", Path: "embedded",
		Detail: fmt.Sprintf("embedded content store at %s (no containerd daemon; layers verified, not unpacked), platform %s",
			s.opts.Dir, platforms.Format(s.opts.Registry.Platform))}
}

// Content exposes the content store (tests check what was fetched).
func (s *Store) Content() content.Store { return s.content }

// Close implements prefetch.Images.
func (s *Store) Close() error { return s.root.Close() }

// Resolve implements prefetch.Images.
func (s *Store) Resolve(ctx context.Context, ref string) (prefetch.Resolved, error) {
	return s.opts.Registry.Resolve(ctx, ref)
}

// Pull implements prefetch.Images: fetch the target and the platform's manifest, config and layers
// into the content store (each committed only when its digest matches), then write the record.
func (s *Store) Pull(ctx context.Context, r prefetch.Resolved, progress func(prefetch.Progress)) error {
	if progress == nil {
		progress = func(prefetch.Progress) {}
	}
	if err := checkDigests(r); err != nil {
		return fmt.Errorf("pull %s: %w", r.Name, err)
	}
	pr, err := oci.ParseRef(r.Name)
	if err != nil {
		return err
	}
	resolver := oci.FixedResolver(s.opts.Registry.Resolver(ctx, pr.Host), r.Name, r.Target)
	name, desc, err := resolver.Resolve(ctx, r.Name)
	if err != nil {
		return fmt.Errorf("pull %s: %w", r.Name, err)
	}
	fetcher, err := resolver.Fetcher(ctx, name)
	if err != nil {
		return fmt.Errorf("pull %s: %w", r.Name, err)
	}
	children := s.children()
	tr := oci.NewTracker(r, progress)
	pollCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { oci.PollContent(pollCtx, s.content, tr, 200*time.Millisecond) })
	err = images.Dispatch(ctx, images.Handlers(remotes.FetchHandler(s.content, fetcher), children),
		semaphore.NewWeighted(int64(s.opts.MaxConcurrentDownloads)), desc)
	stop()
	wg.Wait()
	if err != nil {
		return fmt.Errorf("pull %s: %w", r.Name, err)
	}
	for _, l := range r.Layers {
		tr.Set(l.Digest, l.Size, true)
	}
	return s.write(record{Name: r.Name, Target: r.Target, Pinned: true, Managed: true, Created: time.Now().UTC()})
}

// checkDigests refuses a resolved image whose descriptors carry a digest that is not a valid one
// (a known algorithm and its encoding): the registry wrote them, and the content store names blobs
// by them. containerd's store checks again itself, as it does for the children it reads.
func checkDigests(r prefetch.Resolved) error {
	for _, d := range append([]ocispec.Descriptor{r.Target, r.Manifest, r.Config}, r.Layers...) {
		if err := d.Digest.Validate(); err != nil {
			return fmt.Errorf("the registry gave the invalid digest %s (%w); the image cannot be stored", fsroot.Quote(string(d.Digest)), err)
		}
	}
	return nil
}

// path is the record of name: refs/<sha256 of the name>.json, warmd's own hex.
func (s *Store) path(name string) fsroot.Path {
	h := sha256.Sum256([]byte(name))
	return refsDir.Join(fsroot.MustPath(hex.EncodeToString(h[:]) + ".json"))
}

func (s *Store) write(rec record) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	data, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	if err := s.root.WriteFile(s.path(rec.Name), data, 0o644); err != nil {
		return fmt.Errorf("write image record: %w", err)
	}
	return nil
}

func (s *Store) read(name string) (record, error) {
	data, err := s.root.ReadFile(s.path(name), maxRecord)
	if errors.Is(err, fs.ErrNotExist) {
		return record{}, fmt.Errorf("%s: %w", name, prefetch.ErrNotFound)
	}
	if err != nil {
		return record{}, fmt.Errorf("read image record of %s: %w", name, err)
	}
	var rec record
	if err := json.Unmarshal(data, &rec); err != nil {
		return record{}, fmt.Errorf("image record of %s is corrupt (delete %s to re-pull): %w", name, s.root.Name(s.path(name)), err)
	}
	return rec, nil
}

func (s *Store) all() ([]record, error) {
	ents, err := s.root.ReadDir(refsDir)
	if err != nil {
		return nil, fmt.Errorf("list image records: %w", err)
	}
	var out []record
	for _, e := range ents {
		if filepath.Ext(e.Name()) != ".json" || fsroot.IsTemp(e.Name()) || !e.Type().IsRegular() {
			continue
		}
		p, err := refsDir.Child(e.Name())
		if err != nil {
			continue
		}
		data, err := s.root.ReadFile(p, maxRecord)
		if err != nil {
			continue
		}
		var rec record
		if json.Unmarshal(data, &rec) == nil {
			out = append(out, rec)
		}
	}
	return out, nil
}

// Lookup implements prefetch.Images. Unpacked means every blob of the platform's image is present.
func (s *Store) Lookup(ctx context.Context, name string) (prefetch.Local, error) {
	rec, err := s.read(name)
	if err != nil {
		return prefetch.Local{}, err
	}
	return s.local(ctx, rec), nil
}

func (s *Store) local(ctx context.Context, rec record) prefetch.Local {
	l := prefetch.Local{Name: rec.Name, Digest: rec.Target.Digest, Pinned: rec.Pinned, Managed: rec.Managed}
	blobs, err := s.blobs(ctx, rec.Target)
	l.Unpacked = err == nil && len(blobs) > 0
	return l
}

// blobs lists every blob the platform's image needs, failing if one is missing.
func (s *Store) blobs(ctx context.Context, target ocispec.Descriptor) ([]ocispec.Descriptor, error) {
	var out []ocispec.Descriptor
	h := images.HandlerFunc(func(ctx context.Context, d ocispec.Descriptor) ([]ocispec.Descriptor, error) {
		if _, err := s.content.Info(ctx, d.Digest); err != nil {
			return nil, fmt.Errorf("blob %s: %w", d.Digest, err)
		}
		out = append(out, d)
		return nil, nil
	})
	if err := images.Walk(ctx, images.Handlers(h, s.children()), target); err != nil {
		return nil, err
	}
	return out, nil
}

// children walks an image down to the node platform's manifest only: the other platforms' blobs
// are never fetched.
func (s *Store) children() images.HandlerFunc {
	match := platforms.Only(s.opts.Registry.Platform)
	return images.LimitManifests(images.FilterPlatforms(images.ChildrenHandler(s.content), match), match, 1)
}

// Managed implements prefetch.Images.
func (s *Store) Managed(ctx context.Context) ([]prefetch.Local, error) {
	recs, err := s.all()
	if err != nil {
		return nil, err
	}
	var out []prefetch.Local
	for _, r := range recs {
		if r.Managed {
			out = append(out, s.local(ctx, r))
		}
	}
	return out, nil
}

// Release implements prefetch.Images. remove deletes the record and every blob no other record needs.
func (s *Store) Release(ctx context.Context, name, policy string) error {
	rec, err := s.read(name)
	if errors.Is(err, prefetch.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if !rec.Managed {
		return nil
	}
	switch policy {
	case prefetch.OnRemoveKeep:
		return nil
	case prefetch.OnRemoveUnpin:
		rec.Pinned, rec.Managed = false, false
		return s.write(rec)
	case prefetch.OnRemoveRemove:
		s.mu.Lock()
		err := s.root.Remove(s.path(name))
		s.mu.Unlock()
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("remove %s: %w", name, err)
		}
		return s.collect(ctx)
	}
	return fmt.Errorf("release %s: policy %q is not unpin, keep or remove", name, policy)
}

// collect deletes blobs no remaining record reaches.
func (s *Store) collect(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	recs, err := s.all()
	if err != nil {
		return err
	}
	live := map[string]bool{}
	for _, r := range recs {
		err := images.Walk(ctx, images.Handlers(images.HandlerFunc(func(_ context.Context, d ocispec.Descriptor) ([]ocispec.Descriptor, error) {
			live[d.Digest.String()] = true
			return nil, nil
		}), s.children()), r.Target)
		if err != nil {
			// Never delete on a partial view: an unreadable record would lose blobs it needs.
			return fmt.Errorf("collect unused blobs: walk %s: %w (nothing deleted)", r.Name, err)
		}
	}
	var errs []error
	err = s.content.Walk(ctx, func(info content.Info) error {
		if !live[info.Digest.String()] {
			if err := s.content.Delete(ctx, info.Digest); err != nil {
				errs = append(errs, err)
			}
		}
		return nil
	})
	return errors.Join(append(errs, err)...)
}
