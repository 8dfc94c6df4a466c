package convert

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/ocierofs/ocierofs/convert/spec"
	"github.com/ocierofs/ocierofs/oci"
	"github.com/ocierofs/ocierofs/whiteout"
)

// ImageOptions control the conversion of whole images.
type ImageOptions struct {
	Layer Options
	// LayerZstd wraps each EROFS layer in zstd (…+zstd media types).
	LayerZstd bool
	// SpecMediaTypes writes the draft EROFS image spec's media types
	// (application/vnd.erofs[+zstd]) instead of containerd's.
	SpecMediaTypes bool
	// Spec adds the spec's chunk index and dm-verity tree to each layer
	// (with SpecMediaTypes).
	Spec SpecOptions
	// Jobs is how many layers convert at once (default 1).
	Jobs int
	// TempDir holds converted layers until they are published.
	TempDir string
	// NoIndexOSFeatures leaves platform.os.features out of index entries
	// (some registries reject it); the config still carries "erofs".
	NoIndexOSFeatures bool
	// Flatten merges all layers into one EROFS layer (whiteouts applied;
	// files hidden by upper layers are not written).
	Flatten bool
	// Layout is how the layers compose (with SpecMediaTypes): an overlay
	// stack (the default), devices under one metadata layer, or a data
	// layer under one metadata layer (overlay-data).
	Layout Layout
	// Referrer sets each converted manifest's subject to its source.
	Referrer bool
	// Platforms selects the manifests of an index; nil means all.
	Platforms []v1.Platform
	// VerifiedSource says that the source's blobs are checked against
	// their digests as they are read, as go-containerregistry checks a
	// registry's: an uncompressed layer whose blob digest is its diff_id
	// is then not hashed a second time for its diff_id (the check at the
	// end of the blob is that hash). Not for sources read unchecked (an
	// OCI layout, a docker-archive).
	VerifiedSource bool
	// Publish, if set, uploads a layer as soon as it is converted, so that
	// uploads overlap the conversion of other layers.
	Publish func(ctx context.Context, l v1.Layer) error
	// Log receives one line per step.
	Log func(string)
	// Progress, if set, receives the state of each layer as it changes
	// (often: every read of the source); it must be cheap.
	Progress func(Progress)
}

// Stage is where a layer is.
type Stage string

const (
	StageWaiting    Stage = "waiting"    // for a job slot
	StageConverting Stage = "converting" // downloading and converting (they overlap)
	StageUploading  Stage = "uploading"
	StageDone       Stage = "done"
	StagePassed     Stage = "passed through"
	StageFailed     Stage = "failed"
	// StageInterrupted: the conversion was given up (its context ended:
	// Ctrl-C, or a sibling failed) before the layer was done.
	StageInterrupted Stage = "interrupted"
)

// failedStage is StageFailed, or StageInterrupted where ctx has ended.
func failedStage(ctx context.Context) Stage {
	if ctx.Err() != nil {
		return StageInterrupted
	}
	return StageFailed
}

// uploadKey holds, in the context given to ImageOptions.Publish, the
// function that ReportUpload calls.
type uploadKey struct{}

// ReportUpload tells the progress hook how far the upload under way in
// ctx has got: sent of total bytes. Publish functions call it; elsewhere
// it does nothing.
func ReportUpload(ctx context.Context, sent, total int64) {
	if f, ok := ctx.Value(uploadKey{}).(func(sent, total int64)); ok {
		f(sent, total)
	}
}

// Progress is the state of one layer: Source is the source layer's
// digest (all of them, comma-separated, for a flattened image), Read the
// bytes of the source blob read so far of Total; while uploading and
// once done, the bytes of the converted layer sent of its size.
type Progress struct {
	Source      string
	Stage       Stage
	Read, Total int64
}

// LayerReport describes one layer of a converted image.
type LayerReport struct {
	Source         string   `json:"source"`
	Digest         string   `json:"digest"`
	DiffID         string   `json:"diffID"`
	MediaType      string   `json:"mediaType"`
	Size           int64    `json:"size"`
	SourceSize     int64    `json:"sourceSize"`
	Entries        int      `json:"entries,omitempty"`
	Passthrough    bool     `json:"passthrough,omitempty"`
	ConvertSeconds float64  `json:"convertSeconds"`
	UploadSeconds  float64  `json:"uploadSeconds,omitempty"`
	Warnings       []string `json:"warnings,omitempty"`
}

// ImageReport describes one converted image (manifest).
type ImageReport struct {
	Platform string        `json:"platform,omitempty"`
	Source   string        `json:"source"`
	Digest   string        `json:"digest"`
	Layers   []LayerReport `json:"layers"`
}

// Converter converts images; layers shared by several images or platforms
// are converted once. Close removes its temp files.
type Converter struct {
	opt  ImageOptions
	tmp  string
	lock *os.File      // holds the flock on tmp (tempdir.go)
	sem  chan struct{} // a slot for each layer converting (Jobs)
	up   chan struct{} // a slot for each layer uploading (Jobs)
	mu   sync.Mutex
	jobs map[string]*layerJob // by the chain of source digests up to the layer
}

type layerJob struct {
	ctx    context.Context // of the caller that started it
	lower  []*dirOps       // of the layers below, which it waits for
	done   chan struct{}
	ops    *dirOps
	layer  v1.Layer // converted (a *fileLayer) or the source layer
	report LayerReport
	err    error
	// metaRaw is the metadata layer an overlay-data layer's job wrote
	// beside it, for the job that publishes it (overlayDataMeta).
	metaRaw     string
	metaEntries int
	// freeSlot gives the job's slot back: once converted, a layer
	// waits for an upload slot (Converter.up) instead, and the next
	// layer converts meanwhile.
	freeSlot func()
}

// NewConverter makes a Converter with its own temp directory.
func NewConverter(opt ImageOptions) (*Converter, error) {
	if opt.Jobs < 1 {
		opt.Jobs = 1
	}
	if opt.Spec.active() && !opt.SpecMediaTypes {
		return nil, errors.New("a chunk index or a dm-verity tree in the layer is a part of the EROFS image spec's layers: it needs its media types")
	}
	if opt.SpecMediaTypes && opt.NoIndexOSFeatures {
		// The spec wants "erofs" in the index entry of an EROFS image (§6).
		return nil, errors.New("the EROFS image spec's media types need os.features in index entries: leave out no-index-os-features")
	}
	if err := opt.checkLayout(); err != nil {
		return nil, err
	}
	if opt.Layout == LayoutDevice {
		// The metadata layer refers to whole blocks of the devices: a
		// tail packed beside its inode would be copied into it.
		opt.Layer.Erofs.NoInlineData = true
	}
	if opt.SpecMediaTypes && opt.Layer.Whiteouts == whiteout.Keep {
		// Kept, the tar's .wh. files would be in the images (§3.6).
		return nil, errors.New("the EROFS image spec's media types need overlayfs whiteouts: leave out whiteouts keep")
	}
	if len(opt.Layer.PrefetchList) > 0 && opt.Flatten {
		return nil, errors.New("a prefetch list lays out each layer's files: it does not go with flatten yet")
	}
	tmp, lock, err := makeTemp(opt.TempDir)
	if err != nil {
		return nil, err
	}
	return &Converter{opt: opt, tmp: tmp, lock: lock, sem: make(chan struct{}, opt.Jobs), up: make(chan struct{}, opt.Jobs), jobs: map[string]*layerJob{}}, nil
}

// Close removes the converted layers kept for publishing.
func (c *Converter) Close() error {
	err := os.RemoveAll(c.tmp)
	if c.lock != nil {
		c.lock.Close()
	}
	return err
}

func (c *Converter) progress(p Progress) {
	if c.opt.Progress != nil {
		c.opt.Progress(p)
	}
}

func (c *Converter) logf(format string, args ...any) {
	if c.opt.Log != nil {
		c.opt.Log(fmt.Sprintf(format, args...))
	}
}

// Image converts one image. srcDesc is its descriptor (for annotations and
// the referrer subject).
func (c *Converter) Image(ctx context.Context, src v1.Image, srcDesc v1.Descriptor) (v1.Image, *ImageReport, error) {
	m, rawCfg, cfg, err := readImage(ctx, src, srcDesc)
	if err != nil {
		return nil, nil, err
	}
	jobs, chain, err := c.startImage(ctx, src, srcDesc, m, cfg)
	if err != nil {
		return nil, nil, err
	}
	rep := &ImageReport{Source: srcDesc.Digest.String()}
	out := &outImage{layers: map[v1.Hash]partial.CompressedLayer{}}
	// Empty, not nil: an image without layers has "layers": [] and
	// "diff_ids": [], as the image spec's schema wants.
	diffIDs := []string{}
	mf := v1.Manifest{
		SchemaVersion: 2,
		MediaType:     types.OCIManifestSchema1,
		Layers:        []v1.Descriptor{},
		Annotations:   map[string]string{},
	}
	maps.Copy(mf.Annotations, m.Annotations)
	mf.Annotations[AnnotationSourceManifest] = srcDesc.Digest.String()
	for i, j := range jobs {
		select {
		case <-j.done:
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		}
		if j.err != nil {
			return nil, nil, j.err
		}
		rep.Layers = append(rep.Layers, j.report)
		if j.report.Passthrough {
			if c.opt.SpecMediaTypes && m.Layers[i].MediaType != MediaTypeSpec && m.Layers[i].MediaType != MediaTypeSpecZstd {
				return nil, nil, sourceError(m.Layers[i].Digest, "layer %s: %s is passed through as it is, and the EROFS image spec takes no such layer (§4): convert without --media-type spec",
					m.Layers[i].Digest, m.Layers[i].MediaType)
			}
			mf.Layers = append(mf.Layers, m.Layers[i])
			out.layers[m.Layers[i].Digest] = j.layer
			diffIDs = append(diffIDs, cfg.RootFS.DiffIDs[i].String())
			continue
		}
		fl := j.layer.(*fileLayer)
		mf.Layers = append(mf.Layers, c.layerDescriptor(fl, m.Layers[i], chain))
		out.layers[fl.digest] = fl
		diffIDs = append(diffIDs, fl.diffID.String())
		if ci := fl.chunkIndex; ci != nil && i == len(jobs)-1 && c.opt.Layout == LayoutOverlay {
			// §3.8: a chunk-index layer is never the last, and a
			// standalone one indexes the layer before it.
			c.logf("layer %s: the top layer has no standalone chunk index (the spec keeps an EROFS layer last)", short(fl.digest))
		} else if ci != nil {
			mf.Layers = append(mf.Layers, chunkIndexDescriptor(ci))
			out.layers[ci.digest] = ci
			diffIDs = append(diffIDs, ci.diffID.String())
		}
	}
	var history []v1.History
	switch {
	case c.opt.Layout == LayoutDevice:
		if history, err = c.addDeviceMeta(ctx, rep, out, &mf, &diffIDs, jobs, chain, cfg, srcDesc); err != nil {
			return nil, nil, err
		}
	case c.opt.Layout == LayoutOverlayData:
		if history, err = c.addOverlayDataMeta(ctx, rep, out, &mf, &diffIDs, jobs[0], chain, cfg, srcDesc); err != nil {
			return nil, nil, err
		}
	case c.opt.SpecMediaTypes:
		markLowerLayers(mf.Layers)
	}
	c.reportUnlisted(jobs)
	if c.opt.Flatten {
		history = []v1.History{{Created: cfg.Created, CreatedBy: FlattenedBy,
			Comment: fmt.Sprintf("%d layers of %s merged", len(m.Layers), srcDesc.Digest)}}
	}
	img, err := c.assemble(out, mf, rawCfg, diffIDs, history, srcDesc)
	if err != nil {
		return nil, nil, err
	}
	dg, err := img.Digest()
	if err != nil {
		return nil, nil, err
	}
	rep.Digest = dg.String()
	return img, rep, nil
}

// readImage reads an image's manifest and config, and checks that they
// agree.
func readImage(ctx context.Context, src v1.Image, srcDesc v1.Descriptor) (*v1.Manifest, []byte, *v1.ConfigFile, error) {
	m, err := src.Manifest()
	if err != nil {
		return nil, nil, nil, fmt.Errorf("manifest %s: %w", srcDesc.Digest, err)
	}
	if err := checkLayers(m, srcDesc); err != nil {
		return nil, nil, nil, err
	}
	rawCfg, err := readConfig(ctx, src, m.Config)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("config of %s: %w", srcDesc.Digest, err)
	}
	cfg, err := v1.ParseConfigFile(bytes.NewReader(rawCfg))
	if err != nil {
		return nil, nil, nil, sourceError(m.Config.Digest, "config %s of %s: %w", m.Config.Digest, srcDesc.Digest, err)
	}
	if len(cfg.RootFS.DiffIDs) != len(m.Layers) {
		return nil, nil, nil, sourceError(srcDesc.Digest, "image %s: %d layers but %d diff_ids", srcDesc.Digest, len(m.Layers), len(cfg.RootFS.DiffIDs))
	}
	return m, rawCfg, cfg, nil
}

// startImage starts the jobs that convert the image's layers, each over
// those below it, or the one job that flattens them; chain is the layers'
// digests.
func (c *Converter) startImage(ctx context.Context, src v1.Image, srcDesc v1.Descriptor, m *v1.Manifest, cfg *v1.ConfigFile) (jobs []*layerJob, chain []string, err error) {
	var lowerOps []*dirOps
	var srcs []layerSource
	for i, d := range m.Layers {
		chain = append(chain, d.Digest.String())
		l, err := src.LayerByDigest(d.Digest)
		if err != nil {
			return nil, nil, fmt.Errorf("layer %s: %w", d.Digest, err)
		}
		ls := layerSource{desc: d, layer: l, diffID: cfg.RootFS.DiffIDs[i], lower: append([]*dirOps(nil), lowerOps...)}
		srcs = append(srcs, ls)
		if c.opt.Flatten || c.opt.Layout == LayoutOverlayData {
			continue
		}
		j := c.job(ctx, strings.Join(chain, ","), Progress{Source: d.Digest.String(), Total: d.Size}, ls.lower,
			func(j *layerJob) error { return c.convertLayer(ctx, j, ls) })
		jobs = append(jobs, j)
		lowerOps = append(lowerOps, j.ops)
	}
	if c.opt.Layout == LayoutOverlayData {
		j, err := c.startOverlayData(ctx, srcs, chain, srcDesc)
		return []*layerJob{j}, chain, err
	}
	if c.opt.Flatten {
		if len(srcs) == 0 {
			return nil, nil, fmt.Errorf("image %s: no layers to flatten", srcDesc.Digest)
		}
		jobs = append(jobs, c.job(ctx, "flat:"+strings.Join(chain, ","), Progress{Source: strings.Join(chain, ",")}, nil,
			func(j *layerJob) error { return c.flattenLayers(ctx, j, srcs) }))
	}
	return jobs, chain, nil
}

// layerDescriptor is the manifest's descriptor of the converted layer fl
// of the source layer d (of the whole chain, flattened).
func (c *Converter) layerDescriptor(fl *fileLayer, d v1.Descriptor, chain []string) v1.Descriptor {
	ann := map[string]string{}
	if c.opt.Flatten || c.opt.Layout == LayoutOverlayData {
		ann[AnnotationSourceLayer] = strings.Join(chain, ",")
	} else {
		maps.Copy(ann, d.Annotations)
		ann[AnnotationSourceLayer] = d.Digest.String()
	}
	if c.opt.SpecMediaTypes {
		ann[AnnotationUncompressed] = fl.diffID.String()
	}
	maps.Copy(ann, fl.annotations)
	return v1.Descriptor{MediaType: fl.mediaType, Digest: fl.digest, Size: fl.size, Annotations: ann}
}

// markLowerLayers gives each EROFS layer of a spec image but the top one
// the overlay-lower role, as the spec's multi-layer example does (§11.1):
// a layer may hold whiteouts only above an overlay-lower layer (§3.6), and
// each layer converted from a tar is an overlay layer. A single layer is
// the root filesystem and has no role; a standalone chunk index has none.
func markLowerLayers(ls []v1.Descriptor) {
	top := -1
	for i, d := range ls {
		if d.MediaType == MediaTypeSpec || d.MediaType == MediaTypeSpecZstd {
			top = i
		}
	}
	for i := range top {
		if ls[i].MediaType != MediaTypeSpec && ls[i].MediaType != MediaTypeSpecZstd {
			continue
		}
		ann := maps.Clone(ls[i].Annotations)
		if ann == nil {
			ann = map[string]string{}
		}
		ann[spec.AnnotationRole] = spec.RoleOverlayLower
		ls[i].Annotations = ann
	}
}

// assemble makes the converted image: its config (the source's with the
// new diff_ids and history) and manifest mf, with the layers of out.
func (c *Converter) assemble(out *outImage, mf v1.Manifest, rawCfg []byte, diffIDs []string, history []v1.History, srcDesc v1.Descriptor) (v1.Image, error) {
	newCfg, err := editConfig(rawCfg, diffIDs, history, c.opt.SpecMediaTypes)
	if err != nil {
		return nil, fmt.Errorf("config of %s: %w", srcDesc.Digest, err)
	}
	out.config = newCfg
	cfgHash, cfgSize, err := v1.SHA256(bytes.NewReader(newCfg))
	if err != nil {
		return nil, err
	}
	mf.Config = v1.Descriptor{MediaType: types.OCIConfigJSON, Digest: cfgHash, Size: cfgSize}
	if c.opt.Referrer {
		mf.Subject = &v1.Descriptor{MediaType: srcDesc.MediaType, Digest: srcDesc.Digest, Size: srcDesc.Size}
	}
	if out.manifest, err = json.Marshal(mf); err != nil {
		return nil, err
	}
	return partial.CompressedToImage(out)
}

// readConfig returns the raw config blob of src, checked against its
// descriptor. go-containerregistry's remote image keeps whatever a broken
// download left behind, so a config that does not match its digest is
// fetched again as a blob, with retries, before giving up.
func readConfig(ctx context.Context, src v1.Image, d v1.Descriptor) ([]byte, error) {
	if err := CheckConfigSize(d); err != nil {
		return nil, err
	}
	raw, err := src.RawConfigFile()
	if err == nil && matches(raw, d.Digest) {
		return raw, nil
	}
	for attempt := 1; attempt <= 4; attempt++ {
		if err != nil && !oci.Transient(err) && attempt > 1 {
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Duration(attempt-1) * 200 * time.Millisecond):
		}
		raw, err = readBlob(src, d.Digest)
		if err != nil && !oci.Transient(err) && d.Size > 0 && int64(len(raw)) == d.Size {
			// All of it came and was refused at its end: it is not
			// what its digest names (TestClassifyRegistryErrors).
			err = &SourceError{Digest: d.Digest, Err: err}
		}
		if err == nil {
			if matches(raw, d.Digest) {
				return raw, nil
			}
			err = sourceError(d.Digest, "config %s: content does not match its digest", d.Digest)
		}
	}
	return nil, err
}

func readBlob(src v1.Image, h v1.Hash) ([]byte, error) {
	l, err := src.LayerByDigest(h)
	if err != nil {
		return nil, err
	}
	rc, err := l.Compressed()
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, MaxConfigSize+1))
	if err == nil && len(b) > MaxConfigSize {
		err = fmt.Errorf("blob %s: more than %d bytes", h, MaxConfigSize)
	}
	return b, err
}

// MaxConfigSize bounds an image config, which is read into memory: a
// registry that declares a config of gigabytes, or of no size (-1), must
// not make a converter (a mirror's worker) take as much. Real configs,
// whose history grows with the layers, are kilobytes to a few megabytes.
const MaxConfigSize = 32 << 20

// CheckConfigSize refuses a config whose descriptor (a manifest's) makes
// it larger than MaxConfigSize or gives it no size, before it is read.
func CheckConfigSize(d v1.Descriptor) error {
	if d.Size < 0 || d.Size > MaxConfigSize {
		return sourceError(d.Digest, "config %s: the manifest gives it %d bytes: a config has 0 to %d", d.Digest, d.Size, MaxConfigSize)
	}
	return nil
}

func matches(b []byte, h v1.Hash) bool {
	got, _, err := v1.SHA256(bytes.NewReader(b))
	return err == nil && got == h
}

// FlattenedBy is the created_by of a flattened image's one history entry.
const FlattenedBy = "ocierofs convert --flatten"

// editConfig sets rootfs.diff_ids and adds "erofs" to os.features, keeping
// every other field of the source config as it was (numbers included);
// history, if not nil, replaces the history (a flattened image has one
// layer).
//
// With spec, rootfs.type is set to "layers", whatever the source says: the
// EROFS image spec wants it so where there is a rootfs (§5.1).
func editConfig(raw []byte, diffIDs []string, history []v1.History, spec bool) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var cfg map[string]any
	if err := dec.Decode(&cfg); err != nil {
		return nil, err
	}
	rootfs, _ := cfg["rootfs"].(map[string]any)
	if rootfs == nil {
		rootfs = map[string]any{"type": "layers"}
	}
	if spec {
		rootfs["type"] = "layers"
	}
	rootfs["diff_ids"] = diffIDs
	cfg["rootfs"] = rootfs
	feats, _ := cfg["os.features"].([]any)
	has := false
	for _, f := range feats {
		if f == "erofs" {
			has = true
		}
	}
	if !has {
		feats = append(feats, "erofs")
	}
	cfg["os.features"] = feats
	if history != nil {
		cfg["history"] = history
	}
	return json.Marshal(cfg)
}

// layerSource is one source layer as the converter sees it: its
// descriptor, its content, the diff_id the config gives it, and the
// directory records of the layers below it.
type layerSource struct {
	desc   v1.Descriptor
	layer  v1.Layer
	diffID v1.Hash
	lower  []*dirOps
	// scan reads the layer only for its directories (the cache needs
	// them for the layers above); no image is kept.
	scan bool
	// alone: made of the layer alone, without the layers below
	// (LayerAlone).
	alone bool
}

// job returns the (possibly shared) conversion of one layer, starting it
// with run unless a job of that key exists.
//
// It is not a singleflight.Group, which cannot say all of this: the job is
// returned at once, for the layers above to take its directory records
// (ops), ready once its tar is read and before its result; a job that
// succeeded stays for later images and platforms, where a Group forgets a
// key once its call returns; a running job is joined only while its
// caller's context lives and no layer below it failed; and the slot is
// taken here, in the order layers are asked for.
func (c *Converter) job(ctx context.Context, key string, waiting Progress, lower []*dirOps, run func(*layerJob) error) *layerJob {
	c.mu.Lock()
	defer c.mu.Unlock()
	if j := c.jobs[key]; j != nil {
		select {
		case <-j.done:
			if j.err == nil {
				return j
			}
			// Failed: run it again rather than hand its failure to a
			// later image; it may have been its caller's context, a
			// sibling platform's failure or the network.
		default:
			if j.ctx.Err() == nil && !anyFailed(j.lower) {
				return j
			}
			// Running for a caller that gave up, or over a layer
			// that failed: it will fail.
		}
	}
	j := &layerJob{ctx: ctx, lower: lower, done: make(chan struct{}), ops: newDirOps()}
	c.jobs[key] = j
	if waiting.Source != "" {
		waiting.Stage = StageWaiting
		c.progress(waiting)
	}
	// Layers take a job slot in the order they are asked for, so a layer
	// waiting for the layers below it never holds a slot they need.
	err := ctx.Err()
	if err == nil {
		select {
		case c.sem <- struct{}{}:
		case <-ctx.Done():
			err = ctx.Err()
		}
	}
	if err != nil {
		j.err = err
		j.ops.finish(false)
		close(j.done)
		return j
	}
	j.freeSlot = sync.OnceFunc(func() { <-c.sem })
	go func() {
		defer j.freeSlot()
		defer close(j.done)
		defer j.ops.finish(false)
		j.err = run(j)
	}()
	return j
}

// convertLayer converts or passes through one layer, retrying a download
// that broke.
func (c *Converter) convertLayer(ctx context.Context, j *layerJob, src layerSource) error {
	d := src.desc
	j.report = LayerReport{Source: d.Digest.String(), SourceSize: d.Size, MediaType: string(d.MediaType)}
	switch {
	case PassedThrough(d.MediaType):
		j.layer = src.layer
		j.report.Passthrough = true
		j.report.Digest = d.Digest.String()
		j.report.Size = d.Size
		j.ops.finish(true)
		c.logf("layer %s: %s passed through", short(d.Digest), d.MediaType)
		c.progress(Progress{Source: d.Digest.String(), Stage: StagePassed, Total: d.Size})
		return nil
	case !isTarLayer(d.MediaType):
		return sourceError(d.Digest, "layer %s: unsupported media type %q", d.Digest, d.MediaType)
	}
	start := time.Now()
	fl, err := c.retryDownloads(ctx, "layer "+short(d.Digest), func() (*fileLayer, error) { return c.buildLayer(ctx, j, src) })
	if err != nil {
		c.progress(Progress{Source: d.Digest.String(), Stage: failedStage(ctx), Total: d.Size})
		return fmt.Errorf("layer %s: %w", d.Digest, err)
	}
	if src.scan {
		c.logf("layer %s: read for the layers above it in %.2fs", short(d.Digest), time.Since(start).Seconds())
		return nil
	}
	fl.convertSeconds = time.Since(start).Seconds()
	c.logf("layer %s: converted in %.2fs (%d → %d bytes, %d entries)", short(d.Digest), fl.convertSeconds, d.Size, fl.size, fl.entries)
	return c.publish(ctx, j, fl)
}

// retryDownloads runs build until it succeeds or fails otherwise than by
// a broken download (a *downloadError), at most 4 times.
func (c *Converter) retryDownloads(ctx context.Context, what string, build func() (*fileLayer, error)) (*fileLayer, error) {
	for attempt := 1; ; attempt++ {
		fl, err := build()
		if err == nil || attempt == 4 || !errors.As(err, new(*downloadError)) {
			return fl, err
		}
		c.logf("%s: download broke (%v); retrying (%d/3)", what, err, attempt)
		select {
		case <-time.After(time.Duration(attempt) * 500 * time.Millisecond):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// publish uploads a converted layer (if the target is a registry) and
// fills in the job's report.
func (c *Converter) publish(ctx context.Context, j *layerJob, fl *fileLayer) error {
	p := Progress{Source: j.report.Source, Stage: StageUploading, Total: fl.size}
	if c.opt.Publish != nil {
		// The upload need not hold up the next layer's conversion: with
		// the slot kept, a four-layer image on two jobs would convert its
		// upper two only once the lower two were uploaded, the CPUs idle
		// meanwhile.
		j.freeSlot()
		select {
		case c.up <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		}
		defer func() { <-c.up }()
		c.progress(p)
		t := time.Now()
		report := func(sent, total int64) {
			c.progress(Progress{Source: p.Source, Stage: StageUploading, Read: sent, Total: total})
		}
		if err := c.opt.Publish(context.WithValue(ctx, uploadKey{}, report), fl); err != nil {
			p.Stage = failedStage(ctx)
			c.progress(p)
			return fmt.Errorf("layer %s: upload: %w", fl.digest, err)
		}
		fl.uploadSeconds = time.Since(t).Seconds()
		c.logf("layer %s: uploaded %s in %.2fs", short(fl.sourceDigest), short(fl.digest), fl.uploadSeconds)
	}
	p.Stage, p.Read = StageDone, p.Total
	c.progress(p)
	j.layer = fl
	j.report.Digest, j.report.DiffID = fl.digest.String(), fl.diffID.String()
	j.report.MediaType, j.report.Size = string(fl.mediaType), fl.size
	j.report.Entries, j.report.Warnings = fl.entries, fl.warnings
	j.report.ConvertSeconds, j.report.UploadSeconds = fl.convertSeconds, fl.uploadSeconds
	return nil
}

// SourceError is the error of a source image that is wrong in itself or
// of a kind convert does not take: a blob that is not what its digest
// names (a layer's, the config's), a layer's tar that is not the diff_id
// the config gives it, a layer read whole whose compression or tar is
// broken, a config that is no JSON or lists no diff_id per layer, a
// layer's media type that is neither a tar's nor EROFS, more than
// MaxLayers layers or indexes nested too deep. An image and its blobs
// are named by their digests, so every attempt fails the same way: the
// error is permanent. Its message is Err's.
type SourceError struct {
	Digest v1.Hash // the image, index, config or layer at fault
	Err    error
}

func (e *SourceError) Error() string { return e.Err.Error() }
func (e *SourceError) Unwrap() error { return e.Err }

func sourceError(d v1.Hash, format string, args ...any) error {
	return &SourceError{Digest: d, Err: fmt.Errorf(format, args...)}
}

var errLowerFailed = errors.New("a layer below it did not convert: the directories it implies have no metadata")

// localError reports an error of this machine rather than of the source:
// of a file or a system call (a full disk), a context that ended, a lower
// layer that failed.
func localError(err error) bool {
	return errors.As(err, new(*fs.PathError)) || errors.As(err, new(*os.LinkError)) ||
		errors.As(err, new(*os.SyscallError)) || errors.As(err, new(syscall.Errno)) ||
		errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, errLowerFailed)
}

// downloadError marks a failure of the source stream itself (as opposed to
// its content), which is worth retrying.
type downloadError struct{ err error }

func (e *downloadError) Error() string { return e.err.Error() }
func (e *downloadError) Unwrap() error { return e.err }

// watchReader remembers the first error of the underlying stream and
// reports how much of it was read.
type watchReader struct {
	r      io.Reader
	ctx    context.Context // once done, Read fails with its error
	err    error
	eof    bool // the stream ended cleanly (a registry's blob: digest checked)
	n      int64
	report func(read int64)
}

func (w *watchReader) Read(p []byte) (int, error) {
	if err := w.ctx.Err(); err != nil {
		// A layer stops converting at its next read once its image is
		// given up (the caller's context, or a sibling platform failed).
		w.err = err
		return 0, err
	}
	n, err := w.r.Read(p)
	if err != nil && err != io.EOF && w.err == nil {
		w.err = err
	}
	w.eof = w.eof || err == io.EOF
	w.n += int64(n)
	if w.report != nil && n > 0 {
		w.report(w.n)
	}
	return n, err
}

func (c *Converter) buildLayer(ctx context.Context, j *layerJob, src layerSource) (*fileLayer, error) {
	d, lower := src.desc, src.lower
	rc, err := src.layer.Compressed()
	if err != nil {
		if oci.Transient(err) {
			return nil, &downloadError{err}
		}
		return nil, fmt.Errorf("download: %w", err)
	}
	defer rc.Close()
	in := &watchReader{r: rc, ctx: ctx}
	if !src.scan { // a layer read only for the layers above it is not shown
		in.report = func(n int64) {
			c.progress(Progress{Source: d.Digest.String(), Stage: StageConverting, Read: n, Total: d.Size})
		}
	}
	var raw string
	var f interface {
		io.WriterAt
		Close() error
	} = discard{}
	if !src.scan {
		// A layer over different lower layers (the platforms of an index
		// sharing an upper layer) converts in jobs of its own, at once,
		// and the images may differ (directories it only implies): each
		// gets its own file.
		tf, err := os.CreateTemp(c.tmp, fmt.Sprintf("%.12s-*.erofs", d.Digest.Hex))
		if err != nil {
			return nil, err
		}
		f, raw = tf, tf.Name()
	}
	opt := c.opt.Layer
	opt.Erofs.TempDir = c.tmp
	if c.opt.VerifiedSource && d.Digest == src.diffID {
		// checkSource reads the blob to its end, where its digest is
		// checked (TestVerifiedSourceDiffID).
		opt.knownDiffID = src.diffID.String()
	}
	if !src.alone {
		opt.lower = func() (*whiteout.Tree, bool) { return stackBelow(ctx, lower) }
		opt.bottom = c.opt.SpecMediaTypes && len(lower) == 0
	}
	res, err := buildTar(f, in, opt, j.ops)
	if err == nil {
		err = checkSource(in, res, src)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(raw)
		return nil, layerFailure(ctx, in, d, err)
	}
	var rawEnd int64
	if res.PrefetchOffset > 0 {
		fi, err := os.Stat(raw)
		if err != nil {
			os.Remove(raw)
			return nil, err
		}
		rawEnd = fi.Size()
	}
	if src.scan {
		return &fileLayer{}, nil
	}
	fl, err := c.fileLayer(raw, d.Digest, res.Entries, res.Warnings)
	if fl != nil {
		fl.implied, fl.rootOpaque = res.implied, res.rootOpaque
		fl.prefetchFound = res.prefetchFound
		if res.PrefetchOffset > 0 {
			if fl.annotations == nil {
				fl.annotations = map[string]string{}
			}
			fl.annotations[AnnotationPrefetch] = prefetchRange(res.PrefetchOffset, rawEnd)
		}
	}
	return fl, err
}

// layerFailure says what the failed conversion of the layer of descriptor
// d, read through in, means: the caller gave up, the download broke (a
// *downloadError, retried), or the source is wrong in itself (a
// *SourceError). A failure of this machine (a full disk) is none of them.
func layerFailure(ctx context.Context, in *watchReader, d v1.Descriptor, err error) error {
	if in.err != nil && in.err == ctx.Err() {
		return in.err
	}
	if in.err != nil && oci.Transient(in.err) {
		if !errors.Is(err, in.err) { // the tar reader may have said it already
			err = fmt.Errorf("%w (stream error: %v)", err, in.err)
		}
		return &downloadError{err}
	}
	if d.Size <= 0 || localError(err) {
		return err
	}
	if in.err == nil && !in.eof && in.n == d.Size {
		// All of it came: the read that ends it checks its digest.
		io.CopyN(io.Discard, in, 1)
	}
	switch {
	case in.err != nil && in.n == d.Size:
		// All of it came and was refused at its end: it is not what
		// its digest names (TestClassifyRegistryErrors).
		return &SourceError{Digest: d.Digest, Err: err}
	case in.err == nil && in.eof:
		// Read whole (from a registry: its digest checked) and refused:
		// the same bytes fail the same way on every attempt
		// (TestClassifyConvertErrors). A layer refused before its blob's
		// end is not known to be its digest's, and may be retried.
		return &SourceError{Digest: d.Digest, Err: err}
	}
	return err
}

// fileLayer makes the layer to publish of the EROFS image in raw: hashed,
// wrapped in zstd if asked, with its media type.
func (c *Converter) fileLayer(raw string, source v1.Hash, entries int, warnings []string) (*fileLayer, error) {
	var err error
	fl := &fileLayer{raw: raw, blob: raw, sourceDigest: source, entries: entries, warnings: warnings}
	if fl.diffID, fl.rawSize, err = hashFile(raw); err != nil {
		return nil, err
	}
	if c.opt.SpecMediaTypes && c.opt.Spec.active() {
		return c.specLayer(fl)
	}
	fl.digest, fl.size = fl.diffID, fl.rawSize
	fl.mediaType = MediaTypeLayer
	if c.opt.SpecMediaTypes {
		fl.mediaType = MediaTypeSpec
	}
	if c.opt.LayerZstd {
		fl.blob = raw + ".zst"
		if err := zstdFile(fl.blob, raw); err != nil {
			return nil, fmt.Errorf("zstd: %w", err)
		}
		if fl.digest, fl.size, err = hashFile(fl.blob); err != nil {
			return nil, err
		}
		fl.mediaType = MediaTypeLayerZstd
		if c.opt.SpecMediaTypes {
			fl.mediaType = MediaTypeSpecZstd
		}
	}
	return fl, nil
}

// discard is the output of a scan.
type discard struct{}

func (discard) WriteAt(p []byte, _ int64) (int, error) { return len(p), nil }
func (discard) Close() error                           { return nil }

// checkSource reads the source blob to its end (so that its digest is
// verified: go-containerregistry checks it at EOF) and compares the tar's
// digest with the diff_id the config gives the layer.
func checkSource(in io.Reader, res *Result, src layerSource) error {
	if _, err := io.Copy(io.Discard, in); err != nil {
		return fmt.Errorf("after the end of the layer data: %w", err)
	}
	if res.DiffID != src.diffID.String() {
		return sourceError(src.desc.Digest, "the uncompressed tar is %s, but the config gives diff_id %s", res.DiffID, src.diffID)
	}
	return nil
}

func isTarLayer(mt types.MediaType) bool {
	switch mt {
	case types.DockerLayer, types.DockerUncompressedLayer, types.OCILayer, types.OCILayerZStd, types.OCIUncompressedLayer:
		return true
	}
	return false
}

// PassedThrough reports whether a layer of media type mt is published as it
// is: an EROFS layer already, or one that may not be copied.
func PassedThrough(mt types.MediaType) bool { return IsEROFS(mt) || isNondistributable(mt) }

func isNondistributable(mt types.MediaType) bool {
	switch mt {
	case types.DockerForeignLayer, types.OCIRestrictedLayer, types.OCIUncompressedRestrictedLayer:
		return true
	}
	return false
}

func short(h v1.Hash) string {
	if len(h.Hex) > 12 {
		return h.Algorithm + ":" + h.Hex[:12]
	}
	return h.String()
}

// outImage is a converted image as go-containerregistry's partial package
// wants it: raw manifest and config, layers by digest.
type outImage struct {
	manifest, config []byte
	layers           map[v1.Hash]partial.CompressedLayer
}

func (o *outImage) RawConfigFile() ([]byte, error)      { return o.config, nil }
func (o *outImage) MediaType() (types.MediaType, error) { return types.OCIManifestSchema1, nil }
func (o *outImage) RawManifest() ([]byte, error)        { return o.manifest, nil }
func (o *outImage) LayerByDigest(h v1.Hash) (partial.CompressedLayer, error) {
	if l, ok := o.layers[h]; ok {
		return l, nil
	}
	return nil, fmt.Errorf("no layer %s", h)
}

// IndexReport describes a converted index.
type IndexReport struct {
	Digest string         `json:"digest"`
	Images []*ImageReport `json:"images"`
}

// Index converts the selected platforms of an index into a new index. A
// nested index becomes a nested index of what it holds of those platforms.
func (c *Converter) Index(ctx context.Context, src v1.ImageIndex, srcDesc v1.Descriptor) (v1.ImageIndex, *IndexReport, error) {
	im, err := src.IndexManifest()
	if err != nil {
		return nil, nil, fmt.Errorf("index %s: %w", srcDesc.Digest, err)
	}
	type result struct {
		img v1.Image
		idx v1.ImageIndex
		rep *IndexReport
	}
	sel, results, err := eachEntry(ctx, c, src, srcDesc,
		func(ctx context.Context, img v1.Image, e indexEntry) (r result, err error) {
			var ir *ImageReport
			r.img, ir, err = c.Image(ctx, img, e.desc)
			if ir != nil {
				ir.Platform = platformString(e.platform)
				r.rep = &IndexReport{Images: []*ImageReport{ir}}
			}
			return r, err
		},
		func(ctx context.Context, nested v1.ImageIndex, e indexEntry) (r result, err error) {
			r.idx, r.rep, err = c.Index(ctx, nested, e.desc)
			return r, err
		})
	if err != nil {
		return nil, nil, err
	}
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	rep := &IndexReport{}
	for i, e := range sel {
		d := e.desc
		out := v1.Descriptor{Annotations: map[string]string{}}
		if d.Platform != nil {
			p := *d.Platform
			if e.nested == nil && !c.opt.NoIndexOSFeatures && !contains(p.OSFeatures, "erofs") {
				p.OSFeatures = append(append([]string(nil), p.OSFeatures...), "erofs")
			}
			out.Platform = &p
		}
		for k, v := range d.Annotations {
			out.Annotations[k] = v
		}
		out.Annotations[AnnotationSourceManifest] = d.Digest.String()
		add := mutate.IndexAddendum{Add: results[i].img, Descriptor: out}
		if e.nested != nil {
			add.Add = results[i].idx
		}
		idx = mutate.AppendManifests(idx, add)
		rep.Images = append(rep.Images, results[i].rep.Images...)
	}
	idxAnn := map[string]string{AnnotationSourceManifest: srcDesc.Digest.String()}
	for k, v := range im.Annotations {
		if _, ok := idxAnn[k]; !ok {
			idxAnn[k] = v
		}
	}
	idx = mutate.Annotations(idx, idxAnn).(v1.ImageIndex)
	dg, err := idx.Digest()
	if err != nil {
		return nil, nil, err
	}
	rep.Digest = dg.String()
	return idx, rep, nil
}

// eachEntry runs image on each image of src that the selected platforms
// take, and nested on each nested index holding such images, all at once,
// and returns their results in the index's order. The first to fail
// cancels the others (their ctx): its error is returned, naming the
// platform of an image's.
func eachEntry[R any](ctx context.Context, c *Converter, src v1.ImageIndex, srcDesc v1.Descriptor,
	image func(context.Context, v1.Image, indexEntry) (R, error), nested func(context.Context, v1.ImageIndex, indexEntry) (R, error)) ([]indexEntry, []R, error) {
	sel, err := c.platformManifests(src, srcDesc)
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	results := make([]R, len(sel))
	var (
		mu    sync.Mutex
		first error
		wg    sync.WaitGroup
	)
	fail := func(err error) {
		mu.Lock()
		if first == nil {
			first = err
			cancel()
		}
		mu.Unlock()
	}
	for i, e := range sel {
		if ctx.Err() != nil {
			break // one has failed: start no more
		}
		if e.nested != nil {
			wg.Go(func() {
				var err error
				if results[i], err = nested(ctx, e.nested, e); err != nil {
					fail(err)
				}
			})
			continue
		}
		img, err := src.Image(e.desc.Digest)
		if err != nil {
			fail(fmt.Errorf("manifest %s: %w", e.desc.Digest, err))
			break
		}
		wg.Go(func() {
			var err error
			if results[i], err = image(ctx, img, e); err != nil {
				fail(fmt.Errorf("%s: %w", platformString(e.platform), err))
			}
		})
	}
	wg.Wait()
	if first == nil {
		first = ctx.Err() // the caller's, before all had started
	}
	if first != nil {
		return nil, nil, first
	}
	return sel, results, nil
}

// indexEntry is a manifest of an index that the selected platforms take:
// an image, of the platform its descriptor names (or else its config), or
// a nested index holding such images.
type indexEntry struct {
	desc     v1.Descriptor
	platform *v1.Platform  // an image's
	nested   v1.ImageIndex // a nested index
}

// maxIndexDepth bounds the nesting of indexes.
const maxIndexDepth = 4

// maxIndexManifests bounds the manifests of an index. Real ones list a few
// dozen (platforms and their attestations); go-containerregistry parses
// the whole index again for each one taken, so a hostile registry's index
// of thousands costs minutes and gigabytes.
const maxIndexManifests = 256

// MaxLayers bounds the layers of an image (oci.MaxLayers: overlayfs
// stacks no more); the converter's work for the layers below each layer
// also grows with their square.
const MaxLayers = oci.MaxLayers

// checkLayers refuses a manifest of more than MaxLayers layers.
func checkLayers(m *v1.Manifest, d v1.Descriptor) error {
	if len(m.Layers) > MaxLayers {
		return sourceError(d.Digest, "image %s: %d layers: overlayfs stacks at most %d", d.Digest, len(m.Layers), MaxLayers)
	}
	return nil
}

// platformManifests lists the manifests of an index that the selected
// platforms take. Attestations (platform unknown/unknown) and artifacts
// that are no images are left out.
func (c *Converter) platformManifests(src v1.ImageIndex, srcDesc v1.Descriptor) ([]indexEntry, error) {
	var have []string
	sel, err := c.selectManifests(src, srcDesc, 0, &have)
	if err != nil {
		return nil, err
	}
	if len(sel) == 0 {
		if c.opt.Platforms == nil {
			return nil, fmt.Errorf("index %s: no image in it", srcDesc.Digest)
		}
		return nil, noPlatform("index "+srcDesc.Digest.String(), c.opt.Platforms, have)
	}
	return sel, nil
}

// selectManifests is platformManifests at some depth of nesting; have
// collects the platforms of the images seen.
func (c *Converter) selectManifests(src v1.ImageIndex, srcDesc v1.Descriptor, depth int, have *[]string) ([]indexEntry, error) {
	im, err := src.IndexManifest()
	if err != nil {
		return nil, fmt.Errorf("index %s: %w", srcDesc.Digest, err)
	}
	if len(im.Manifests) > maxIndexManifests {
		return nil, fmt.Errorf("index %s: %d manifests: an index of up to %d is converted", srcDesc.Digest, len(im.Manifests), maxIndexManifests)
	}
	skip := func(d v1.Descriptor, why string) {
		c.logf("index %s: skipping %s (%s)", short(srcDesc.Digest), short(d.Digest), why)
	}
	var sel []indexEntry
	for _, d := range im.Manifests {
		switch {
		case d.MediaType.IsIndex():
			if depth == maxIndexDepth {
				return nil, sourceError(srcDesc.Digest, "index %s: indexes nested more than %d deep", srcDesc.Digest, maxIndexDepth)
			}
			sub, err := src.ImageIndex(d.Digest)
			if err != nil {
				return nil, fmt.Errorf("index %s: %w", d.Digest, err)
			}
			subSel, err := c.selectManifests(sub, d, depth+1, have)
			if err != nil {
				return nil, err
			}
			if len(subSel) == 0 {
				skip(d, "a nested index without the selected platforms")
				continue
			}
			sel = append(sel, indexEntry{desc: d, nested: sub})
		case !d.MediaType.IsImage():
			skip(d, string(d.MediaType))
		case d.Platform != nil && d.Platform.OS == "unknown":
			skip(d, "platform "+d.Platform.String()+": an attestation")
		default:
			p := d.Platform
			if p == nil {
				if p, err = c.configPlatform(src, d); err != nil {
					return nil, err
				}
				if p == nil {
					skip(d, "an artifact: no platform, no image config")
					continue
				}
			}
			*have = append(*have, p.String())
			if PlatformSelected(c.opt.Platforms, *p) {
				sel = append(sel, indexEntry{desc: d, platform: p})
			}
		}
	}
	return sel, nil
}

// configPlatform is the platform of an index's image whose descriptor
// names none: its config's; nil for a manifest whose config is not an
// image's (an artifact).
func (c *Converter) configPlatform(src v1.ImageIndex, d v1.Descriptor) (*v1.Platform, error) {
	img, err := src.Image(d.Digest)
	if err != nil {
		return nil, fmt.Errorf("manifest %s: %w", d.Digest, err)
	}
	m, err := img.Manifest()
	if err != nil {
		return nil, fmt.Errorf("manifest %s: %w", d.Digest, err)
	}
	if !m.Config.MediaType.IsConfig() {
		return nil, nil
	}
	if err := CheckConfigSize(m.Config); err != nil {
		return nil, fmt.Errorf("manifest %s: %w", d.Digest, err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("config of %s: %w", d.Digest, err)
	}
	if p := cf.Platform(); p != nil && p.OS != "" {
		return p, nil
	}
	return &v1.Platform{OS: "unknown", Architecture: "unknown"}, nil
}

func platformString(p *v1.Platform) string {
	if p == nil {
		return "no platform"
	}
	return p.String()
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
