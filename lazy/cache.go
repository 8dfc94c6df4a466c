package lazy

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// ChunkSize is the unit of fetching and caching. Small enough that a
// lookup fetches little beyond what it needs, large enough that a file read
// through costs few requests.
const ChunkSize = 512 << 10

// Cache is a directory of chunks of blobs, bounded in size: DIR/sha256/HEX/
// holds blob HEX's chunks (c0, c1, …, each ChunkSize bytes but the last),
// its size once known, its per-chunk digests once the whole blob was
// checked (sums), and the file whose byte locks order fetches (lock).
// Several processes may share a directory.
type Cache struct {
	dir   string
	limit int64 // bytes; 0: unbounded

	mu    sync.Mutex
	blobs map[v1.Hash]*Blob

	used     atomic.Int64 // bytes of chunks, as last counted plus written since
	evicting atomic.Bool
	// active counts foreground fetches in flight; a prefetch waits for
	// none, so that it takes bandwidth only when reads leave it free.
	active atomic.Int64
	// ahead bounds the read-ahead fetches in flight.
	ahead chan struct{}

	fetched  atomic.Int64
	requests atomic.Int64
}

// OpenCache opens (making it if need be) the cache in dir, bounded to limit
// bytes of chunks (0: no bound). When a write takes it past the bound, the
// chunks least recently used go until it is under nine tenths of it.
func OpenCache(dir string, limit int64) (*Cache, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("cache: %w", err)
	}
	c := &Cache{dir: dir, limit: limit, blobs: map[v1.Hash]*Blob{}, ahead: make(chan struct{}, 4)}
	total, err := c.scan(true)
	if err != nil {
		return nil, fmt.Errorf("cache %s: %w", dir, err)
	}
	c.used.Store(total)
	return c, nil
}

// Dir is the cache's directory.
func (c *Cache) Dir() string { return c.dir }

// Stats are what a cache fetched over the network since it was opened.
type Stats struct {
	Bytes    int64 // body bytes received
	Requests int64
	Used     int64 // bytes of chunks in the cache, as last counted
}

// Stats reports the cache's fetches so far.
func (c *Cache) Stats() Stats {
	return Stats{Bytes: c.fetched.Load(), Requests: c.requests.Load(), Used: c.used.Load()}
}

// chunkFile is one chunk on disk, for eviction.
type chunkFile struct {
	path string
	size int64
	used time.Time
}

// scan counts the bytes of chunks in the cache; with clean, it removes the
// temporary files that an interrupted write left.
func (c *Cache) scan(clean bool) (int64, error) {
	var total int64
	err := c.walkChunks(func(cf chunkFile, tmp bool) {
		if tmp {
			if clean && time.Since(cf.used) > time.Hour {
				os.Remove(cf.path)
			}
			return
		}
		total += cf.size
	})
	return total, err
}

func (c *Cache) walkChunks(fn func(cf chunkFile, tmp bool)) error {
	err := filepath.WalkDir(c.dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // removed by another process meanwhile
			}
			return err
		}
		name := d.Name()
		chunk := strings.HasPrefix(name, "c") && !d.IsDir()
		tmp := strings.HasPrefix(name, ".c") && !d.IsDir()
		if !chunk && !tmp {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return nil
		}
		fn(chunkFile{p, fi.Size(), fi.ModTime()}, tmp)
		return nil
	})
	return err
}

// added accounts n bytes written and, past the bound, starts an eviction.
func (c *Cache) added(n int64) {
	if c.limit <= 0 || c.used.Add(n) <= c.limit || !c.evicting.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer c.evicting.Store(false)
		c.evict()
	}()
}

// evict removes the least recently used chunks (by mtime, which reads
// refresh) until the cache is under nine tenths of its bound. It counts
// the directory anew, so that the chunks other processes wrote count too.
func (c *Cache) evict() {
	var files []chunkFile
	var total int64
	c.walkChunks(func(cf chunkFile, tmp bool) {
		if !tmp {
			files = append(files, cf)
			total += cf.size
		}
	})
	slices.SortFunc(files, func(a, b chunkFile) int { return a.used.Compare(b.used) })
	target := c.limit / 10 * 9
	for _, f := range files {
		if total <= target {
			break
		}
		if os.Remove(f.path) == nil {
			total -= f.size
		}
	}
	c.used.Store(total)
}
