package mirror

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/ocierofs/ocierofs/convert"
	"github.com/ocierofs/ocierofs/convert/cache"
	"github.com/ocierofs/ocierofs/oci"
)

// How a twin reuses layers: every tar layer of the source is looked up in
// the layer cache by its ChainID and the options; the missing ones are
// claimed and converted here (cache.Cache.Image, which reads the
// cached ones below them only for their directories), published and
// recorded; then the converter assembles the twin from an image whose tar
// layers are all EROFS already, so it passes them through and writes the
// manifest and config exactly as for a plain conversion.

func isTarLayer(mt types.MediaType) bool {
	switch mt {
	case types.DockerLayer, types.DockerUncompressedLayer, types.OCILayer, types.OCILayerZStd, types.OCIUncompressedLayer:
		return true
	}
	return false
}

// sourceImage is an image with its manifest and config as raw bytes.
type sourceImage struct {
	raw    []byte
	m      *v1.Manifest
	rawCfg []byte
	cfg    *v1.ConfigFile
}

func readSource(img v1.Image) (*sourceImage, error) {
	s := &sourceImage{}
	var err error
	if s.raw, err = img.RawManifest(); err != nil {
		return nil, err
	}
	if s.m, err = v1.ParseManifest(bytes.NewReader(s.raw)); err != nil {
		return nil, err
	}
	if err := convert.CheckConfigSize(s.m.Config); err != nil {
		return nil, err
	}
	if s.rawCfg, err = img.RawConfigFile(); err != nil {
		return nil, err
	}
	if s.cfg, err = v1.ParseConfigFile(bytes.NewReader(s.rawCfg)); err != nil {
		return nil, err
	}
	return s, nil
}

// noReuse reports options whose layers the layer cache does not hold: a
// flattened image's one layer, and layers with the EROFS image spec's
// chunk index or dm-verity tree, whose annotations (and standalone
// chunk-index layers) only the converter makes.
func noReuse(o convert.ImageOptions) bool {
	return o.Flatten || o.SpecMediaTypes && (o.Spec.ChunkIndex != convert.ChunkIndexNone || o.Spec.DMVerity)
}

// image returns what the converter should convert for src: src itself
// (converted plainly, every layer), or, with a layer cache, an image whose
// tar layers are all EROFS already — the cached ones, and the missing ones
// converted here first — so that the converter only assembles the twin,
// exactly as it would have.
func (j *twinJob) image(src v1.Image, desc v1.Descriptor) (v1.Image, error) {
	if j.t.Cache == nil || noReuse(j.opt) {
		j.markPlain(desc.Digest)
		return src, nil
	}
	s, err := readSource(src)
	if err != nil || len(s.cfg.RootFS.DiffIDs) != len(s.m.Layers) {
		j.markPlain(desc.Digest) // the converter reports what is wrong
		return src, nil
	}
	// Two tar layers with one diffID (empty layers, often) would share a
	// file in the cache's directory: convert such images plainly.
	seen := map[v1.Hash]bool{}
	for i, l := range s.m.Layers {
		if isTarLayer(l.MediaType) {
			if seen[s.cfg.RootFS.DiffIDs[i]] {
				j.markPlain(desc.Digest)
				return src, nil
			}
			seen[s.cfg.RootFS.DiffIDs[i]] = true
		}
	}
	keys := chainKeys(optionsKey(j.opt), s.cfg.RootFS.DiffIDs)
	entries := make([]*LayerEntry, len(keys))
	var misses []int
	for i, l := range s.m.Layers {
		if !isTarLayer(l.MediaType) {
			continue
		}
		// In layer order: a worker waits only for layers on the same
		// lower layers as its own, whose holder waits for nothing of ours.
		for {
			e, claimed, err := j.t.Cache.Claim(j.ctx, keys[i], j.owner)
			if err != nil {
				return nil, err
			}
			if claimed {
				j.mu.Lock()
				if j.claimed == nil {
					j.claimed = map[string]bool{}
				}
				j.claimed[keys[i]] = true
				j.mu.Unlock()
				j.refreshClaims()
				misses = append(misses, i)
				break
			}
			if j.usable(e) {
				entries[i] = e
				break
			}
			j.t.Cache.Forget(j.ctx, keys[i]) // its blob is gone: convert again
		}
	}
	if len(misses) == len(s.m.Layers)-countNonTar(s.m) {
		// Nothing to reuse: the converter does it all, as convert does
		// (without the cache's copy of each layer); the claimed layers are
		// recorded from its report.
		j.markPlain(desc.Digest)
		return src, nil
	}
	if len(misses) > 0 {
		scan, diffIDs := src, s.cfg.RootFS.DiffIDs
		if sk, d, ok := j.skeletonImage(src, s, keys, entries, misses[len(misses)-1]); ok {
			scan, diffIDs = sk, d
		} else {
			j.out.SkeletonReads = 0
			for _, e := range entries[:misses[len(misses)-1]] {
				if e != nil {
					j.out.LayerReads++
				}
			}
		}
		if err := j.convertMissing(scan, desc, s, diffIDs, keys, entries, misses); err != nil {
			return nil, err
		}
	}
	j.out.LayersReused += len(s.m.Layers) - len(misses) - countNonTar(s.m)
	return j.substitute(src, s, entries)
}

func countNonTar(m *v1.Manifest) int {
	n := 0
	for _, l := range m.Layers {
		if !isTarLayer(l.MediaType) {
			n++
		}
	}
	return n
}

func (j *twinJob) markPlain(h v1.Hash) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.plain == nil {
		j.plain = map[v1.Hash]bool{}
	}
	j.plain[h] = true
}

// usable checks that a cached layer's blob is still in the registry, and
// mounts it into the target repository (a registry-side copy).
func (j *twinJob) usable(e *LayerEntry) bool {
	ref, err := name.NewDigest(j.t.Registry+"/"+e.Repository+"@"+e.Digest, j.nameOpts()...)
	if err != nil {
		return false
	}
	ropts := j.t.Remote.Options(j.ctx)
	l, err := remote.Layer(ref, ropts...)
	if err != nil {
		return false
	}
	if _, err := l.Size(); err != nil {
		j.t.logf("cached layer %s in %s: %v; converting again", e.Digest, e.Repository, err)
		return false
	}
	if e.Repository != j.dst.Name.Context().RepositoryStr() {
		if err := remote.WriteLayer(j.dst.Name.Context(), l, ropts...); err != nil {
			j.t.logf("mount %s from %s: %v; converting again", e.Digest, e.Repository, err)
			return false
		}
	}
	return true
}

func (j *twinJob) nameOpts() []name.Option {
	if j.t.PlainHTTP {
		return []name.Option{name.Insecure}
	}
	return nil
}

// convertMissing converts the layers at misses of src (the others are
// cached: cache.Cache.Image reads them, or their skeletons, only for their
// directories; diffIDs are src's) and records them.
func (j *twinJob) convertMissing(src v1.Image, desc v1.Descriptor, s *sourceImage, diffIDs []v1.Hash, keys []string, entries []*LayerEntry, misses []int) error {
	dir, release, err := convert.TempDir(j.opt.TempDir)
	if err != nil {
		return err
	}
	defer release()
	for i, e := range entries {
		if e != nil { // an empty file marks it done for cache.Cache.Image
			p := cache.Path(dir, diffIDs[i])
			if err := os.MkdirAll(p[:strings.LastIndexByte(p, '/')], 0o755); err != nil {
				return err
			}
			if err := os.WriteFile(p, nil, 0o644); err != nil {
				return err
			}
		}
	}
	lc, err := cache.New(dir, cache.Options{
		Convert:   j.opt,
		Present:   func(p string) bool { _, err := os.Stat(p); return err == nil },
		NoSync:    true, // dir is this task's scratch space
		OverLower: true, // it publishes these: as convert makes them
	})
	if err != nil {
		return err
	}
	defer lc.Close()
	layers, err := lc.Image(j.ctx, src, desc)
	if err != nil {
		return classify(err)
	}
	repo := j.dst.Name.Context().RepositoryStr()
	for _, i := range misses {
		cl := layers[i]
		diff, size, err := hashFile(cl.Path)
		if err != nil {
			return fmt.Errorf("layer %s: %w", cl.Source, err)
		}
		j.mu.Lock()
		pd, ok := j.pubs[diff.String()]
		j.mu.Unlock()
		if !ok {
			return fmt.Errorf("layer %s: converted to %s (%d bytes) but not published", cl.Source, diff, size)
		}
		e := LayerEntry{Digest: pd.Digest.String(), DiffID: diff.String(), MediaType: string(pd.MediaType), Size: pd.Size,
			SourceSize: s.m.Layers[i].Size, Repository: repo, Source: cl.Source, Worker: j.owner, Created: time.Now().UTC()}
		if err := j.store(keys[i], e); err != nil {
			return err
		}
		entries[i] = &e
		j.countConverted(keys[i], e.SourceSize, e.Size)
	}
	return nil
}

func (j *twinJob) store(key string, e LayerEntry) error {
	if err := j.t.Cache.Store(j.ctx, key, e); err != nil {
		return fmt.Errorf("layer cache: %w", err)
	}
	j.mu.Lock()
	delete(j.claimed, key)
	j.mu.Unlock()
	return nil
}

func hashFile(p string) (v1.Hash, int64, error) {
	f, err := os.Open(p)
	if err != nil {
		return v1.Hash{}, 0, err
	}
	defer f.Close()
	return v1.SHA256(f)
}

// substitute makes the image whose tar layers are the EROFS layers in
// entries, with the annotations and diff_ids the converter would have
// given them; the converter passes such layers through.
func (j *twinJob) substitute(src v1.Image, s *sourceImage, entries []*LayerEntry) (v1.Image, error) {
	repl := map[int]replacement{}
	ropts := j.t.Remote.Options(j.ctx)
	for i, l := range s.m.Layers {
		e := entries[i]
		if e == nil {
			continue
		}
		h, err := v1.NewHash(e.Digest)
		if err != nil {
			return nil, err
		}
		ann := map[string]string{}
		for k, v := range l.Annotations {
			ann[k] = v
		}
		ann[convert.AnnotationSourceLayer] = l.Digest.String()
		if j.opt.SpecMediaTypes {
			ann[convert.AnnotationUncompressed] = e.DiffID
		}
		// The blob is in the target repository now (published or mounted).
		rl, err := remote.Layer(j.dst.Name.Context().Digest(e.Digest), ropts...)
		if err != nil {
			return nil, err
		}
		repl[i] = replacement{desc: v1.Descriptor{MediaType: types.MediaType(e.MediaType), Digest: h, Size: e.Size, Annotations: ann},
			diffID: e.DiffID, layer: rl}
	}
	return assemble(src, s, repl)
}

// replacement is a layer put in place of a source layer.
type replacement struct {
	desc   v1.Descriptor
	diffID string
	layer  v1.Layer
}

// assemble is src with some layers replaced: the manifest and config are
// edited as JSON, so every other field stays as it was (numbers included).
func assemble(src v1.Image, s *sourceImage, repl map[int]replacement) (v1.Image, error) {
	var m map[string]any
	dec := json.NewDecoder(bytes.NewReader(s.raw))
	dec.UseNumber()
	if err := dec.Decode(&m); err != nil {
		return nil, err
	}
	var cfg map[string]any
	dec = json.NewDecoder(bytes.NewReader(s.rawCfg))
	dec.UseNumber()
	if err := dec.Decode(&cfg); err != nil {
		return nil, err
	}
	img := &substImage{layers: map[v1.Hash]v1.Layer{}, orig: src}
	diffIDs := make([]string, len(s.m.Layers))
	descs := make([]v1.Descriptor, len(s.m.Layers))
	for i, l := range s.m.Layers {
		diffIDs[i], descs[i] = s.cfg.RootFS.DiffIDs[i].String(), l
		if r, ok := repl[i]; ok {
			diffIDs[i], descs[i] = r.diffID, r.desc
			img.layers[r.desc.Digest] = r.layer
		}
	}
	rootfs, _ := cfg["rootfs"].(map[string]any)
	if rootfs == nil {
		rootfs = map[string]any{"type": "layers"}
	}
	rootfs["diff_ids"] = diffIDs
	cfg["rootfs"] = rootfs
	var err error
	if img.rawCfg, err = json.Marshal(cfg); err != nil {
		return nil, err
	}
	ch, cs, err := v1.SHA256(bytes.NewReader(img.rawCfg))
	if err != nil {
		return nil, err
	}
	cd := s.m.Config
	cd.Digest, cd.Size = ch, cs
	m["config"] = cd
	m["layers"] = descs
	if img.raw, err = json.Marshal(m); err != nil {
		return nil, err
	}
	if img.m, err = v1.ParseManifest(bytes.NewReader(img.raw)); err != nil {
		return nil, err
	}
	return img, nil
}

// storePlain records the layers of images converted without the cache.
func (j *twinJob) storePlain(a *oci.Artifact, reps []*convert.ImageReport) error {
	if j.t.Cache == nil {
		return nil
	}
	for _, rep := range reps {
		h, err := v1.NewHash(rep.Source)
		if err != nil {
			return err
		}
		j.mu.Lock()
		plain := j.plain[h]
		j.mu.Unlock()
		if !plain {
			continue
		}
		var img v1.Image
		if a.Index != nil {
			img, err = a.Index.Image(h)
		} else {
			img = a.Image
		}
		if err != nil {
			return err
		}
		chain := ""
		for _, l := range rep.Layers {
			chain += l.Source + ","
			if !l.Passthrough {
				j.countConverted(chain, l.SourceSize, l.Size)
			}
		}
		if noReuse(j.opt) {
			continue
		}
		s, err := readSource(img)
		if err != nil {
			return err
		}
		if len(s.cfg.RootFS.DiffIDs) != len(rep.Layers) {
			continue
		}
		keys := chainKeys(optionsKey(j.opt), s.cfg.RootFS.DiffIDs)
		repo := j.dst.Name.Context().RepositoryStr()
		for i, l := range rep.Layers {
			if l.Passthrough || !isTarLayer(s.m.Layers[i].MediaType) {
				continue
			}
			e := LayerEntry{Digest: l.Digest, DiffID: l.DiffID, MediaType: l.MediaType, Size: l.Size, SourceSize: l.SourceSize,
				Repository: repo, Source: l.Source, Worker: j.owner, Created: time.Now().UTC()}
			if err := j.store(keys[i], e); err != nil {
				return err
			}
		}
	}
	return nil
}

// index returns the index to convert: src with each selected platform's
// image prepared as image does.
func (j *twinJob) index(a *oci.Artifact) (v1.ImageIndex, error) {
	im, err := a.Index.IndexManifest()
	if err != nil {
		return nil, err
	}
	si := &substIndex{orig: a.Index, images: map[v1.Hash]v1.Image{}}
	for _, d := range im.Manifests {
		if d.MediaType.IsIndex() || d.Platform == nil || d.Platform.OS == "unknown" || !convert.PlatformSelected(j.opt.Platforms, *d.Platform) {
			continue
		}
		img, err := a.Index.Image(d.Digest)
		if err != nil {
			return nil, err
		}
		p, err := j.image(img, d)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", d.Platform, err)
		}
		si.images[d.Digest] = p
	}
	return si, nil
}

type substIndex struct {
	orig   v1.ImageIndex
	images map[v1.Hash]v1.Image
}

func (s *substIndex) Image(h v1.Hash) (v1.Image, error) {
	if img, ok := s.images[h]; ok {
		return img, nil
	}
	return s.orig.Image(h)
}
func (s *substIndex) MediaType() (types.MediaType, error)         { return s.orig.MediaType() }
func (s *substIndex) Digest() (v1.Hash, error)                    { return s.orig.Digest() }
func (s *substIndex) Size() (int64, error)                        { return s.orig.Size() }
func (s *substIndex) IndexManifest() (*v1.IndexManifest, error)   { return s.orig.IndexManifest() }
func (s *substIndex) RawManifest() ([]byte, error)                { return s.orig.RawManifest() }
func (s *substIndex) ImageIndex(h v1.Hash) (v1.ImageIndex, error) { return s.orig.ImageIndex(h) }

// substImage is the source image with EROFS layers in place of tar ones.
type substImage struct {
	raw, rawCfg []byte
	m           *v1.Manifest
	layers      map[v1.Hash]v1.Layer
	orig        v1.Image
}

func (s *substImage) MediaType() (types.MediaType, error) { return s.m.MediaType, nil }
func (s *substImage) Size() (int64, error)                { return int64(len(s.raw)), nil }
func (s *substImage) ConfigName() (v1.Hash, error)        { return s.m.Config.Digest, nil }
func (s *substImage) ConfigFile() (*v1.ConfigFile, error) {
	return v1.ParseConfigFile(bytes.NewReader(s.rawCfg))
}
func (s *substImage) RawConfigFile() ([]byte, error) { return s.rawCfg, nil }
func (s *substImage) Digest() (v1.Hash, error) {
	h, _, err := v1.SHA256(bytes.NewReader(s.raw))
	return h, err
}
func (s *substImage) Manifest() (*v1.Manifest, error) { return s.m.DeepCopy(), nil }
func (s *substImage) RawManifest() ([]byte, error)    { return s.raw, nil }
func (s *substImage) Layers() ([]v1.Layer, error) {
	var out []v1.Layer
	for _, d := range s.m.Layers {
		l, err := s.LayerByDigest(d.Digest)
		if err != nil {
			return nil, err
		}
		out = append(out, l)
	}
	return out, nil
}
func (s *substImage) LayerByDigest(h v1.Hash) (v1.Layer, error) {
	if l, ok := s.layers[h]; ok {
		return l, nil
	}
	return s.orig.LayerByDigest(h) // a layer passed through as it is
}
func (s *substImage) LayerByDiffID(h v1.Hash) (v1.Layer, error) {
	cf, err := s.ConfigFile()
	if err != nil {
		return nil, err
	}
	for i, d := range cf.RootFS.DiffIDs {
		if d == h && i < len(s.m.Layers) {
			return s.LayerByDigest(s.m.Layers[i].Digest)
		}
	}
	return nil, fmt.Errorf("diffID %s: %w", h, errNoLayer)
}

var errNoLayer = errors.New("not in the image")
