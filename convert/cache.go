package convert

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// containerd's EROFS snapshotter, preparing the snapshot of a tar layer,
// looks in its layer content caches (layer_content_caches) for
// DIR/sha256/<first two hex digits>/<hex>.erofs, named by the layer's diffID,
// and uses such a file instead of having the differ run mkfs.erofs. Cache fills such a directory
// ahead of time, with the same bytes convert would publish for the layer.
//
// A layer's EROFS image depends on the layers below it only through the
// directories it implies (see lower.go). The cache is keyed by the layer's
// own diffID, so the entry made for the first image a layer is seen in is
// the one every image with that layer gets — the same trade containerd
// makes, which converts each layer without looking at the others.

// CachePath is where the EROFS image of the tar layer diffID lives in a
// layer content cache.
func CachePath(dir string, diffID v1.Hash) string {
	hex := diffID.Hex
	if len(hex) < 2 {
		hex = "00" + hex
	}
	return filepath.Join(dir, diffID.Algorithm, hex[:2], diffID.Hex+".erofs")
}

// CacheLayer describes one layer of a Cache run.
type CacheLayer struct {
	Platform string `json:"platform,omitempty"`
	Source   string `json:"source"`
	DiffID   string `json:"diffID"`
	Path     string `json:"path,omitempty"`
	// Cached is true when the entry was there already (nothing converted).
	Cached bool `json:"cached,omitempty"`
	// Skipped gives the reason a layer has no cache entry (not a tar).
	Skipped        string  `json:"skipped,omitempty"`
	Size           int64   `json:"size,omitempty"`
	ConvertSeconds float64 `json:"convertSeconds,omitempty"`
}

// CacheImage converts the layers of src that dir does not hold yet into
// dir's layer content cache layout. Entries appear atomically (temp file
// and rename), so a rerun, or containerd reading the cache meanwhile, never
// sees half an image.
func (c *Converter) CacheImage(ctx context.Context, src v1.Image, srcDesc v1.Descriptor, dir string) ([]CacheLayer, error) {
	m, err := src.Manifest()
	if err != nil {
		return nil, fmt.Errorf("manifest %s: %w", srcDesc.Digest, err)
	}
	rawCfg, err := readConfig(ctx, src, m.Config)
	if err != nil {
		return nil, fmt.Errorf("config of %s: %w", srcDesc.Digest, err)
	}
	cfg, err := v1.ParseConfigFile(strings.NewReader(string(rawCfg)))
	if err != nil {
		return nil, fmt.Errorf("config %s of %s: %w", m.Config.Digest, srcDesc.Digest, err)
	}
	if len(cfg.RootFS.DiffIDs) != len(m.Layers) {
		return nil, fmt.Errorf("image %s: %d layers but %d diff_ids", srcDesc.Digest, len(m.Layers), len(cfg.RootFS.DiffIDs))
	}
	out := make([]CacheLayer, len(m.Layers))
	top := -1 // the highest layer to convert
	for i, d := range m.Layers {
		out[i] = CacheLayer{Source: d.Digest.String(), DiffID: cfg.RootFS.DiffIDs[i].String()}
		switch {
		case !isTarLayer(d.MediaType):
			out[i].Skipped = fmt.Sprintf("media type %s is not a tar layer", d.MediaType)
		case isNondistributable(d.MediaType):
			out[i].Skipped = "non-distributable"
		default:
			p := CachePath(dir, cfg.RootFS.DiffIDs[i])
			out[i].Path = p
			if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
				out[i].Cached, out[i].Size = true, st.Size()
			} else {
				top = i
			}
		}
	}
	if top < 0 {
		return out, nil
	}
	// Layers below a missing one are read again for their directories
	// (scanned, not written) when their own entry is there already.
	jobs := make([]*layerJob, top+1)
	var chain []string
	var lowerOps []*dirOps
	for i := 0; i <= top; i++ {
		d := m.Layers[i]
		chain = append(chain, d.Digest.String())
		l, err := src.LayerByDigest(d.Digest)
		if err != nil {
			return nil, fmt.Errorf("layer %s: %w", d.Digest, err)
		}
		ls := layerSource{desc: d, layer: l, diffID: cfg.RootFS.DiffIDs[i], lower: append([]*dirOps(nil), lowerOps...)}
		key := strings.Join(chain, ",")
		waiting := Progress{Source: d.Digest.String(), Total: d.Size}
		if out[i].Cached || out[i].Skipped != "" {
			ls.scan = true
			key = "scan:" + key
			waiting = Progress{} // not shown: nothing is made of it
		}
		jobs[i] = c.job(ctx, key, waiting, func(j *layerJob) error { return c.convertLayer(ctx, j, ls) })
		lowerOps = append(lowerOps, jobs[i].ops)
	}
	for i, j := range jobs {
		select {
		case <-j.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if j.err != nil {
			return nil, j.err
		}
		if out[i].Cached || out[i].Skipped != "" {
			continue
		}
		fl := j.layer.(*fileLayer)
		t := time.Now()
		if err := placeFile(fl.raw, out[i].Path); err != nil {
			return nil, fmt.Errorf("layer %s: cache entry %s: %w", m.Layers[i].Digest, out[i].Path, err)
		}
		out[i].Size = fl.rawSize
		out[i].ConvertSeconds = fl.convertSeconds
		c.logf("layer %s: cached as %s (%.2fs)", short(m.Layers[i].Digest), out[i].Path, time.Since(t).Seconds())
	}
	return out, nil
}

// CacheIndex runs CacheImage for the selected platforms of an index (and
// of the indexes nested in it).
func (c *Converter) CacheIndex(ctx context.Context, src v1.ImageIndex, srcDesc v1.Descriptor, dir string) ([]CacheLayer, error) {
	sel, err := c.platformManifests(src, srcDesc)
	if err != nil {
		return nil, err
	}
	results := make([][]CacheLayer, len(sel))
	errs := make([]error, len(sel))
	var wg sync.WaitGroup
	for i, e := range sel {
		if e.nested != nil {
			wg.Go(func() { results[i], errs[i] = c.CacheIndex(ctx, e.nested, e.desc, dir) })
			continue
		}
		img, err := src.Image(e.desc.Digest)
		if err != nil {
			wg.Wait()
			return nil, fmt.Errorf("manifest %s: %w", e.desc.Digest, err)
		}
		wg.Go(func() {
			results[i], errs[i] = c.CacheImage(ctx, img, e.desc, dir)
			for j := range results[i] {
				results[i][j].Platform = platformString(e.platform)
			}
		})
	}
	wg.Wait()
	var all []CacheLayer
	for i, e := range sel {
		if errs[i] != nil {
			if e.nested != nil {
				return nil, errs[i]
			}
			return nil, fmt.Errorf("%s: %w", platformString(e.platform), errs[i])
		}
		all = append(all, results[i]...)
	}
	return all, nil
}

// placeFile puts a copy of src at dst atomically. Two platforms sharing a
// layer may place it at once; either result is the same bytes.
func placeFile(src, dst string) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(dst), ".tmp-"+filepath.Base(dst)+"-")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // after a successful rename: nothing there
	in, err := os.Open(src)
	if err != nil {
		tmp.Close()
		return err
	}
	defer in.Close()
	if _, err := io.Copy(tmp, in); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), dst)
}
