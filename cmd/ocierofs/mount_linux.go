package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"

	"github.com/ocierofs/ocierofs/cmd/internal/options"
	"github.com/ocierofs/ocierofs/convert"
	"github.com/ocierofs/ocierofs/convert/spec"
	"github.com/ocierofs/ocierofs/erofs"
	"github.com/ocierofs/ocierofs/internal/mountinfo"
	"github.com/ocierofs/ocierofs/lazy"
	"github.com/ocierofs/ocierofs/mount"
	"github.com/ocierofs/ocierofs/oci"
)

var lazyMountCommand = &cli.Command{
	Name:      "mount",
	Usage:     "mount an EROFS image's merged root filesystem read-only, fetching only what is read",
	ArgsUsage: "IMAGE MOUNTPOINT",
	Description: "IMAGE: a converted image (EROFS layers) in a registry or oci:DIR[:TAG]. Each layer\n" +
		"is served through FUSE and the layers are stacked by the kernel's overlayfs at\n" +
		"MOUNTPOINT. Registry layers are read with HTTP range requests into a chunk cache\n" +
		"on disk (--cache-dir, shared by every mount of layers it holds). A layer with the\n" +
		"EROFS image spec's chunk index (convert --media-type spec --chunk-index) is read\n" +
		"through it, by ranges, each chunk checked against the index; a +zstd layer without\n" +
		"one is fetched whole first. A layout's raw files are read in place. Layers\n" +
		"with the spec's device role (convert --layout device) are the extra devices of\n" +
		"the next EROFS layer; one with its overlay-data role (convert --layout\n" +
		"overlay-data) is a data-only lower layer of the overlay (Linux 6.5+).\n" +
		"The command stays in the foreground and serves the mount until SIGINT, SIGTERM,\n" +
		"or `ocierofs umount MOUNTPOINT`. A read the registry cannot serve within\n" +
		"--read-timeout (after retries) fails with EIO; the mount stays.\n" +
		"--prefetch list (the default) fetches first, in the background, the region of\n" +
		"each layer converted with a prefetch list (convert --prefetch-list): the listed\n" +
		"files and the metadata, in few requests. --prefetch all does that, then fetches\n" +
		"every layer when reads leave the network idle, and checks each against its\n" +
		"digest: from then on every chunk is checked before use. Needs root (or access\n" +
		"to /dev/fuse and mount rights).",
	Flags: slices.Concat(
		options.Only(options.SourceFlags(), "username", "password", "plain-http", "insecure", "stall-timeout"),
		options.LoginFlags(),
		[]cli.Flag{
			&cli.StringFlag{Name: "platform", DefaultText: options.HostPlatform(), Usage: "the image of an index to mount"},
			&cli.StringFlag{Name: "cache-dir", DefaultText: "/var/cache/ocierofs/chunks as root, else $XDG_CACHE_HOME/ocierofs/chunks", Usage: "where fetched chunks are kept"},
			&cli.StringFlag{Name: "cache-size", Value: "10G", Usage: "bound of the chunk cache (K, M, G, T); the least recently used chunks go past it"},
			&cli.StringFlag{Name: "prefetch", Value: "list", Usage: "none; list: the region a prefetch list laid out (convert --prefetch-list), fetched first in the background; all: that, then every layer, fetched and checked"},
			&cli.DurationFlag{Name: "read-timeout", Value: lazy.DefaultTimeout, Usage: "fail a read (EIO) whose bytes the registry has not given in this long, retries included"},
			&cli.StringFlag{Name: "record", Usage: "write the path of each file opened, in the order of first opening, to `FILE` when the mount ends"},
			&cli.BoolFlag{Name: "debug", Usage: "log every FUSE request on stderr"},
		}),
	Action: func(c *cli.Context) error {
		if c.NArg() != 2 {
			return fmt.Errorf("mount: want IMAGE MOUNTPOINT")
		}
		ctx, stop := interruptible(c.Context)
		defer stop()
		return runMount(ctx, c, c.Args().Get(0), c.Args().Get(1))
	},
}

var lazyUmountCommand = &cli.Command{
	Name:      "umount",
	Usage:     "unmount what ocierofs mount mounted, and stop its server",
	ArgsUsage: "MOUNTPOINT",
	Action: func(c *cli.Context) error {
		if c.NArg() != 1 {
			return fmt.Errorf("umount: want MOUNTPOINT")
		}
		return runUmount(c.Args().First())
	},
}

// runDir holds a directory per mount: the layers' mount points and the
// pid of the server, found by the mount point's name.
func runDir() string {
	if os.Geteuid() == 0 {
		return "/run/ocierofs"
	}
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		return filepath.Join(d, "ocierofs")
	}
	return filepath.Join(os.TempDir(), fmt.Sprintf("ocierofs-%d", os.Geteuid()))
}

// mountState is the run directory of the mount at target.
func mountState(target string) string {
	sum := sha256.Sum256([]byte(target))
	return filepath.Join(runDir(), fmt.Sprintf("mnt-%x", sum[:8]))
}

func defaultCacheDir() string {
	if os.Geteuid() == 0 {
		return "/var/cache/ocierofs/chunks"
	}
	d, err := os.UserCacheDir()
	if err != nil {
		d = os.TempDir()
	}
	return filepath.Join(d, "ocierofs", "chunks")
}

// parseByteSize reads a byte count with an optional K, M, G or T suffix.
func parseByteSize(s string) (int64, error) {
	unit := int64(1)
	if i := len(s) - 1; i > 0 {
		if k := strings.IndexByte("KMGT", s[i]&^0x20); k >= 0 {
			s, unit = s[:i], int64(1)<<(10*(k+1))
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 || n > (1<<62)/unit {
		return 0, fmt.Errorf("size %q: want bytes, or a number with K, M, G or T", s)
	}
	return n * unit, nil
}

func runMount(ctx context.Context, c *cli.Context, ref, target string) error {
	target, state, cacheSize, err := mountChecks(c, target)
	if err != nil {
		return err
	}
	src, rem, img, err := mountSource(ctx, c, ref)
	if err != nil {
		return err
	}
	blobSrc, err := mountBlobs(ctx, src, rem, ref)
	if err != nil {
		return err
	}
	cacheDir := c.String("cache-dir")
	if cacheDir == "" {
		cacheDir = defaultCacheDir()
	}
	logf := func(s string) { fmt.Fprintf(os.Stderr, "%s %s\n", time.Now().Format("15:04:05"), s) }
	lopt := lazy.Options{Timeout: c.Duration("read-timeout"), Log: logf}
	var cache *lazy.Cache
	openCache := func() (*lazy.Cache, error) {
		if cache == nil {
			cache, err = lazy.OpenCache(cacheDir, cacheSize)
		}
		return cache, err
	}
	layers, blobs, regions, closers, err := openLayers(ctx, img, blobSrc, openCache, lopt, logf)
	defer func() {
		for _, cl := range closers {
			cl.Close()
		}
	}()
	if err != nil {
		return fmt.Errorf("%s: %w", ref, err)
	}
	rec := &recorder{}
	mopt := mount.Options{Log: logf, Debug: c.Bool("debug")}
	if c.String("record") != "" {
		mopt.Record = rec.add
	}
	if err := os.MkdirAll(state, 0o700); err != nil {
		return err
	}
	defer os.RemoveAll(state)
	m, err := mount.Stack(target, filepath.Join(state, "layers"), layers, mopt)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(state, "pid"), []byte(strconv.Itoa(os.Getpid())+"\n"), 0o600); err != nil {
		m.Unmount()
		return err
	}
	fmt.Fprintf(os.Stderr, "mounted %s at %s (%s)\n", ref, target, count(len(layers), "layer"))
	switch mode := c.String("prefetch"); {
	case mode == "all" && len(blobs)+len(regions) > 0:
		go func() {
			prefetchRegions(ctx, regions, logf)
			prefetchAll(ctx, blobs, logf)
		}()
	case mode == "list" && len(regions) > 0:
		go prefetchRegions(ctx, regions, logf)
	}
	waitUnmounted(ctx, target)
	err = m.Unmount()
	if cache != nil {
		st := cache.Stats()
		fmt.Fprintf(os.Stderr, "unmounted %s: fetched %d bytes in %s\n", target, st.Bytes, count(int(st.Requests), "request"))
	}
	if name := c.String("record"); name != "" {
		if werr := rec.write(name); werr != nil && err == nil {
			err = fmt.Errorf("--record: %w", werr)
		}
	}
	return err
}

// mountChecks checks what mount needs before it reads anything: FUSE, a
// directory to mount on that ocierofs does not serve already (what a
// killed server left there is cleared), and the flags. It returns the
// mount point's absolute path, its state directory and the cache bound.
func mountChecks(c *cli.Context, target string) (abs, state string, cacheSize int64, err error) {
	if err := mount.Available(); err != nil {
		return "", "", 0, err
	}
	if abs, err = filepath.Abs(target); err != nil {
		return "", "", 0, err
	}
	if fi, err := os.Stat(abs); err != nil || !fi.IsDir() {
		return "", "", 0, fmt.Errorf("mount point %s: not a directory", abs)
	}
	if p := c.String("prefetch"); p != "all" && p != "list" && p != "none" {
		return "", "", 0, fmt.Errorf("--prefetch %q: want none, list or all", p)
	}
	if cacheSize, err = parseByteSize(c.String("cache-size")); err != nil {
		return "", "", 0, fmt.Errorf("--cache-size: %w", err)
	}
	state = mountState(abs)
	if pid, ok := serverOf(state); ok {
		return "", "", 0, fmt.Errorf("%s: already mounted by ocierofs (pid %d): ocierofs umount %s", abs, pid, abs)
	}
	// A server that was killed left its mounts, whose reads fail.
	detachLeftovers(abs, state)
	return abs, state, cacheSize, nil
}

// mountSource resolves the image to mount (of an index, the platform
// asked for), logged in as convert logs in.
func mountSource(ctx context.Context, c *cli.Context, ref string) (oci.Ref, oci.Remote, v1.Image, error) {
	src, err := oci.ParseRef(ref, c.Bool("plain-http") || c.Bool("insecure"))
	if err != nil {
		return src, oci.Remote{}, nil, err
	}
	rem := oci.Remote{Insecure: c.Bool("insecure"), StallTimeout: options.StallTimeout(c)}
	if rem, _, err = options.Credentials(ctx, c, rem, src, nil); err != nil {
		return src, rem, nil, err
	}
	art, err := oci.Get(ctx, src, rem)
	if err != nil {
		return src, rem, nil, err
	}
	img := art.Image
	if art.Index != nil {
		img, err = platformImage(art, c.String("platform"))
	}
	return src, rem, img, err
}

// mountBlobs is where the layers' bytes come from: the registry's blob
// endpoint by ranges, or an OCI layout's files.
func mountBlobs(ctx context.Context, src oci.Ref, rem oci.Remote, ref string) (lazy.Source, error) {
	switch src.Kind {
	case oci.Registry:
		repo := src.Name.Context()
		client, err := rem.BlobClient(ctx, repo)
		if err != nil {
			return nil, err
		}
		return lazy.Registry(client, repo), nil
	case oci.Layout:
		return lazy.Layout(src.Path), nil
	}
	return nil, fmt.Errorf("%s: mount reads images in a registry or an OCI layout", ref)
}

// openLayers opens every layer of img as an EROFS image: a layout's raw
// layer in place, a registry's by ranges through the cache, a +zstd one
// fetched whole into the cache. blobs are the ranged ones, to prefetch;
// regions are the prefetch-list regions of the ranged ones that have one.
func openLayers(ctx context.Context, img v1.Image, src lazy.Source, openCache func() (*lazy.Cache, error), lopt lazy.Options, logf func(string)) (layers []mount.Layer, blobs []*lazy.Blob, regions []prefetchRegion, closers []io.Closer, err error) {
	ls, err := img.Layers()
	if err != nil {
		return nil, nil, nil, nil, err
	}
	m, err := img.Manifest()
	if err != nil {
		return nil, nil, nil, nil, err
	}
	if len(m.Layers) != len(ls) {
		return nil, nil, nil, nil, fmt.Errorf("manifest of %d layers, image of %d", len(m.Layers), len(ls))
	}
	o := &layerOpener{ctx: ctx, src: src, openCache: openCache, lopt: lopt, logf: logf, descs: m.Layers}
	// The EROFS image spec's device layers so far: the extra devices of
	// the next EROFS layer that is no device (§3.8 rule 2), not layers of
	// the overlay themselves.
	var devices []erofs.OpenOption
	for i, l := range ls {
		dg, err := l.Digest()
		if err != nil {
			return nil, nil, nil, closers, err
		}
		mt, err := l.MediaType()
		if err != nil {
			return nil, nil, nil, closers, err
		}
		if mt == convert.MediaTypeChunkIndex {
			continue // read with the layer before it
		}
		if !convert.IsEROFS(mt) {
			return nil, nil, nil, closers, fmt.Errorf("layer %d (%s) is %s, not EROFS: convert the image first (ocierofs convert)", i, dg, mt)
		}
		size, err := l.Size()
		if err != nil {
			return nil, nil, nil, closers, err
		}
		r, n, b, c, err := o.reader(i, dg, mt, size)
		if c != nil {
			closers = append(closers, c)
		}
		if err != nil {
			return nil, nil, nil, closers, err
		}
		if b != nil {
			blobs = append(blobs, b)
		}
		if pr, ok := prefetchRegionOf(i, m.Layers[i], r, n, logf); ok {
			regions = append(regions, pr)
		}
		role := m.Layers[i].Annotations[spec.AnnotationRole]
		if role == spec.RoleDevice {
			devices = append(devices, erofs.WithDevice(r, n))
			continue
		}
		ei, err := erofs.Open(r, n, devices...)
		if err != nil {
			return nil, nil, nil, closers, fmt.Errorf("layer %d (%s): %w", i, dg, err)
		}
		devices = nil
		// The EROFS image spec's overlay-data layer is a data-only
		// lower layer of the overlay: the layer above reads its files.
		dataOnly := role == spec.RoleOverlayData
		layers = append(layers, mount.Layer{Image: ei, Name: "ocierofs:" + dg.String(), DataOnly: dataOnly})
	}
	if len(devices) > 0 {
		return nil, nil, nil, closers, errors.New("device layers with no EROFS layer above them to use them (§3.8)")
	}
	return layers, blobs, regions, closers, nil
}

// prefetchRegionOf is the prefetch-list region of layer i (descriptor d,
// read lazily by r, n bytes of image data), if it has one.
func prefetchRegionOf(i int, d v1.Descriptor, r io.ReaderAt, n int64, logf func(string)) (prefetchRegion, bool) {
	a, ok := d.Annotations[convert.AnnotationPrefetch]
	if !ok || !isLazy(r) {
		return prefetchRegion{}, false
	}
	off, end, err := convert.ParsePrefetchRange(a, n)
	if err != nil {
		logf(fmt.Sprintf("layer %d (%s): %v: no prefetch of its listed files", i, d.Digest, err))
		return prefetchRegion{}, false
	}
	return prefetchRegion{layer: i, r: r, off: off, end: end}, true
}

// layerOpener opens the layers of one image for a mount.
type layerOpener struct {
	ctx       context.Context
	src       lazy.Source
	openCache func() (*lazy.Cache, error)
	lopt      lazy.Options
	logf      func(string)
	descs     []v1.Descriptor // the manifest's layers
}

// reader opens layer i (digest dg, media type mt, size bytes of blob):
// through its chunk index, whole (+zstd without one), in place (a file of
// an OCI layout) or by ranges, each block checked against its dm-verity
// tree where it has one. blob is the lazily read blob, if any; closer,
// if set, is to be closed with the mount.
func (o *layerOpener) reader(i int, dg v1.Hash, mt types.MediaType, size int64) (r io.ReaderAt, n int64, blob *lazy.Blob, closer io.Closer, err error) {
	p, inPlace := lazy.FilePath(o.src, dg)
	zstdLayer := strings.HasSuffix(string(mt), "+zstd")
	if hasChunkIndex(o.descs, i) && (zstdLayer || !inPlace) {
		// Read by ranges through the index, each chunk checked.
		cache, err := o.openCache()
		if err != nil {
			return nil, 0, nil, closer, err
		}
		b, err := cache.Ranged(o.src, dg, size, o.lopt)
		if err != nil {
			return nil, 0, nil, closer, err
		}
		x, err := openChunkIndex(cache, o.src, b, o.descs, i, o.lopt, o.logf)
		if err != nil {
			return nil, 0, nil, closer, err
		}
		if x != nil {
			ix, err := lazy.NewIndexed(b, x)
			if err != nil {
				return nil, 0, nil, closer, err
			}
			o.logf(fmt.Sprintf("layer %d (%s): read by ranges through its chunk index (%s), each checked", i, dg, count(x.Len(), "chunk")))
			blob = b
			r, n = ix, ix.Size()
		}
	}
	switch {
	case r != nil:
	case zstdLayer:
		cache, err := o.openCache()
		if err != nil {
			return nil, 0, nil, closer, err
		}
		o.logf(fmt.Sprintf("layer %d (%s) is +zstd, which has no chunk index to read ranges by: fetching it whole (%d bytes)", i, dg, size))
		b, err := cache.Whole(o.ctx, o.src, dg, func(r io.Reader) (io.ReadCloser, error) { return oci.Decompressor("zstd", r) }, o.lopt)
		if err != nil {
			return nil, 0, nil, closer, fmt.Errorf("layer %d: %w", i, err)
		}
		r, n = b, b.Size()
	case inPlace:
		f, err := os.Open(p)
		if err != nil {
			return nil, 0, nil, closer, fmt.Errorf("layer %d: %w", i, err)
		}
		closer = f
		r, n = f, size
	default:
		cache, err := o.openCache()
		if err != nil {
			return nil, 0, nil, closer, err
		}
		b, err := cache.Ranged(o.src, dg, size, o.lopt)
		if err != nil {
			return nil, 0, nil, closer, err
		}
		blob = b
		r, n = b, size
	}
	if _, ok := o.descs[i].Annotations[convert.AnnotationVerityRootDigest]; ok && isLazy(r) {
		v, err := verityOf(r, o.descs[i].Annotations, n)
		if err != nil {
			return nil, 0, nil, closer, fmt.Errorf("layer %d (%s): %w", i, dg, err)
		}
		o.logf(fmt.Sprintf("layer %d (%s): each block read is checked against its dm-verity tree", i, dg))
		r, n = v, v.Size()
	}
	return r, n, blob, closer, nil
}

// prefetchRegion is the region of a layer that its prefetch list laid out
// (convert.AnnotationPrefetch): bytes [off, end) of the image read by r.
type prefetchRegion struct {
	layer    int
	r        io.ReaderAt
	off, end int64
}

// isLazy reports a reader that fetches through the cache (not a layout's
// file, nor a layer fetched whole and checked against its digest).
func isLazy(r io.ReaderAt) bool {
	switch r.(type) {
	case *lazy.Indexed, *lazy.Verity, *lazy.Blob:
		return true
	}
	return false
}

// verityOf checks the image data r reads (n bytes) against the dm-verity
// tree that the layer's annotations locate (convert --dmverity).
func verityOf(r io.ReaderAt, ann map[string]string, n int64) (*lazy.Verity, error) {
	off, err := strconv.ParseInt(ann[convert.AnnotationVerityHashOffset], 10, 64)
	if err != nil || off <= 0 || off >= n {
		return nil, fmt.Errorf("%s %q: want an offset within the image data's %d bytes", convert.AnnotationVerityHashOffset, ann[convert.AnnotationVerityHashOffset], n)
	}
	bs, err := strconv.Atoi(ann[convert.AnnotationVerityBlockSize])
	if err != nil {
		return nil, fmt.Errorf("%s %q: %w", convert.AnnotationVerityBlockSize, ann[convert.AnnotationVerityBlockSize], err)
	}
	hexRoot, ok := strings.CutPrefix(ann[convert.AnnotationVerityRootDigest], "sha256:")
	root, err := hex.DecodeString(hexRoot)
	if !ok || err != nil || len(root) != sha256.Size {
		return nil, fmt.Errorf("%s %q: want sha256:HEX", convert.AnnotationVerityRootDigest, ann[convert.AnnotationVerityRootDigest])
	}
	return lazy.NewVerity(r, off, bs, [sha256.Size]byte(root))
}

// prefetchRegions fetches each layer's prefetch-list region, in few
// requests, before anything else is prefetched.
func prefetchRegions(ctx context.Context, regions []prefetchRegion, logf func(string)) {
	for _, g := range regions {
		if err := lazy.PrefetchRange(ctx, g.r, g.off, g.end); err != nil {
			if ctx.Err() == nil {
				logf(fmt.Sprintf("prefetch: layer %d: its listed files: %v", g.layer, err))
			}
			continue
		}
		logf(fmt.Sprintf("prefetch: layer %d: its listed files and metadata fetched (%d bytes)", g.layer, g.end-g.off))
	}
}

// prefetchAll fetches and checks each blob in turn, in the background.
func prefetchAll(ctx context.Context, blobs []*lazy.Blob, logf func(string)) {
	for _, b := range blobs {
		if err := b.Prefetch(ctx); err != nil {
			if ctx.Err() == nil {
				logf(fmt.Sprintf("prefetch: %v", err))
			}
			continue
		}
		logf(fmt.Sprintf("prefetch: blob %s fetched and checked", b.Digest()))
	}
}

// waitUnmounted returns when ctx ends (a signal), or when target is no
// longer a mount point (unmounted by umount(8), say).
func waitUnmounted(ctx context.Context, target string) {
	tick := time.NewTicker(2 * time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			if !isMountPoint(target) {
				return
			}
		}
	}
}

// isMountPoint reports whether /proc/self/mountinfo lists p.
func isMountPoint(p string) bool {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return true
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fs := strings.Fields(sc.Text()); len(fs) > 4 && mountinfo.Unescape(fs[4]) == p {
			return true
		}
	}
	return false
}

// serverOf is the pid of the live server of the mount whose run directory
// is state.
func serverOf(state string) (int, bool) {
	raw, err := os.ReadFile(filepath.Join(state, "pid"))
	if err != nil {
		return 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil || pid <= 0 {
		return 0, false
	}
	if err := unix.Kill(pid, 0); err != nil && !errors.Is(err, unix.EPERM) {
		return 0, false
	}
	return pid, true
}

// runUmount stops the server of the mount at target, which unmounts it;
// where no server lives any more, it unmounts what is left itself.
func runUmount(target string) error {
	target, err := filepath.Abs(target)
	if err != nil {
		return err
	}
	state := mountState(target)
	if pid, ok := serverOf(state); ok {
		if err := unix.Kill(pid, unix.SIGTERM); err != nil {
			return fmt.Errorf("umount %s: signal pid %d: %w", target, pid, err)
		}
		for range 300 {
			if _, ok := serverOf(state); !ok || unix.Kill(pid, 0) != nil {
				return nil
			}
			time.Sleep(100 * time.Millisecond)
		}
		return fmt.Errorf("umount %s: pid %d did not stop in 30s", target, pid)
	}
	if _, err := os.Stat(state); err != nil {
		return fmt.Errorf("umount %s: not mounted by ocierofs mount", target)
	}
	return detachLeftovers(target, state)
}

// detachLeftovers detaches what a server that no longer runs left mounted
// at target and under its run directory state, and removes state. Without
// state, target is not touched: it is not known to be ocierofs's.
func detachLeftovers(target, state string) error {
	if _, err := os.Stat(state); err != nil {
		return nil
	}
	var left []string
	if isMountPoint(target) {
		left = append(left, target)
	}
	layers, _ := filepath.Glob(filepath.Join(state, "layers", "*"))
	for _, p := range layers {
		if isMountPoint(p) {
			left = append(left, p)
		}
	}
	for _, p := range left {
		if err := unix.Unmount(p, unix.MNT_DETACH); err != nil {
			return fmt.Errorf("umount %s: %w", p, err)
		}
	}
	return os.RemoveAll(state)
}

// recorder keeps the paths of files in the order of their first opening.
type recorder struct {
	mu    sync.Mutex
	seen  map[string]bool
	paths []string
}

func (r *recorder) add(p string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.seen == nil {
		r.seen = map[string]bool{}
	}
	if !r.seen[p] {
		r.seen[p] = true
		r.paths = append(r.paths, p)
	}
}

func (r *recorder) write(name string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	var b strings.Builder
	for _, p := range r.paths {
		b.WriteString("/" + p + "\n")
	}
	return os.WriteFile(name, []byte(b.String()), 0o644)
}
