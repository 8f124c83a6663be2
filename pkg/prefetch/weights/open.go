package weights

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"

	"warmd.io/warmd/pkg/config"
	"warmd.io/warmd/pkg/objstore"
	"warmd.io/warmd/pkg/prefetch"
	"warmd.io/warmd/pkg/prefetch/weights/source/file"
	s3src "warmd.io/warmd/pkg/prefetch/weights/source/s3"
)

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

// SourceOpener returns an OpenSource for s3:// and file:// sources. The S3 store is created on first
// use (from newStore), so a node with only file:// models never loads AWS config.
func SourceOpener(newStore func(ctx context.Context) (objstore.Store, error)) OpenSource {
	var mu sync.Mutex
	var store objstore.Store
	return func(ctx context.Context, m config.Model) (prefetch.Source, error) {
		switch {
		case strings.HasPrefix(m.Source, "file://"):
			return file.New(m.Source)
		case strings.HasPrefix(m.Source, "s3://"):
			mu.Lock()
			defer mu.Unlock()
			if store == nil {
				s, err := newStore(ctx)
				if err != nil {
					return nil, err
				}
				store = s
			}
			return s3src.New(store, m.Source)
		}
		return nil, fmt.Errorf("source %q: scheme must be s3:// or file://", m.Source)
	}
}
