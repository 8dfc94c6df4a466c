// Package cache fills a containerd layer content cache: the EROFS image
// of each tar layer of an image, in the directory layout containerd's
// EROFS snapshotter looks in (layer_content_caches) before it has its
// differ run mkfs.erofs, with the bytes convert would publish for the
// layer.
//
//	c, err := cache.New(dir, cache.Options{Convert: convert.ImageOptions{TempDir: dir}})
//	…
//	defer c.Close()
//	layers, err := c.Image(ctx, img, desc)
//
// Lock keeps runs that share a directory one at a time.
package cache

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/ocierofs/ocierofs/convert"
	"github.com/ocierofs/ocierofs/convert/dmverity"
	"github.com/ocierofs/ocierofs/erofs"
	"github.com/ocierofs/ocierofs/internal/atomicfile"
)

// containerd's EROFS snapshotter, preparing the snapshot of a tar layer,
// looks in its layer content caches (layer_content_caches) for
// DIR/sha256/<first two hex digits>/<hex>.erofs, named by the layer's diffID,
// and uses such a file instead of having the differ run mkfs.erofs. A Cache
// fills such a directory ahead of time, with the same bytes convert would
// publish for the layer.
//
// A layer's EROFS image depends on the layers below it only through the
// directories it implies (convert.LayerFile.Implied). The cache is keyed by the layer's
// own diffID, so the entry made for the first image a layer is seen in is
// the one every image with that layer gets — the same trade containerd
// makes, which converts each layer without looking at the others. An entry
// of a layer that implies directories has a record beside it
// (<entry>.lower.json) of the layers it was made over; an image with other
// layers below gets a warning naming those directories.
//
// An existing entry is trusted only if it is a whole EROFS image (its
// superblock's checksum and size): containerd mounts it as it is, so a
// truncated file would fail every container of the layer.
//
// With Options.DMVerity, each entry made has a dm-verity hash tree after the
// image and a sidecar (<entry>.dmverity) with its root hash, which
// containerd's snapshotter (dmverity_mode "auto" or "on") opens the entry
// with, so that the kernel checks every block read against the root hash.

// Path is where the EROFS image of the tar layer diffID lives in a
// layer content cache.
func Path(dir string, diffID v1.Hash) string {
	hex := diffID.Hex
	if len(hex) < 2 {
		hex = "00" + hex
	}
	return filepath.Join(dir, diffID.Algorithm, hex[:2], diffID.Hex+".erofs")
}

// Layer describes what a Cache did with one layer of an image.
type Layer struct {
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
	// DMVerityRootHash is the root hash in the entry's .dmverity sidecar.
	DMVerityRootHash string   `json:"dmverityRootHash,omitempty"`
	Warnings         []string `json:"warnings,omitempty"`
}

// lowerRecord is what <entry>.lower.json holds: the chain ID of the
// layers an entry was made over, and the directories it implies.
type lowerRecord struct {
	LowerChainID string   `json:"lowerChainID"`
	Implied      []string `json:"implied"`
	// Alone: made of the layer alone (Options.OverLower unset), the implied
	// directories root-owned 0755.
	Alone bool `json:"alone,omitempty"`
	// RootOpaque: the layer has an opaque marker on its root, carried
	// out as whiteouts of what the layers below have at the root (none
	// when made alone).
	RootOpaque bool `json:"rootOpaque,omitempty"`
}

// readLowerRecord reads the lower record beside the entry at path.
func readLowerRecord(path string) (lowerRecord, bool) {
	var r lowerRecord
	raw, err := os.ReadFile(path + ".lower.json")
	return r, err == nil && json.Unmarshal(raw, &r) == nil
}

// madeOverLower reports whether the entry at p was made over some image's
// lower layers (Options.OverLower, or a version before it).
func madeOverLower(p string) bool {
	r, ok := readLowerRecord(p)
	return ok && !r.Alone && r.LowerChainID != ""
}

// chainIDs are the OCI chain IDs of the layers of diffIDs: of layer i,
// the stack of layers 0…i.
func chainIDs(diffIDs []v1.Hash) []string {
	ids := make([]string, len(diffIDs))
	for i, d := range diffIDs {
		if i == 0 {
			ids[i] = d.String()
			continue
		}
		sum := sha256.Sum256([]byte(ids[i-1] + " " + d.String()))
		ids[i] = "sha256:" + hex.EncodeToString(sum[:])
	}
	return ids
}

// lowerWarning is the warning for an entry of path made over other layers
// than those below it in this image (lower: their chain ID); "" if none.
func lowerWarning(path, lower string) string {
	r, ok := readLowerRecord(path)
	made := r.LowerChainID // the layers below it when it was made
	if r.Alone {
		made = ""
	}
	if !ok || len(r.Implied) == 0 && !r.RootOpaque || made == lower {
		return ""
	}
	var what []string
	if made == "" {
		if len(r.Implied) > 0 {
			what = append(what, fmt.Sprintf("the directories it implies (%s) are root-owned 0755, not this image's", strings.Join(r.Implied, ", ")))
		}
		if r.RootOpaque {
			what = append(what, "its opaque marker on the root hides nothing of this image's lower layers (overlayfs ignores it there)")
		}
		return "the cache entry was made with no layer below it (of its layer alone, or as an image's first): " + strings.Join(what, "; ")
	}
	if len(r.Implied) > 0 {
		what = append(what, fmt.Sprintf("the directories it implies (%s) have their metadata, not this image's", strings.Join(r.Implied, ", ")))
	}
	if r.RootOpaque {
		what = append(what, "its opaque marker on the root whites out what they have at the root, not what this image's have")
	}
	return fmt.Sprintf("the cache entry was made over other lower layers (%s): %s", r.LowerChainID, strings.Join(what, "; "))
}

// checkEntry returns the size and dm-verity root hash of the entry at p if
// it is whole, or why not (fs.ErrNotExist if there is none): an EROFS image
// with its superblock's checksum and size, and, if it has a sidecar, the
// tree that describes after it (containerd opens it as that; CheckLayout
// checks its root against the sidecar, not every block); one without a
// sidecar is not enough when needVerity.
func checkEntry(p string, needVerity bool) (size int64, rootHash string, err error) {
	f, err := os.Open(p)
	if err != nil {
		return 0, "", err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return 0, "", err
	}
	if !st.Mode().IsRegular() {
		return 0, "", errors.New("not a regular file")
	}
	img, err := erofs.Open(f, st.Size())
	if err != nil {
		return 0, "", err
	}
	sb := img.Super()
	if !sb.ChecksumOK {
		return 0, "", errors.New("the superblock's checksum is wrong")
	}
	data := int64(sb.Blocks) * int64(sb.BlockSize)
	m, err := dmverity.ReadSidecar(p)
	switch {
	case errors.Is(err, fs.ErrNotExist) && needVerity:
		return 0, "", errors.New("no dm-verity sidecar")
	case errors.Is(err, fs.ErrNotExist) && data != st.Size():
		return 0, "", fmt.Errorf("%d bytes, but the image is %d", st.Size(), data)
	case errors.Is(err, fs.ErrNotExist):
		return st.Size(), "", nil
	case err != nil:
		return 0, "", err
	}
	if err := dmverity.CheckLayout(f, st.Size(), data, verityBlockSize(int(sb.BlockSize)), m); err != nil {
		return 0, "", err
	}
	return st.Size(), m.RootHash, nil
}

// verityBlockSize is the dm-verity data block size of an image of
// blockSize: the same, up to 4 KiB (the device's logical block size must
// not exceed the filesystem's).
func verityBlockSize(blockSize int) int { return min(blockSize, dmverity.BlockSize) }

// Options of a Cache.
type Options struct {
	// Convert are the options of the Converter that makes the entries
	// (the layer's build options, jobs, progress, log). Its TempDir is
	// best on the cache directory's filesystem: entries are linked into
	// place from there, not copied.
	Convert convert.ImageOptions
	// Present, if set, tells whether the entry at path is there already;
	// by default an entry is there if it is a whole EROFS image. (The
	// mirror marks the layers it has elsewhere with empty files.)
	Present func(path string) bool
	// DMVerity appends a dm-verity hash tree to each entry made and
	// writes the entry's sidecar (<entry>.dmverity), as containerd's
	// dmverity_mode wants; an entry without a sidecar is made again.
	DMVerity bool
	// NoSync leaves the entries unsynced: for a cache directory that is
	// scratch space (the mirror's), not a node's.
	NoSync bool
	// OverLower makes the entries as convert's Image makes the layers:
	// the directories a layer implies take their metadata from the layers
	// below in this image. By default an entry is made of its layer
	// alone, as containerd's differ makes it on the node, since an entry
	// is found by its layer's diffID for every image: made over one
	// image's layers, the first image cached would set the owner and mode
	// of those directories in every other image's containers
	// (TestCacheLowerLayers). The mirror, which publishes what it
	// converts, sets it.
	OverLower bool
}

// A Cache fills the layer content cache in one directory with the layers
// of images, converted by a Converter of its own (so that the platforms of
// an index that share a layer convert it once). Close removes its temp
// files.
type Cache struct {
	conv *convert.Converter
	dir  string
	opt  Options
	// place serializes placing entries: an entry and its sidecar go into
	// place together.
	place sync.Mutex
	// finished holds each converted layer made ready to be an entry
	// (finishEntry), once for the jobs of every platform that share it,
	// by the path of its image.
	mu       sync.Mutex
	finished map[string]*finishOnce
}

// New makes a Cache of the directory dir.
func New(dir string, opt Options) (*Cache, error) {
	conv, err := convert.NewConverter(opt.Convert)
	if err != nil {
		return nil, err
	}
	return &Cache{conv: conv, dir: dir, opt: opt, finished: map[string]*finishOnce{}}, nil
}

// Close removes the converted layers kept in the temp directory (placed
// entries stay).
func (c *Cache) Close() error { return c.conv.Close() }

// CheckPlatform refuses an image whose config names a platform other than
// the selected ones (Converter.CheckPlatform).
func (c *Cache) CheckPlatform(img v1.Image, desc v1.Descriptor) error {
	return c.conv.CheckPlatform(img, desc)
}

func (c *Cache) logf(format string, args ...any) {
	if c.opt.Convert.Log != nil {
		c.opt.Convert.Log(fmt.Sprintf(format, args...))
	}
}

// Image converts the layers of src that the cache does not hold yet into
// it. Entries appear atomically (temp file and rename), so a rerun, or
// containerd reading the cache meanwhile, never sees half an image.
func (c *Cache) Image(ctx context.Context, src v1.Image, srcDesc v1.Descriptor) ([]Layer, error) {
	m, cfg, err := convert.ReadImage(ctx, src, srcDesc)
	if err != nil {
		return nil, err
	}
	cs := &cacheRun{c: c, m: m, diffIDs: cfg.RootFS.DiffIDs, chains: chainIDs(cfg.RootFS.DiffIDs), alone: !c.opt.OverLower}
	top := cs.lookup()
	if top < 0 {
		return cs.out, nil
	}
	jobs, err := c.conv.StartLayers(ctx, src, m, cs.diffIDs, cs.modes(top))
	if err != nil {
		return nil, err
	}
	for i, j := range jobs {
		if j == nil {
			continue
		}
		fl, err := j.Wait(ctx)
		if err != nil {
			return nil, err
		}
		if err := cs.place(i, fl); err != nil {
			return nil, err
		}
	}
	return cs.out, nil
}

// cacheRun is Image's work on one image: out is its result, a Layer per
// layer.
type cacheRun struct {
	c       *Cache
	m       *v1.Manifest
	diffIDs []v1.Hash
	chains  []string
	alone   bool // each entry made of its layer alone (not Options.OverLower)
	out     []Layer
}

// lowerChain is the chain ID of the layers below layer i; "" for none.
func (cs *cacheRun) lowerChain(i int) string {
	if i == 0 {
		return ""
	}
	return cs.chains[i-1]
}

// lookup fills out with what the cache holds, and returns the highest
// layer to convert (-1: none).
func (cs *cacheRun) lookup() int {
	c := cs.c
	cs.out = make([]Layer, len(cs.m.Layers))
	top := -1
	for i, d := range cs.m.Layers {
		out := &cs.out[i]
		*out = Layer{Source: d.Digest.String(), DiffID: cs.diffIDs[i].String()}
		if !convert.IsTarLayer(d.MediaType) {
			out.Skipped = fmt.Sprintf("media type %s is not a tar layer", d.MediaType)
			continue
		}
		p := Path(c.dir, cs.diffIDs[i])
		out.Path = p
		var size int64
		var root string
		var err error
		ok := true
		if c.opt.Present != nil {
			ok = c.opt.Present(p) // the caller's markers: nothing to open
		} else if size, root, err = checkEntry(p, c.opt.DMVerity); err != nil {
			ok = false
			if !errors.Is(err, fs.ErrNotExist) {
				c.logf("layer %s: cache entry %s: %v: making it again", short(d.Digest), p, err)
			}
		}
		if ok && cs.alone && madeOverLower(p) {
			ok = false
			c.logf("layer %s: cache entry %s was made over the layers below it (by an earlier version): making it of the layer alone", short(d.Digest), p)
		}
		if !ok {
			top = i
			continue
		}
		out.Cached, out.Size, out.DMVerityRootHash = true, size, root
		cs.warnLower(i)
	}
	return top
}

// warnLower adds the warning of a cache entry made over other layers below
// it than layer i's, where entries are made over the layers below.
func (cs *cacheRun) warnLower(i int) {
	if cs.alone {
		return
	}
	if w := lowerWarning(cs.out[i].Path, cs.lowerChain(i)); w != "" {
		cs.out[i].Warnings = append(cs.out[i].Warnings, w)
	}
}

// modes says how to convert layers 0 … top: each missing one, alone or
// over the layers below; those below a missing one, with their own entry
// there already, are read again for their directories (scanned, not
// written) where entries are made over the layers below.
func (cs *cacheRun) modes(top int) []convert.LayerMode {
	modes := make([]convert.LayerMode, top+1)
	for i := range modes {
		have := cs.out[i].Cached || cs.out[i].Skipped != ""
		switch {
		case cs.alone && have:
			modes[i] = convert.SkipLayer // made of itself: nothing below it is read
		case cs.alone:
			modes[i] = convert.LayerAlone
		case have:
			modes[i] = convert.ScanLayer
		default:
			modes[i] = convert.LayerOverLower
		}
	}
	return modes
}

// place puts the image fl made of layer i into the cache,
// unless another platform or run placed it meanwhile.
func (cs *cacheRun) place(i int, fl *convert.LayerFile) error {
	c, out, d := cs.c, &cs.out[i], cs.m.Layers[i]
	if out.Cached || out.Skipped != "" {
		return nil
	}
	out.Warnings = append(out.Warnings, fl.Warnings...)
	t := time.Now()
	var rec *lowerRecord
	switch {
	case len(fl.Implied) == 0 && !fl.RootOpaque:
	case cs.alone:
		rec = &lowerRecord{Alone: true, Implied: fl.Implied, RootOpaque: fl.RootOpaque}
	default:
		rec = &lowerRecord{LowerChainID: cs.lowerChain(i), Implied: fl.Implied, RootOpaque: fl.RootOpaque}
	}
	entry, err := c.finishEntry(fl, c.opt.DMVerity, !c.opt.NoSync)
	if err != nil {
		return fmt.Errorf("layer %s: %w", d.Digest, err)
	}
	c.place.Lock()
	there, err := placeEntry(fl.Path, out.Path, rec, entry.verity, !c.opt.NoSync, cs.alone)
	c.place.Unlock()
	if err != nil {
		return fmt.Errorf("layer %s: cache entry %s: %w", d.Digest, out.Path, err)
	}
	if there != nil {
		// Placed meanwhile, for another platform or by another run.
		out.Cached = true
		out.Size, out.DMVerityRootHash = there.size, there.rootHash
		cs.warnLower(i)
		return nil
	}
	out.Size = entry.size
	if entry.verity != nil {
		out.DMVerityRootHash = entry.verity.RootHash
	}
	out.ConvertSeconds = fl.ConvertSeconds
	c.logf("layer %s: cached as %s (%.2fs)", short(d.Digest), out.Path, time.Since(t).Seconds())
	return nil
}

// Index runs Image for the selected platforms of an index (and of the
// indexes nested in it).
func (c *Cache) Index(ctx context.Context, src v1.ImageIndex, srcDesc v1.Descriptor) ([]Layer, error) {
	results, err := convert.EachImage(ctx, c.conv, src, srcDesc,
		func(ctx context.Context, img v1.Image, desc v1.Descriptor, platform string) ([]Layer, error) {
			ls, err := c.Image(ctx, img, desc)
			for j := range ls {
				ls[j].Platform = platform
			}
			return ls, err
		})
	if err != nil {
		return nil, err
	}
	var all []Layer
	for _, ls := range results {
		all = append(all, ls...)
	}
	return all, nil
}

// short is a digest shortened for the log.
func short(h v1.Hash) string {
	if len(h.Hex) > 12 {
		return h.Algorithm + ":" + h.Hex[:12]
	}
	return h.String()
}

// placeEntry puts the image at src into the cache at dst, its dm-verity
// sidecar (verity; none if nil) before it and its lower record after it,
// unless a whole entry is there already (placed by another run, or by
// another platform's job in the cache's lock and the Converter's): then it
// returns that entry's size and root hash, and nil once it placed src. An entry appears at once and whole: src (complete,
// in the converter's temp directory, which cache keeps in the cache
// directory) is linked into place; across filesystems it is copied into a
// temp file beside dst first. A damaged entry (checkEntry) is replaced.
// src is synced already (finishEntry); with durable, the directory is
// synced once the entry is in it.
func placeEntry(src, dst string, rec *lowerRecord, verity *dmverity.Metadata, durable, alone bool) (there *entryThere, err error) {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return nil, err
	}
	// Runs that share the cache without sharing its lock (Lock; a user
	// of a Cache may not take it) place an entry and its
	// sidecar one at a time: otherwise one run's sidecar could end up
	// beside another's entry.
	unlock, err := atomicfile.LockDir(filepath.Dir(dst))
	if err != nil {
		return nil, err
	}
	defer unlock()
	if _, err := os.Lstat(dst); err == nil {
		// One made over lower layers (an earlier version) is replaced
		// by one of the layer alone.
		if size, root, err := checkEntry(dst, verity != nil); err == nil && !(alone && madeOverLower(dst)) {
			return &entryThere{size, root}, nil
		}
		if err := os.Remove(dst); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
	}
	// containerd reads the sidecar of an entry it finds: it goes first,
	// and a stale one goes.
	if verity != nil {
		err = dmverity.WriteSidecar(dst, *verity)
	} else if err = os.Remove(dmverity.SidecarPath(dst)); errors.Is(err, os.ErrNotExist) {
		err = nil
	}
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(src, 0o644); err != nil {
		return nil, err
	}
	err = os.Link(src, dst)
	if errors.Is(err, syscall.EXDEV) {
		var tmp string
		if tmp, err = copyTemp(src, filepath.Dir(dst), filepath.Base(dst)); err != nil {
			return nil, err
		}
		err = os.Link(tmp, dst)
		os.Remove(tmp)
	}
	switch {
	case errors.Is(err, os.ErrExist):
		// Placed just now by a run that does not lock (an older
		// version, or a filesystem without locks).
		size, root, err := checkEntry(dst, verity != nil)
		if err != nil {
			return nil, fmt.Errorf("placed meanwhile by another run: %w", err)
		}
		return &entryThere{size, root}, nil
	case err != nil:
		return nil, err
	}
	sync := func() error {
		if !durable {
			return nil
		}
		// DIR/sha256/xx/entry: the entry's directory and those above it,
		// which the first entry of its kind makes. containerd may mount
		// an entry soon after it appears, and a crash must not leave a
		// name without data.
		for d, i := filepath.Dir(dst), 0; i < 3; d, i = filepath.Dir(d), i+1 {
			if err := atomicfile.SyncDir(d); err != nil {
				return err
			}
		}
		return nil
	}
	if rec == nil {
		os.Remove(dst + ".lower.json")
		return nil, sync()
	}
	raw, err := json.Marshal(rec)
	if err == nil {
		err = atomicfile.WriteFile(dst+".lower.json", raw)
	}
	if err == nil {
		err = sync()
	}
	return nil, err
}

// entryThere is a whole cache entry that placeEntry found in place.
type entryThere struct {
	size     int64
	rootHash string
}

// copyTemp copies src into a new temp file in dir for the file named name,
// synced, and returns its path.
func copyTemp(src, dir, name string) (string, error) {
	return atomicfile.WriteTemp(dir, name, func(f *os.File) error {
		in, err := os.Open(src)
		if err != nil {
			return err
		}
		defer in.Close()
		_, err = io.Copy(f, in)
		return err
	})
}

// LockName is the lock file Lock makes in a cache directory.
const LockName = ".ocierofs-cache.lock"

// Lock takes the lock of the cache directory dir (made if missing),
// so that runs filling it one after another convert each layer once, and
// removes what a run killed while placing an entry left behind. wait is
// called once if another run holds the lock. unlock lets go of it.
func Lock(ctx context.Context, dir string, wait func()) (unlock func(), err error) {
	var f *os.File
	for {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
		lock := filepath.Join(dir, LockName)
		if f, err = os.OpenFile(lock, os.O_CREATE|os.O_RDWR, 0o644); errors.Is(err, fs.ErrNotExist) {
			continue // removed since MkdirAll by a run that made it and failed
		} else if err != nil {
			return nil, err
		}
		if _, err = atomicfile.Flock(ctx, f, wait); err != nil {
			f.Close()
			if ctx.Err() != nil {
				return nil, err
			}
			return nil, fmt.Errorf("lock %s: %w", f.Name(), err)
		}
		wait = nil // said once
		// A run that failed in a directory it made removes the lock file
		// while it holds it: then this lock is of a file gone, and
		// another run may have made a new one.
		held, err1 := f.Stat()
		now, err2 := os.Stat(lock)
		if err1 == nil && err2 == nil && os.SameFile(held, now) {
			break
		}
		f.Close()
	}
	// Copies into place across filesystems, lower records and sidecars
	// that a killed run left half written (atomicfile's temp files; lower
	// records of earlier versions were written as *.new).
	left, _ := filepath.Glob(filepath.Join(dir, "*", "*", ".tmp-*"))
	more, _ := filepath.Glob(filepath.Join(dir, "*", "*", "*.lower.json.new"))
	for _, p := range append(left, more...) {
		os.Remove(p)
	}
	// A sidecar goes into place before its entry: one without an entry
	// is what a run killed in between left.
	sidecars, _ := filepath.Glob(filepath.Join(dir, "*", "*", "*.erofs.dmverity"))
	for _, p := range sidecars {
		if _, err := os.Lstat(strings.TrimSuffix(p, ".dmverity")); errors.Is(err, fs.ErrNotExist) {
			os.Remove(p)
		}
	}
	return func() { f.Close() }, nil
}

// finishedEntry is a converted layer made ready to be a cache entry.
type finishedEntry struct {
	size   int64
	verity *dmverity.Metadata // nil without a tree
}

// finishOnce is the finishing of one converted layer (finishEntry).
type finishOnce struct {
	once  sync.Once
	entry finishedEntry
	err   error
}

// finishEntry readies the converted layer fl to be placed, once for every
// platform sharing its job: its dm-verity tree appended (verity), and the
// file synced (durable).
func (c *Cache) finishEntry(fl *convert.LayerFile, verity, durable bool) (finishedEntry, error) {
	c.mu.Lock()
	f := c.finished[fl.Path]
	if f == nil {
		f = &finishOnce{}
		c.finished[fl.Path] = f
	}
	c.mu.Unlock()
	f.once.Do(func() {
		f.entry, f.err = finishFile(fl.Path, fl.Size, verity, durable)
	})
	return f.entry, f.err
}

func finishFile(p string, size int64, verity, durable bool) (e finishedEntry, err error) {
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		return e, err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}()
	e.size = size
	if verity {
		img, err := erofs.Open(f, size)
		if err != nil {
			return e, err
		}
		m, err := dmverity.Format(f, size, verityBlockSize(int(img.Super().BlockSize)))
		if err != nil {
			return e, err
		}
		e.verity = &m
		if st, err := f.Stat(); err == nil {
			e.size = st.Size()
		}
	}
	if durable {
		err = f.Sync()
	}
	return e, err
}
