package convert_test

// Kernel round trip: every tar of the corpus (corpus_test.go), under every
// option the matrix names, is converted, loop-mounted and compared with
//
//   A. GNU tar's extraction of the same tar as root, whiteouts mapped to
//      their overlayfs form (the reference);
//   B. fstree.FromTar, the expected tree worked out from the tar alone
//      (implied directories 0755 root:root with the build time);
//   C. the tree github.com/erofs/go-erofs reads from the image;
//   D. the tree the project's own reader (erofs.Image) reads;
//
// and fsck.erofs (erofs-utils 1.5) must accept the image.

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	kgzip "github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
	"golang.org/x/sys/unix"

	"github.com/ocierofs/ocierofs/convert"
	"github.com/ocierofs/ocierofs/convert/fstree"
	"github.com/ocierofs/ocierofs/convert/internal/convtest"
	"github.com/ocierofs/ocierofs/convert/internal/roundtrip"
	"github.com/ocierofs/ocierofs/convert/mkfs"
	"github.com/ocierofs/ocierofs/erofs"
	"github.com/ocierofs/ocierofs/whiteout"
)

// rtCase is one conversion of one corpus tar.
type rtCase struct {
	name  string
	tar   string // corpus tar name
	codec string // "", "gz" or "zst"
	opt   convert.Options
	// fsckExtract also runs fsck.erofs --extract and compares what it
	// wrote with the mount.
	fsckExtract bool
}

func (rc rtCase) whiteouts() whiteout.Mode { return rc.opt.Whiteouts }

func opts(bs int, noInline bool, buildTime time.Time) convert.Options {
	return convert.Options{Erofs: erofs.Options{BlockSize: bs, NoInlineData: noInline, BuildTime: buildTime}}
}

func roundTripCases() []rtCase {
	var cs []rtCase
	add := func(tarName, variant string, o convert.Options, mod func(*rtCase)) {
		rc := rtCase{name: tarName + "_" + variant, tar: tarName, opt: o}
		if mod != nil {
			mod(&rc)
		}
		cs = append(cs, rc)
	}
	// The big GNU-made tars under the whole block size × inline matrix; one
	// of them without a build time (implied directories then take the most
	// common mtime, which the comparisons ignore).
	for _, name := range []string{"full-gnu", "full-pax"} {
		for _, bs := range []int{4096, 512, 1024} {
			for _, noInline := range []bool{false, true} {
				v := fmt.Sprintf("bs%d", bs)
				if noInline {
					v += "-noinline"
				}
				bt := tBuild
				if bs == 1024 && !noInline {
					bt = time.Time{}
					v += "-nobuildtime"
				}
				add(name, v, opts(bs, noInline, bt), func(rc *rtCase) {
					rc.fsckExtract = bs == 4096 && !noInline
				})
			}
		}
	}
	keep := opts(4096, false, tBuild)
	keep.Whiteouts = whiteout.Keep
	add("full-pax", "bs4096-keep", keep, nil)
	add("full-pax", "bs4096-gzip", opts(4096, false, tBuild), func(rc *rtCase) { rc.codec = "gz" })
	add("full-gnu", "bs512-noinline-zstd", opts(512, true, tBuild), func(rc *rtCase) { rc.codec = "zst" })
	for _, name := range []string{"longlinks-gnu", "longlinks-pax"} {
		add(name, "bs4096", opts(4096, false, tBuild), nil)
		add(name, "bs512", opts(512, false, tBuild), nil)
		add(name, "bs1024-noinline", opts(1024, true, tBuild), nil)
	}
	add("ustar", "bs4096", opts(4096, false, tBuild), nil)
	add("ustar", "bs512-noinline", opts(512, true, tBuild), nil)
	add("sparse-gnu", "bs4096", opts(4096, false, tBuild), nil)
	add("sparse-gnu", "bs512", opts(512, false, tBuild), nil)
	add("sparse-pax01", "bs4096", opts(4096, false, tBuild), nil)
	add("sparse-pax01", "bs1024-noinline", opts(1024, true, tBuild), nil)
	add("sparse-pax10", "bs4096-noinline", opts(4096, true, tBuild), nil)
	add("sparse-pax10", "bs512", opts(512, false, tBuild), nil)
	for _, name := range []string{"whiteouts", "wh-then-file", "dups", "paths", "libarchive", "replace", "empty", "xattr-limits"} {
		add(name, "bs4096", opts(4096, false, tBuild), func(rc *rtCase) { rc.fsckExtract = name == "whiteouts" })
		add(name, "bs512-noinline", opts(512, true, tBuild), nil)
	}
	add("whiteouts", "bs4096-keep", keep, nil)
	add("whiteouts", "bs1024-gzip", opts(1024, false, tBuild2), func(rc *rtCase) { rc.codec = "gz" })
	add("whiteouts", "bs4096-zstd-nobuildtime", opts(4096, false, time.Time{}), func(rc *rtCase) { rc.codec = "zst" })
	add("paths", "bs4096-keep", keep, nil)

	// Compressed images: lz4 and lz4hc × pcluster 4 KiB, 64 KiB, 1 MiB ×
	// tail packing × fragments on the tar with every entry type; two
	// configurations on each of the others.
	zopts := func(name string, level, pc int, tail, frag bool) (string, convert.Options) {
		o := opts(4096, false, tBuild)
		o.Erofs.Compression = &erofs.Compression{Algorithm: erofs.AlgLZ4, Level: level, PclusterSize: pc, TailPacking: tail, Fragments: frag}
		v := fmt.Sprintf("%s-pc%dk", name, pc>>10)
		if tail {
			v += "-tail"
		}
		if frag {
			v += "-frag"
		}
		return v, o
	}
	for _, lz := range []struct {
		name  string
		level int
	}{{"lz4", 0}, {"lz4hc", 9}} {
		for _, pc := range []int{4096, 65536, 1 << 20} {
			for _, tail := range []bool{false, true} {
				for _, frag := range []bool{false, true} {
					v, o := zopts(lz.name, lz.level, pc, tail, frag)
					add("full-pax", v, o, func(rc *rtCase) { rc.fsckExtract = !frag })
				}
			}
		}
	}
	for _, name := range []string{"full-gnu", "longlinks-pax", "sparse-gnu", "whiteouts", "dups", "replace", "libarchive"} {
		v, o := zopts("lz4", 0, 65536, true, false)
		add(name, v, o, nil)
		v, o = zopts("lz4hc", 12, 16384, false, true)
		add(name, v, o, nil)
	}

	// The other codecs over the tar with every entry type: MicroLZMA at
	// levels 0, 1, 6, 9 × pcluster 4K, 64K, 1M, tail packing and fragments
	// taking each combination in turn; DEFLATE and zstd twice each.
	other := func(alg erofs.Algorithm, level, pc int, tail, frag bool) (string, convert.Options) {
		v, o := zopts(alg.String(), level, pc, tail, frag)
		o.Erofs.Compression.Algorithm = alg
		return fmt.Sprintf("%s%d-%s", alg, level, v[len(alg.String())+1:]), o
	}
	i := 0
	for _, level := range []int{0, 1, 6, 9} {
		for _, pc := range []int{4096, 65536, 1 << 20} {
			v, o := other(erofs.AlgLZMA, level, pc, i&1 != 0, i&2 != 0)
			add("full-pax", v, o, nil)
			i++
		}
	}
	for _, alg := range []erofs.Algorithm{erofs.AlgDeflate, erofs.AlgZstd} {
		level, _ := erofs.DefaultLevel(alg)
		v, o := other(alg, level, 4096, false, false)
		add("full-pax", v, o, nil)
		v, o = other(alg, level, 65536, true, true)
		add("full-gnu", v, o, nil)
	}

	// Chunk dedupe, a blob with the data, a tar index over the tar (with
	// the tar as a device, and appended).
	chunked := func(bs, chunk int) convert.Options {
		o := opts(bs, false, tBuild)
		o.Erofs.ChunkSize = chunk
		return o
	}
	blob := func(bs, chunk int) convert.Options {
		o := chunked(bs, chunk)
		o.Blob = "layer.blob" // in the case's directory
		return o
	}
	tarIndex := func(appendTar bool) convert.Options {
		o := opts(0, false, tBuild)
		o.TarIndex, o.AppendTar = true, appendTar
		return o
	}
	for _, name := range []string{"full-pax", "full-gnu", "sparse-gnu", "dups", "whiteouts"} {
		add(name, "chunk4k", chunked(4096, 4096), func(rc *rtCase) { rc.fsckExtract = name == "full-pax" })
		add(name, "blob", blob(4096, 0), nil)
		add(name, "tarindex", tarIndex(false), nil)
		add(name, "tarindex-append", tarIndex(true), nil)
	}
	add("full-pax", "chunk64k-bs1024", chunked(1024, 65536), nil)
	add("sparse-pax10", "chunk16k", chunked(4096, 16384), nil)
	add("full-gnu", "blob-chunk64k-bs512", blob(512, 65536), nil)
	for _, name := range []string{"longlinks-pax", "libarchive", "sparse-pax01", "paths"} {
		add(name, "tarindex", tarIndex(false), nil)
	}
	return cs
}

// refCache holds what several cases of one tar share: the expected trees
// and the extracted references.
type refCache struct {
	dir       string
	fromTar   map[string]*fstree.Tree
	extracted map[string]*fstree.Tree
}

func (rc *refCache) want(t *testing.T, ct *corpusTar, wh whiteout.Mode, implied time.Time) *fstree.Tree {
	k := fmt.Sprintf("%s|%s|%d", ct.name, wh, implied.UnixNano())
	if tr := rc.fromTar[k]; tr != nil {
		return tr
	}
	tr := convtest.TreeFromTar(t, ct.path, fstree.TarOptions{Whiteouts: wh, ImpliedDirMtime: implied})
	rc.fromTar[k] = tr
	return tr
}

func (rc *refCache) ref(t *testing.T, ct *corpusTar, wh whiteout.Mode, want *fstree.Tree) *fstree.Tree {
	k := ct.name + "|" + wh.String()
	if tr := rc.extracted[k]; tr != nil {
		return tr
	}
	dir := filepath.Join(rc.dir, "ref-"+ct.name+"-"+wh.String())
	must(t, os.MkdirAll(dir, 0o755))
	roundtrip.ExtractGNU(t, ct.path, dir)
	if wh == whiteout.Overlay {
		roundtrip.MapWhiteouts(t, dir, want)
	}
	tr := convtest.TreeFromDir(t, dir)
	rc.extracted[k] = tr
	return tr
}

func TestRoundTrip(t *testing.T) {
	roundtrip.RequireMount(t)
	base := roundtrip.WorkDir(t)
	c := buildCorpus(t, base)
	refs := &refCache{dir: base, fromTar: map[string]*fstree.Tree{}, extracted: map[string]*fstree.Tree{}}
	for _, rc := range roundTripCases() {
		t.Run(rc.name, func(t *testing.T) { runRoundTrip(t, c, refs, rc) })
	}
	// Directory input (mkfs.BuildDir): the source tree is the reference.
	for _, dc := range []struct {
		name, dir string
		opt       convert.Options
	}{
		{"dir-full_bs4096", c.src, opts(4096, false, tBuild)},
		{"dir-full_bs512-noinline", c.src, opts(512, true, time.Time{})},
		{"dir-ustar_bs1024", c.ustarSrc, opts(1024, false, tBuild)},
	} {
		t.Run(dc.name, func(t *testing.T) { runDirRoundTrip(t, dc.dir, dc.opt) })
	}
	// The comparisons can fail: an image made with whiteouts=keep is not
	// what the overlay references describe.
	t.Run("harness-self-check", func(t *testing.T) {
		ct := c.get(t, "whiteouts")
		o := opts(4096, false, tBuild)
		o.Whiteouts = whiteout.Keep
		img, _ := buildImage(t, roundtrip.WorkDir(t), ct.path, o)
		got := convtest.TreeFromDir(t, roundtrip.Mount(t, img))
		want := refs.want(t, ct, whiteout.Overlay, tBuild)
		for name, tr := range map[string]*fstree.Tree{"FromTar": want, "GNU tar": refs.ref(t, ct, whiteout.Overlay, want)} {
			d := fstree.Diff(tr, got, fstree.DiffOptions{IgnoreRootMeta: true})
			if !slices.Contains(d, "missing: "+pWhGone) || !slices.Contains(d, "extra: dir1/.wh.gone") {
				t.Errorf("%s vs a whiteouts=keep mount: the differences %q miss the whiteout", name, d)
			}
		}
	})
}

func runRoundTrip(t *testing.T, c *corpus, refs *refCache, rc rtCase) {
	ct := c.get(t, rc.tar)
	src := ct.path
	if rc.codec != "" {
		src = roundtrip.Compress(t, src, rc.codec)
	}
	var img string
	var res *convert.Result
	var devices []string // extra devices: a blob, the tar of a tar index
	if o := rc.opt; o.Blob != "" || o.TarIndex {
		dir := roundtrip.WorkDir(t)
		img = filepath.Join(dir, "image.erofs")
		if o.Blob != "" {
			o.Blob = filepath.Join(dir, o.Blob)
			devices = []string{o.Blob}
		}
		if o.TarIndex && !o.AppendTar {
			devices = []string{src}
		}
		var err error
		if res, err = mkfs.Build(img, src, o); err != nil {
			t.Fatalf("mkfs.Build(%s): %v", filepath.Base(src), err)
		}
	} else {
		img, res = buildImage(t, roundtrip.WorkDir(t), src, rc.opt)
	}
	wantComp := map[string]convert.Compression{"": convert.Uncompressed, "gz": convert.Gzip, "zst": convert.Zstd}[rc.codec]
	if res.Compression != wantComp {
		t.Errorf("Result.Compression = %q, want %q", res.Compression, wantComp)
	}
	for _, w := range res.Warnings {
		t.Logf("converter warning: %s", w)
	}
	// ROUNDTRIP_KEEP=DIR keeps a copy of every image and its tar there.
	if d := os.Getenv("ROUNDTRIP_KEEP"); d != "" {
		exec.Command("cp", img, filepath.Join(d, rc.name+".erofs")).Run()
		exec.Command("cp", src, filepath.Join(d, rc.tar+".tar")).Run()
	}
	mnt := roundtrip.Mount(t, img, devices...)
	got := convtest.TreeFromDir(t, mnt)
	if got.Len() < ct.minEntries {
		t.Errorf("mounted tree has %d entries, want at least %d", got.Len(), ct.minEntries)
	}

	wh := rc.whiteouts()
	bt := rc.opt.Erofs.BuildTime
	want := refs.want(t, ct, wh, bt)
	implied := func(p string) bool { n := want.Node(p); return n != nil && n.Implied }

	// B: the tree the tar describes.
	convtest.ReportDiff(t, "FromTar vs mount", fstree.Diff(want, got, fstree.DiffOptions{IgnoreImpliedMtime: bt.IsZero()}))

	// A: GNU tar's extraction. Directories tar had to create itself have
	// the time of extraction, and without a root entry the root is the
	// extraction directory.
	if ct.refOK {
		ref := refs.ref(t, ct, wh, want)
		convtest.ReportDiff(t, "GNU tar extraction vs mount", fstree.Diff(ref, got, fstree.DiffOptions{
			IgnoreRootMeta: implied("."),
			Ignore: func(p, field string) bool {
				if field == "mtime" && implied(p) {
					return true
				}
				return ct.refIgnore != nil && ct.refIgnore(p, field)
			},
		}))
	}

	// C and D: the independent reader and the project's reader.
	switch {
	case rc.opt.Blob != "" || rc.opt.TarIndex:
		t.Log("go-erofs skipped: v0.3.1 reads no extra devices")
	case rc.opt.Erofs.Compression == nil:
		checkGoErofs(t, img, got)
	default:
		checkCompressed(t, img, ct.full)
	}
	convtest.ReportDiff(t, "erofs.Image vs mount", fstree.Diff(roundtrip.ProjectTree(t, img, devices...), got, fstree.DiffOptions{}))

	bs := rc.opt.Erofs.BlockSize
	if rc.opt.TarIndex {
		bs = 512
	}
	var devArgs []string
	for _, d := range devices {
		devArgs = append(devArgs, "--device="+d)
	}
	if skip := roundtrip.Fsck(t, img, bs, devArgs...); skip != "" {
		t.Logf("fsck.erofs skipped: %s", skip)
	} else if rc.fsckExtract {
		checkFsckExtract(t, img, bs, got)
	}

	checkDirect(t, ct, rc, img, mnt)
}

func runDirRoundTrip(t *testing.T, src string, opt convert.Options) {
	want := convtest.TreeFromDir(t, src)
	want.MarkWhiteoutDirs() // overlayfs whiteouts in src, if any
	img := filepath.Join(roundtrip.WorkDir(t), "image.erofs")
	res, err := mkfs.Build(img, src, opt)
	if err != nil {
		t.Fatalf("mkfs.Build(%s): %v", src, err)
	}
	for _, w := range res.Warnings {
		t.Logf("converter warning: %s", w)
	}
	mnt := roundtrip.Mount(t, img)
	got := convtest.TreeFromDir(t, mnt)
	if got.Len() != want.Len() || got.Len() < 20 {
		t.Errorf("mounted tree has %d entries, the source %d", got.Len(), want.Len())
	}
	convtest.ReportDiff(t, "source dir vs mount", fstree.Diff(want, got, fstree.DiffOptions{}))
	checkGoErofs(t, img, got)
	convtest.ReportDiff(t, "erofs.Image vs mount", fstree.Diff(roundtrip.ProjectTree(t, img), got, fstree.DiffOptions{}))
	if skip := roundtrip.Fsck(t, img, opt.Erofs.BlockSize); skip != "" {
		t.Logf("fsck.erofs skipped: %s", skip)
	}
}

// checkCompressed makes sure a compressed image's test is about compressed
// files (the full tars have files that compress; in the others tiny files
// may all stay plain): go-erofs v0.3.1 reads no compressed image, so the
// comparisons above rest on the kernel, GNU tar and the project's reader.
func checkCompressed(t *testing.T, img string, mustCompress bool) {
	r := readImage(t, img)
	n := 0
	var walk func(dir string)
	walk = func(dir string) {
		ents, err := r.ReadDir(dir)
		if err != nil {
			t.Errorf("ReadDir(%s): %v", dir, err)
			return
		}
		for _, e := range ents {
			p := path.Join(dir, e.Name())
			ino, err := r.Lstat(p)
			if err != nil {
				t.Errorf("%v", err)
				continue
			}
			if ino.Layout == erofs.LayoutCompressedFull || ino.Layout == erofs.LayoutCompressedCompact {
				n++
			}
			if ino.IsDir() {
				walk(p)
			}
		}
	}
	walk(".")
	if n == 0 && mustCompress {
		t.Errorf("compression asked for, yet no file of the image is compressed")
	}
}

// checkGoErofs compares the tree go-erofs reads with the mount.
func checkGoErofs(t *testing.T, img string, got *fstree.Tree) {
	ge, err := roundtrip.GoErofsTree(img)
	if err != nil {
		t.Errorf("go-erofs cannot read the image: %v", err)
		return
	}
	convtest.ReportDiff(t, "go-erofs vs mount", fstree.Diff(ge, got, fstree.DiffOptions{}))
}

// checkFsckExtract compares what fsck.erofs 1.5 --extract writes with the
// mount, on the fields 1.5 restores: it writes no xattrs, makes no hard
// links, leaves symlink times, loses setuid/setgid and (before 1.8) the
// holes of sparse files; everything else must match.
func checkFsckExtract(t *testing.T, img string, bs int, got *fstree.Tree) {
	dir := filepath.Join(roundtrip.WorkDir(t), "x")
	if skip := roundtrip.Fsck(t, img, bs, "--extract="+dir); skip != "" {
		t.Logf("fsck.erofs --extract skipped: %s", skip)
		return
	}
	ext := convtest.TreeFromDir(t, dir)
	r := readImage(t, img)
	convtest.ReportDiff(t, "fsck.erofs --extract vs mount", fstree.Diff(ext, got, fstree.DiffOptions{
		IgnoreRootMeta: true,
		Ignore: func(p, field string) bool {
			n := got.Node(p)
			switch {
			case strings.HasPrefix(field, "xattr:") || field == "links":
				return true // 1.5 extracts neither
			case n == nil:
				return false
			case field == "mtime":
				return n.Type() == erofs.S_IFLNK
			case field == "mode":
				// 1.5 calls chmod before lchown, which clears them
				// (fixed upstream after 1.5).
				return n.Perm()&0o6000 != 0
			case field == "size" || field == "content":
				// Before 1.8 (erofs-utils b063ea3) extraction skips the
				// holes of chunk-based files instead of seeking over them.
				ino, err := r.Lstat(p)
				return err == nil && ino.Layout == erofs.LayoutChunkBased
			}
			return false
		},
	}))
}

// checkDirect asserts a few things about the mount itself, so that the
// comparisons above could not pass on a tree that is empty or wrong in
// the same way everywhere.
func checkDirect(t *testing.T, ct *corpusTar, rc rtCase, img, mnt string) {
	overlay := rc.opt.Whiteouts == whiteout.Overlay
	lstat := func(p string) *unix.Stat_t {
		var st unix.Stat_t
		if err := unix.Lstat(filepath.Join(mnt, p), &st); err != nil {
			t.Errorf("direct: %v", err)
			return nil
		}
		return &st
	}
	xattr := func(p, name string) (string, bool) {
		b := make([]byte, 1<<16)
		n, err := unix.Lgetxattr(filepath.Join(mnt, p), name, b)
		if err != nil {
			return "", false
		}
		return string(b[:n]), true
	}
	isWhiteout := func(p string) {
		if st := lstat(p); st != nil && (st.Mode&unix.S_IFMT != unix.S_IFCHR || st.Rdev != 0) {
			t.Errorf("direct: %s: mode %#o rdev %d:%d, want a whiteout (char 0:0)", p, st.Mode, unix.Major(st.Rdev), unix.Minor(st.Rdev))
		}
	}
	isOpaque := func(p string) {
		if v, ok := xattr(p, whiteout.OpaqueXattr); !ok || v != "y" {
			t.Errorf("direct: %s: %s = %q (present %v), want \"y\"", p, whiteout.OpaqueXattr, v, ok)
		}
	}
	r := readImage(t, img)
	// The image is whole blocks, as many as the superblock says: a loop
	// device drops a partial last sector.
	// An appended tar follows them.
	if fi, err := os.Stat(img); err == nil {
		var tail int64
		if rc.opt.AppendTar {
			tfi, err := os.Stat(ct.path)
			must(t, err)
			tail = tfi.Size()
		}
		if sb := r.Super(); fi.Size() != int64(sb.Blocks)*int64(sb.BlockSize)+tail {
			t.Errorf("direct: image is %d bytes, the superblock says %d blocks of %d (%d bytes), plus a tar of %d",
				fi.Size(), sb.Blocks, sb.BlockSize, int64(sb.Blocks)*int64(sb.BlockSize), tail)
		}
	}

	if ct.full {
		ents, err := os.ReadDir(filepath.Join(mnt, pManyDir))
		if err != nil || len(ents) != manyEntries {
			t.Errorf("direct: %s has %d entries (%v), want %d", pManyDir, len(ents), err, manyEntries)
		}
		if st := lstat(pBig); st != nil && st.Size != bigSize {
			t.Errorf("direct: %s: size %d, want %d", pBig, st.Size, bigSize)
		}
		// The kernel reports st_blocks from i_size for uncompressed files,
		// so the holes show in the layout and in the image size instead.
		if st := lstat(pSparse); st != nil && st.Size != sparseSize {
			t.Errorf("direct: %s: size %d, want %d", pSparse, st.Size, sparseSize)
		}
		for _, p := range []string{pSparse, pAllHole} {
			if ino, err := r.Lstat(p); err != nil || ino.Layout != erofs.LayoutChunkBased {
				t.Errorf("direct: %s: layout %v (%v), want chunk-based with holes", p, layoutOf(ino), err)
			}
		}
		if st := lstat(pBigChar); st != nil && (unix.Major(st.Rdev) != 4095 || unix.Minor(st.Rdev) != 1048575 || st.Mode&unix.S_IFMT != unix.S_IFCHR) {
			t.Errorf("direct: %s: mode %#o rdev %d:%d, want char 4095:1048575", pBigChar, st.Mode, unix.Major(st.Rdev), unix.Minor(st.Rdev))
		}
		if st := lstat(pBigBlock); st != nil && (unix.Major(st.Rdev) != 259 || unix.Minor(st.Rdev) != 300000 || st.Mode&unix.S_IFMT != unix.S_IFBLK) {
			t.Errorf("direct: %s: mode %#o rdev %d:%d, want block 259:300000", pBigBlock, st.Mode, unix.Major(st.Rdev), unix.Minor(st.Rdev))
		}
		if st := lstat(pHugeUID); st != nil && (st.Uid != 4294967294 || st.Gid != 4294967294) {
			t.Errorf("direct: %s: uid/gid %d/%d, want 4294967294", pHugeUID, st.Uid, st.Gid)
		}
		if a, d := lstat("hard/a"), lstat("hard2/d"); a != nil && d != nil && (a.Ino != d.Ino || a.Nlink != 4) {
			t.Errorf("direct: hard/a ino %d nlink %d, hard2/d ino %d: want one inode with 4 links", a.Ino, a.Nlink, d.Ino)
		}
		if st := lstat("perms/suid"); st != nil && st.Mode != unix.S_IFREG|0o4755 {
			t.Errorf("direct: perms/suid: mode %#o", st.Mode)
		}
		if ct.name == "full-pax" {
			if st := lstat(pNsTime); st != nil && (st.Mtim.Sec != tNs.Unix() || st.Mtim.Nsec != int64(tNs.Nanosecond())) {
				t.Errorf("direct: %s: mtime %d.%09d, want %d.%09d", pNsTime, st.Mtim.Sec, st.Mtim.Nsec, tNs.Unix(), tNs.Nanosecond())
			}
			if v, _ := xattr(pBigXattr, "user.big"); len(v) != 3000 {
				t.Errorf("direct: %s: user.big is %d bytes, want 3000", pBigXattr, len(v))
			}
			if v, _ := xattr(pCap, "security.capability"); v != string(capV2) {
				t.Errorf("direct: %s: security.capability = %x, want %x", pCap, v, capV2)
			}
			if v, _ := xattr("xattrs/acl", "system.posix_acl_access"); v != aclValue(6, 4, 4) {
				t.Errorf("direct: xattrs/acl: system.posix_acl_access = %x, want %x", v, aclValue(6, 4, 4))
			}
		}
		if ct.name == "full-pax" && r.Super().XattrBlkAddr == 0 {
			t.Errorf("direct: no shared xattr table, though twenty files carry the same xattrs")
		}
		if overlay {
			isWhiteout(pLayerWh)
			isOpaque(pLayerOpaque)
			if _, err := os.Lstat(filepath.Join(mnt, "layer/.wh..wh.plnk")); err == nil {
				t.Errorf("direct: layer/.wh..wh.plnk is in the image")
			}
		} else if st := lstat("layer/.wh.deleted-file"); st != nil && st.Mode&unix.S_IFMT != unix.S_IFREG {
			t.Errorf("direct: whiteouts=keep: layer/.wh.deleted-file has mode %#o, want a regular file", st.Mode)
		}
	}
	if ct.longLinks {
		if tg, err := os.Readlink(filepath.Join(mnt, pLongTarget)); err != nil || tg != longTarget(longTargetLen) {
			t.Errorf("direct: %s: target of %d bytes (%v), want %d", pLongTarget, len(tg), err, longTargetLen)
		}
	}
	if ct.sparse {
		// About 20 KiB of data in 56 MiB of files.
		if fi, err := os.Stat(img); err != nil || fi.Size() > 1<<20 {
			t.Errorf("direct: image of the sparse files is %d bytes (%v): the holes seem to be stored", fi.Size(), err)
		}
		for _, p := range []string{pSparse, pAllHole} {
			if ino, err := r.Lstat(p); err != nil || ino.Layout != erofs.LayoutChunkBased {
				t.Errorf("direct: %s: layout %v (%v), want chunk-based with holes", p, layoutOf(ino), err)
			}
		}
	}
	if ct.name == "whiteouts" && overlay {
		isWhiteout(pWhGone)
		// The .wh. entry's owner, but no permission bits (its 0600 is
		// dropped), as mkfs.erofs --aufs writes it.
		if st := lstat(pWhGone); st != nil && (st.Mode&0o7777 != 0 || st.Uid != 1000 || st.Gid != 1001) {
			t.Errorf("direct: %s: mode %#o uid %d gid %d, want 0000 1000:1001", pWhGone, st.Mode, st.Uid, st.Gid)
		}
		isOpaque(pWhOpaque)
		isOpaque(pWhUnlisted)
		isOpaque("late")
		if st := lstat(pWhUnlisted); st != nil && (st.Mode != unix.S_IFDIR|0o755 || st.Uid != 0 || st.Gid != 0) {
			t.Errorf("direct: implied %s: mode %#o %d:%d, want 040755 0:0", pWhUnlisted, st.Mode, st.Uid, st.Gid)
		}
		if v, ok := xattr(".", whiteout.OriginXattr); !ok || v != "" {
			t.Errorf("direct: root: %s = %q (present %v), want empty", whiteout.OriginXattr, v, ok)
		}
		isOpaque(".")
	}
	inline := countInline(t, r)
	external := rc.opt.Blob != "" || rc.opt.TarIndex
	if (rc.opt.Erofs.NoInlineData || external) && inline > 0 {
		t.Errorf("direct: NoInlineData or all data outside, yet %d regular files are FLAT_INLINE", inline)
	}
	if !rc.opt.Erofs.NoInlineData && !external && rc.opt.Erofs.Compression == nil && ct.full && inline < manyEntries/2 {
		t.Errorf("direct: only %d regular files have an inline tail", inline)
	}
	if chunked := countLayout(t, r, erofs.LayoutChunkBased); external && ct.full && chunked < manyEntries/2 {
		t.Errorf("direct: only %d regular files are chunk-based, with all data outside the image", chunked)
	}
}

func layoutOf(ino *erofs.Inode) any {
	if ino == nil {
		return "none"
	}
	return ino.Layout
}

// countInline walks the image and counts the FLAT_INLINE regular files.
func countInline(t *testing.T, r *erofs.Image) int {
	return countLayout(t, r, erofs.LayoutFlatInline)
}

// countLayout counts the regular files of an image with the given layout.
func countLayout(t *testing.T, r *erofs.Image, layout uint8) int {
	var walk func(dir string)
	n := 0
	walk = func(dir string) {
		ents, err := r.ReadDir(dir)
		if err != nil {
			t.Errorf("direct: ReadDir(%s): %v", dir, err)
			return
		}
		for _, e := range ents {
			p := e.Name()
			if dir != "." {
				p = dir + "/" + p
			}
			ino, err := r.Lstat(p)
			if err != nil {
				t.Errorf("direct: %v", err)
				continue
			}
			if ino.IsRegular() && ino.Layout == layout {
				n++
			}
			if ino.IsDir() {
				walk(p)
			}
		}
	}
	walk(".")
	return n
}

// TestCompressedInputSameImage: gzip and zstd input give the very bytes the
// plain tar gives, since the UUID comes from the uncompressed diffID.
func TestCompressedInputSameImage(t *testing.T) {
	dir := roundtrip.WorkDir(t)
	plain := filepath.Join(dir, "layer.tar")
	in := detTar(t, true)
	must(t, os.WriteFile(plain, in, 0o644))
	ref, refRes := convertBytes(t, plain, convert.Options{})
	if want := fmt.Sprintf("sha256:%x", sha256.Sum256(in)); refRes.DiffID != want {
		t.Errorf("DiffID = %s, want the sha256 of the tar, %s", refRes.DiffID, want)
	}
	if u := convert.LayerUUID(refRes.DiffID); refRes.UUID != u {
		t.Errorf("UUID = %x, want LayerUUID(diffID) = %x", refRes.UUID, u)
	}
	if sb := readImage(t, imageFile(t, dir, ref)).Super(); sb.UUID != refRes.UUID {
		t.Errorf("superblock UUID %x, Result.UUID %x", sb.UUID, refRes.UUID)
	}
	// The CLIs when installed, and klauspost at another level.
	inputs := map[string]string{
		"gzip-cli": roundtrip.Compress(t, plain, "gz"),
		"zstd-cli": roundtrip.Compress(t, plain, "zst"),
	}
	var gz bytes.Buffer
	zw, err := kgzip.NewWriterLevel(&gz, kgzip.BestSpeed)
	must(t, err)
	zw.Write(in)
	must(t, zw.Close())
	p := filepath.Join(dir, "fast.tar.gz")
	must(t, os.WriteFile(p, gz.Bytes(), 0o644))
	inputs["gzip-fastest"] = p
	for name, src := range inputs {
		img, res := convertBytes(t, src, convert.Options{})
		if !bytes.Equal(img, ref) {
			t.Errorf("%s: image differs from the plain tar's (%d vs %d bytes)", name, len(img), len(ref))
		}
		if res.DiffID != refRes.DiffID || res.UUID != refRes.UUID {
			t.Errorf("%s: diffID %s UUID %x; plain: %s %x", name, res.DiffID, res.UUID, refRes.DiffID, refRes.UUID)
		}
	}
	// The plain tar is read straight into the Builder, hashed on the way,
	// when there is one CPU and nothing to overlap; through the read-ahead
	// goroutine otherwise. Without the diffID (a given UUID) it is not
	// hashed at all. All give the same image.
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	for _, procs := range []int{1, 2} {
		runtime.GOMAXPROCS(procs)
		for _, src := range []string{plain, inputs["gzip-fastest"]} {
			img, res := convertBytes(t, src, convert.Options{})
			if !bytes.Equal(img, ref) || res.DiffID != refRes.DiffID {
				t.Errorf("GOMAXPROCS %d, %s: image or diffID differs from the first build's", procs, filepath.Base(src))
			}
			opt := convert.Options{NoDiffID: true}
			opt.Erofs.UUID = refRes.UUID
			img, res = convertBytes(t, src, opt)
			if !bytes.Equal(img, ref) || res.DiffID != "" {
				t.Errorf("GOMAXPROCS %d, %s, NoDiffID: diffID %q; image equal to the first build's: %v", procs, filepath.Base(src), res.DiffID, bytes.Equal(img, ref))
			}
		}
	}
	out, err := os.Create(filepath.Join(dir, "no-uuid.erofs"))
	must(t, err)
	defer out.Close()
	_, err = convert.BuildTar(out, bytes.NewReader(in), convert.Options{NoDiffID: true})
	if err == nil || !strings.Contains(err.Error(), "UUID") {
		t.Errorf("NoDiffID without a UUID: got %v, want an error saying a UUID is needed", err)
	}
}

// imageFile writes img into dir and returns its path.
func imageFile(t testing.TB, dir string, img []byte) string {
	f, err := os.CreateTemp(dir, "img-*.erofs")
	must(t, err)
	defer f.Close()
	_, err = f.Write(img)
	must(t, err)
	return f.Name()
}

// TestDeterministic: the same tar and options give the same bytes, at
// every block size and with or without inline data.
func TestDeterministic(t *testing.T) {
	in := detTar(t, true)
	for _, o := range []convert.Options{
		{},
		opts(512, true, tBuild),
		opts(1024, false, time.Time{}),
		{Erofs: erofs.Options{BlockSize: 4096, UUID: [16]byte{1, 2, 3}}, Whiteouts: whiteout.Keep},
	} {
		a, _, err := buildMem(in, o)
		if err != nil {
			t.Fatalf("%+v: %v", o, err)
		}
		for i := 0; i < 2; i++ {
			b, _, err := buildMem(in, o)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(a, b) {
				t.Errorf("%+v: conversion %d differs from the first (first difference at byte %d)", o, i+2, convtest.FirstDiff(a, b))
			}
		}
	}
}

// diffRanges lists the byte ranges [from, to) where a and b differ.
func diffRanges(a, b []byte) [][2]int {
	var rs [][2]int
	n := max(len(a), len(b))
	for i := 0; i < n; i++ {
		if i < len(a) && i < len(b) && a[i] == b[i] {
			continue
		}
		if len(rs) > 0 && rs[len(rs)-1][1] == i {
			rs[len(rs)-1][1] = i + 1
		} else {
			rs = append(rs, [2]int{i, i + 1})
		}
	}
	return rs
}

// TestBuildTime: the build time changes the superblock and the mtime of
// implied directories, and nothing else.
func TestBuildTime(t *testing.T) {
	const sbStart, sbEnd = 1024, 1024 + 128
	b1 := time.Unix(1700000500, 0)
	b2 := time.Unix(1700009999, 42)
	dir := roundtrip.WorkDir(t)

	t.Run("no-implied-dirs", func(t *testing.T) {
		in := detTar(t, false)
		zero, _, err := buildMem(in, convert.Options{})
		must(t, err)
		for _, bt := range []time.Time{b1, b2} {
			img, _, err := buildMem(in, convert.Options{Erofs: erofs.Options{BuildTime: bt}})
			must(t, err)
			rs := diffRanges(zero, img)
			if len(rs) == 0 {
				t.Errorf("build time %v: the image is the one without a build time", bt)
			}
			for _, r := range rs {
				if r[0] < sbStart || r[1] > sbEnd {
					t.Errorf("build time %v: bytes [%d, %d) differ outside the superblock", bt, r[0], r[1])
				}
			}
			sb := readImage(t, imageFile(t, dir, img)).Super()
			if got := sb.Epoch + int64(sb.BuildTime); got != bt.Unix() {
				t.Errorf("build time %v: superblock epoch %d + build_time %d = %d", bt, sb.Epoch, sb.BuildTime, got)
			}
		}
	})

	t.Run("implied-dirs", func(t *testing.T) {
		in := detTar(t, true)
		want, err := fstree.FromTar(bytes.NewReader(in), fstree.TarOptions{})
		must(t, err)
		var implied []string
		for _, p := range want.Paths() {
			if want.Node(p).Implied {
				implied = append(implied, p)
			}
		}
		if len(implied) < 3 {
			t.Fatalf("the tar implies only %v", implied)
		}
		imgs := map[time.Time][]byte{}
		trees := map[time.Time]*fstree.Tree{}
		for _, bt := range []time.Time{b1, b2} {
			img, _, err := buildMem(in, convert.Options{Erofs: erofs.Options{BuildTime: bt}})
			must(t, err)
			imgs[bt] = img
			r := readImage(t, imageFile(t, dir, img))
			tr, err := fstree.FromImage(r)
			must(t, err)
			trees[bt] = tr
			for _, p := range implied {
				if n := tr.Node(p); n == nil || !n.Mtime.Equal(bt) {
					t.Errorf("build time %v: implied %s has mtime %v", bt, p, n)
				}
			}
		}
		isImplied := func(p string) bool { n := want.Node(p); return n != nil && n.Implied }
		for _, d := range fstree.Diff(trees[b1], trees[b2], fstree.DiffOptions{
			Ignore: func(p, field string) bool { return field == "mtime" && isImplied(p) },
		}) {
			t.Errorf("build time changed more than implied mtimes: %s", d)
		}
		// Byte level: only the superblock and the implied inodes' cores.
		r := readImage(t, imageFile(t, dir, imgs[b1]))
		var allowed [][2]int64
		for _, p := range implied {
			ino, err := r.Lstat(p)
			must(t, err)
			allowed = append(allowed, [2]int64{ino.Offset(), ino.Offset() + erofs.ExtendedInodeSize})
		}
		inodeBytes := 0
	next:
		for _, rg := range diffRanges(imgs[b1], imgs[b2]) {
			if rg[0] >= sbStart && rg[1] <= sbEnd {
				continue
			}
			inodeBytes += rg[1] - rg[0]
			for _, a := range allowed {
				if int64(rg[0]) >= a[0] && int64(rg[1]) <= a[1] {
					continue next
				}
			}
			t.Errorf("bytes [%d, %d) differ outside the superblock and the implied directories' inodes", rg[0], rg[1])
		}
		if inodeBytes == 0 {
			t.Errorf("no inode changed with the build time")
		}
	})
}

// TestXattrLeftOut: an xattr EROFS cannot name is left out with a warning
// that names the entry and the xattr; the others stay.
func TestXattrLeftOut(t *testing.T) {
	in := convtest.TarOf(t, convtest.TarFile("f", "x", 0o644, t0).PAX("SCHILY.xattr.system.foo", "1").PAX("SCHILY.xattr.user.ok", "2"))
	img, res, err := buildMem(in, convert.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Warnings) != 1 || !strings.Contains(res.Warnings[0], "f") || !strings.Contains(res.Warnings[0], "system.foo") {
		t.Errorf("warnings %q, want one naming f and system.foo", res.Warnings)
	}
	xs, err := readImage(t, imageFile(t, roundtrip.WorkDir(t), img)).Xattrs("f")
	must(t, err)
	if len(xs) != 1 || xs[0].Name != "user.ok" || string(xs[0].Value) != "2" {
		t.Errorf("xattrs of f: %+v, want only user.ok=2", xs)
	}
}

// ustarBlock returns a valid ustar header block whose name field holds
// name verbatim (NUL bytes included) with a correct checksum: archive/tar
// refuses to write such names.
func ustarBlock(name string, typ byte, size int64) []byte {
	b := make([]byte, 512)
	copy(b[0:100], name)
	copy(b[100:], "0000644\x00")
	copy(b[108:], "0000000\x00")
	copy(b[116:], "0000000\x00")
	copy(b[124:], fmt.Sprintf("%011o\x00", size))
	copy(b[136:], fmt.Sprintf("%011o\x00", t0.Unix()))
	b[156] = typ
	copy(b[257:], "ustar\x0000")
	if typ == 'L' || typ == 'K' || strings.HasPrefix(name, "gnu:") {
		copy(b[257:], "ustar  \x00") // the GNU magic these records need
		if strings.HasPrefix(name, "gnu:") {
			clear(b[0:100])
			copy(b[0:100], name[4:])
		}
	}
	for i := 148; i < 156; i++ {
		b[i] = ' '
	}
	sum := 0
	for _, c := range b {
		sum += int(c)
	}
	copy(b[148:], fmt.Sprintf("%06o\x00 ", sum))
	return b
}

// paxBlocks is a PAX extended header ('x') carrying one record verbatim.
func paxBlocks(key, value string) []byte {
	rec := " " + key + "=" + value + "\n"
	n := len(rec) + 1
	for len(fmt.Sprint(n))+len(rec) != n {
		n = len(fmt.Sprint(n)) + len(rec)
	}
	rec = fmt.Sprint(n) + rec
	b := ustarBlock("PaxHeaders/x", 'x', int64(len(rec)))
	data := make([]byte, (len(rec)+511)/512*512)
	copy(data, rec)
	return append(b, data...)
}

var endBlocks = make([]byte, 1024)

// padBlock pads s with NULs to whole 512-byte blocks.
func padBlock(s string) []byte {
	b := make([]byte, (len(s)+511)/512*512)
	copy(b, s)
	return b
}

func concat(bs ...[]byte) []byte { return bytes.Join(bs, nil) }

// unfinished returns what a tar writer wrote for entries without closing
// it: a header claiming more data than follows.
func unfinished(t testing.TB, hdr tar.Header, data []byte) []byte {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&hdr); err != nil {
		t.Fatal(err)
	}
	tw.Write(data)
	tw.Flush()
	return buf.Bytes()
}

func gzipOf(b []byte) []byte {
	var buf bytes.Buffer
	zw := kgzip.NewWriter(&buf)
	zw.Write(b)
	zw.Close()
	return buf.Bytes()
}

func zstdOf(t testing.TB, b []byte) []byte {
	zw, err := zstd.NewWriter(nil)
	must(t, err)
	return zw.EncodeAll(b, nil)
}

// cutCompressed compresses b with gzip or zstd, flushing the encoder after
// b[:at], and returns the stream up to that flush: a decompressor reads
// exactly b[:at] from it before the stream stops short of its end.
func cutCompressed(t testing.TB, codec string, b []byte, at int) []byte {
	var buf bytes.Buffer
	var w interface {
		io.WriteCloser
		Flush() error
	}
	switch codec {
	case "gzip":
		w = kgzip.NewWriter(&buf)
	case "zstd":
		zw, err := zstd.NewWriter(&buf)
		must(t, err)
		w = zw
	}
	w.Write(b[:at])
	must(t, w.Flush())
	n := buf.Len()
	w.Write(b[at:])
	must(t, w.Close())
	return buf.Bytes()[:n]
}

func flipMiddle(b []byte) []byte {
	c := bytes.Clone(b)
	for i := len(c)/2 - 8; i < len(c)/2+8; i++ {
		c[i] ^= 0x5a
	}
	return c
}

// TestBadInput: hostile or broken input gives an error that says what and
// where, never a panic, and Mkfs leaves nothing behind.
func TestBadInput(t *testing.T) {
	bigData := string(convtest.Content("victim", 10000))
	twoFiles := convtest.TarOf(t, convtest.TarFile("victim", bigData, 0o644, t0), convtest.TarFile("second", "2", 0o644, t0))
	compressible := convtest.TarOf(t, convtest.TarFile("big", string(convtest.Content("compressible", 300000)), 0o644, t0))
	var tenFiles []convtest.TarEntry
	for i := range 10 {
		tenFiles = append(tenFiles, convtest.TarFile(fmt.Sprintf("f%d", i), "0123456789", 0o644, t0))
	}
	ten := convtest.TarOf(t, tenFiles...)
	gz, zs := gzipOf(ten), zstdOf(t, ten)
	cases := []struct {
		name string
		in   []byte
		want []string // substrings of the error
	}{
		{"truncated-in-data", twoFiles[:512+5000], []string{"victim", "offset"}},
		{"truncated-in-header", twoFiles[:512+10240+200], []string{"offset"}},
		{"corrupt-gzip", flipMiddle(gzipOf(compressible)), nil},
		{"truncated-gzip", gzipOf(compressible)[:len(gzipOf(compressible))/2], nil},
		{"corrupt-zstd", flipMiddle(zstdOf(t, compressible)), nil},
		{"truncated-zstd", zstdOf(t, compressible)[:len(zstdOf(t, compressible))/2], nil},
		// Streams that stop at a tar header (after an encoder's flush) or
		// in the compressor's trailer: nothing in the tar is missing but
		// the entries after the cut.
		{"gzip-cut-at-header", cutCompressed(t, "gzip", ten, 5*1024), []string{"gzip", "ends early", "5120 bytes"}},
		{"gzip-cut-at-end-of-archive", cutCompressed(t, "gzip", ten, 10*1024), []string{"gzip", "ends early"}},
		{"gzip-no-trailer", gz[:len(gz)-8], []string{"gzip", "ends early"}},
		{"gzip-half-trailer", gz[:len(gz)-4], []string{"gzip", "ends early"}},
		{"zstd-cut-at-header", cutCompressed(t, "zstd", ten, 5*1024), []string{"zstd", "ends early", "5120 bytes"}},
		{"zstd-cut-in-last-block", zs[:len(zs)-1], []string{"zstd"}},
		{"random-bytes", convtest.Content("random", 64<<10), []string{"offset 0:"}},
		{"bad-checksum-after-an-entry", concat(ustarBlock("ok", '0', 0), badChecksum(ustarBlock("bad", '0', 0)), endBlocks), []string{"the entry at offset 512:"}},
		{"text-file", bytes.Repeat([]byte("this is not a tar archive, just text\n"), 200), []string{"offset"}},
		{"short-text", []byte("hello\n"), nil},
		{"xz", append([]byte{0xfd, '7', 'z', 'X', 'Z', 0}, convtest.Content("xz", 100)...), []string{"xz"}},
		{"hardlink-to-missing", convtest.TarOf(t, convtest.TarLink("ln", "missing")), []string{"ln", "missing"}},
		{"hardlink-to-dir", convtest.TarOf(t, convtest.TarDir("d/", 0o755, t0), convtest.TarLink("ln", "d")), []string{"ln", "d"}},
		{"hardlink-escapes", convtest.TarOf(t, convtest.TarLink("ln", "../etc/passwd")), []string{"ln", "../etc/passwd"}},
		{"dotdot", convtest.TarOf(t, convtest.TarFile("../x", "x", 0o644, t0)), []string{"../x", "offset 0"}},
		{"dotdot-nested", convtest.TarOf(t, convtest.TarFile("ok", "", 0o644, t0), convtest.TarFile("a/../../x", "x", 0o644, t0)), []string{"a/../../x", "offset 512"}},
		{"nul-in-pax-path", concat(paxBlocks("path", "a\x00b"), ustarBlock("placeholder", '0', 0), endBlocks), []string{"offset"}},
		{"nul-in-pax-linkpath", concat(paxBlocks("linkpath", "t\x00u"), ustarBlock("sym", '2', 0), endBlocks), []string{"offset"}},
		{"absurd-size-gnu", unfinished(t, tar.Header{Typeflag: tar.TypeReg, Name: "huge", Size: 1 << 40, Mode: 0o644, Format: tar.FormatGNU}, make([]byte, 1000)), []string{"huge", "offset 0"}},
		{"absurd-size-pax", unfinished(t, tar.Header{Typeflag: tar.TypeReg, Name: "huge", Size: 1 << 40, Mode: 0o644, Format: tar.FormatPAX}, make([]byte, 1000)), []string{"huge", "offset"}},
		{"uid-out-of-range", concat(paxBlocks("uid", "99999999999"), ustarBlock("bigid", '0', 0), endBlocks), []string{"bigid"}},
		{"device-out-of-range", convtest.TarOf(t, convtest.TarEntry{Hdr: tar.Header{Typeflag: tar.TypeChar, Name: "dev", Mode: 0o600, Devmajor: 4096}}), []string{"dev", "4096"}},
		{"symlink-too-long", convtest.TarOf(t, convtest.TarSym("sym", strings.Repeat("s", 4096), t0)), []string{"sym", "4096"}},
		{"empty-symlink-target", concat(ustarBlock("sym", '2', 0), endBlocks), []string{"sym"}},
		{"name-component-too-long", convtest.TarOf(t, convtest.TarFile("d/"+strings.Repeat("n", 256), "", 0o644, t0)), []string{strings.Repeat("n", 256)}},
		{"root-not-a-directory", concat(ustarBlock("./", '0', 0), endBlocks), []string{"root"}},
		{"whiteout-names-nothing", convtest.TarOf(t, convtest.TarFile("d/.wh.", "", 0o644, t0)), []string{"d/.wh."}},
		{"whiteout-of-dot", convtest.TarOf(t, convtest.TarFile("d/.wh..", "", 0o644, t0)), []string{"d/.wh.."}},
		{"unknown-type", concat(ustarBlock("odd", 'Z', 0), endBlocks), []string{"odd"}},
	}
	work := roundtrip.WorkDir(t)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := buildMem(tc.in, convert.Options{})
			if err == nil {
				t.Fatalf("BuildTar succeeded")
			}
			if strings.HasPrefix(err.Error(), "panic:") {
				t.Fatalf("BuildTar %v", err)
			}
			t.Logf("BuildTar: %v", err)
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %q", err, w)
				}
			}
			// Mkfs: the same error, and no output or temp file left.
			in := filepath.Join(work, tc.name+".input")
			must(t, os.WriteFile(in, tc.in, 0o644))
			outDir := filepath.Join(work, tc.name+".out")
			must(t, os.Mkdir(outDir, 0o755))
			var merr error
			func() {
				defer func() {
					if r := recover(); r != nil {
						merr = fmt.Errorf("panic: %v", r)
					}
				}()
				_, merr = mkfs.Build(filepath.Join(outDir, "layer.erofs"), in, convert.Options{})
			}()
			if merr == nil || strings.HasPrefix(merr.Error(), "panic:") {
				t.Errorf("Mkfs: %v, want an error", merr)
			}
			if ents, _ := os.ReadDir(outDir); len(ents) != 0 {
				var names []string
				for _, e := range ents {
					names = append(names, e.Name())
				}
				t.Errorf("Mkfs left %q behind", names)
			}
		})
	}
}

// TestNulInUstarName: a NUL inside a header's name field ends the name, as
// for every tar reader; what follows it cannot smuggle a path in.
func TestNulInUstarName(t *testing.T) {
	for _, in := range [][]byte{
		concat(ustarBlock("a\x00/../../etc/passwd", '0', 0), endBlocks),
		concat(ustarBlock("././@LongLink", 'L', 30), padBlock("a\x00../../../etc/passwd\x00"), ustarBlock("gnu:ignored", '0', 0), endBlocks),
	} {
		img, _, err := buildMem(in, convert.Options{})
		if err != nil {
			t.Errorf("BuildTar: %v", err)
			continue
		}
		tr, err := fstree.FromImage(readImage(t, imageFile(t, roundtrip.WorkDir(t), img)))
		must(t, err)
		if ps := tr.Paths(); len(ps) != 2 || ps[1] != "a" {
			t.Errorf("image holds %q, want [. a]", ps)
		}
	}
}

// TestStreamingMemory converts a tar holding one 1 GiB file, generated on
// the fly through an io.Pipe (never on disk as a tar), and checks that the
// heap stays bounded: the Builder keeps metadata, not data, in memory.
func TestStreamingMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: converts a 1 GiB stream")
	}
	const fileSize = 1 << 30
	const limit = 64 << 20
	chunk := convtest.Content("stream", 1<<20)
	dataHash := sha256.New()
	streamHash := sha256.New()
	pr, pw := io.Pipe()
	go func() {
		tw := tar.NewWriter(io.MultiWriter(pw, streamHash))
		err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "big", Size: fileSize, Mode: 0o644, ModTime: t0})
		for i := 0; err == nil && i < fileSize/len(chunk); i++ {
			chunk[0], chunk[1] = byte(i), byte(i>>8) // no two chunks alike
			dataHash.Write(chunk)
			_, err = tw.Write(chunk)
		}
		if err == nil {
			err = tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "after", Size: 5, Mode: 0o644, ModTime: t0})
		}
		if err == nil {
			_, err = tw.Write([]byte("after"))
		}
		if err == nil {
			err = tw.Close()
		}
		pw.CloseWithError(err)
	}()

	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	// Other tests of this binary may hold memory: the conversion is
	// judged on what it adds.
	baseSys, baseHeap := ms.Sys, ms.HeapInuse
	peakHeap, peakSys := baseHeap, baseSys // so that the differences are ≥ 0
	var peakRSS int64
	sample := func() {
		runtime.ReadMemStats(&ms)
		peakHeap, peakSys = max(peakHeap, ms.HeapInuse), max(peakSys, ms.Sys)
		peakRSS = max(peakRSS, rssBytes())
	}
	done := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tk := time.NewTicker(25 * time.Millisecond)
		defer tk.Stop()
		for {
			select {
			case <-done:
				return
			case <-tk.C:
				sample()
			}
		}
	}()

	img := filepath.Join(roundtrip.WorkDir(t), "big.erofs")
	out, err := os.Create(img)
	must(t, err)
	start := time.Now()
	res, err := convert.BuildTar(out, pr, convert.Options{})
	close(done)
	<-sampled
	sample()
	must(t, out.Close())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("1 GiB in %v: peak HeapInuse %d MiB (%d MiB before), Sys %d MiB (%d MiB before), peak RSS %d MiB",
		time.Since(start).Round(time.Millisecond), peakHeap>>20, baseHeap>>20, peakSys>>20, baseSys>>20, peakRSS>>20)
	if peakHeap-baseHeap > limit {
		t.Errorf("HeapInuse grew by %d MiB during the conversion, want < %d MiB", (peakHeap-baseHeap)>>20, limit>>20)
	}
	if peakSys-baseSys > limit {
		t.Errorf("Sys grew by %d MiB during the conversion, want < %d MiB", (peakSys-baseSys)>>20, limit>>20)
	}
	if want := fmt.Sprintf("sha256:%x", streamHash.Sum(nil)); res.DiffID != want {
		t.Errorf("DiffID %s, want %s", res.DiffID, want)
	}

	// The data made it: read it back with the project's reader.
	r := readImage(t, img)
	f, err := r.Open("big")
	must(t, err)
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil || n != fileSize || !bytes.Equal(h.Sum(nil), dataHash.Sum(nil)) {
		t.Errorf("read back %d bytes (%v), sha256 %x, want %d bytes, %x", n, err, h.Sum(nil), fileSize, dataHash.Sum(nil))
	}
	if b, err := r.ReadFile("after"); err != nil || string(b) != "after" {
		t.Errorf("after: %q, %v", b, err)
	}
}

// rssBytes is the process's resident set size, from /proc/self/status.
func rssBytes() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			var kb int64
			fmt.Sscan(f[1], &kb)
			return kb << 10
		}
	}
	return 0
}

// TestNlinkBeyond16Bits: more than 65535 names of one file, and more than
// 65533 subdirectories in one directory, need the extended inode's 32-bit
// i_nlink; the kernel must report them all.
func TestNlinkBeyond16Bits(t *testing.T) {
	roundtrip.RequireMount(t)
	const links = 65600
	es := []convtest.TarEntry{convtest.TarFile("target", "shared data", 0o644, t0), convtest.TarDir("l/", 0o755, t0), convtest.TarDir("s/", 0o755, t0)}
	for i := 0; i < links; i++ {
		es = append(es, convtest.TarLink(fmt.Sprintf("l/%05d", i), "target"), convtest.TarDir(fmt.Sprintf("s/%05d/", i), 0o755, t0))
	}
	dir := roundtrip.WorkDir(t)
	src := filepath.Join(dir, "links.tar")
	must(t, os.WriteFile(src, convtest.TarOf(t, es...), 0o644))
	img, _ := buildImage(t, dir, src, convert.Options{})
	mnt := roundtrip.Mount(t, img)
	var st, st2 unix.Stat_t
	must(t, unix.Lstat(filepath.Join(mnt, "target"), &st))
	must(t, unix.Lstat(filepath.Join(mnt, "l/65599"), &st2))
	if st.Nlink != links+1 || st2.Ino != st.Ino {
		t.Errorf("target: nlink %d, ino %d (l/65599: %d); want nlink %d, one inode", st.Nlink, st.Ino, st2.Ino, links+1)
	}
	if ents, err := os.ReadDir(filepath.Join(mnt, "l")); err != nil || len(ents) != links {
		t.Errorf("l holds %d entries (%v), want %d", len(ents), err, links)
	}
	if b, err := os.ReadFile(filepath.Join(mnt, "l/12345")); err != nil || string(b) != "shared data" {
		t.Errorf("l/12345: %q, %v", b, err)
	}
	must(t, unix.Lstat(filepath.Join(mnt, "s"), &st))
	if st.Nlink != links+2 {
		t.Errorf("s: nlink %d, want %d", st.Nlink, links+2)
	}
	if ents, err := os.ReadDir(filepath.Join(mnt, "s")); err != nil || len(ents) != links {
		t.Errorf("s holds %d entries (%v), want %d", len(ents), err, links)
	}
	if skip := roundtrip.Fsck(t, img, 4096); skip != "" {
		t.Logf("fsck.erofs skipped: %s", skip)
	}
}

// TestHugeSparseFile: a file larger than 4 GiB (the extended inode's 64-bit
// i_size) made by GNU tar --sparse, with its data past 4 GiB.
func TestHugeSparseFile(t *testing.T) {
	roundtrip.RequireMount(t)
	const size = 5 << 30
	const dataOff = 4<<30 + 512<<20
	data := convtest.Content("huge", 10000)
	dir := roundtrip.WorkDir(t)
	srcDir := filepath.Join(dir, "src")
	must(t, os.Mkdir(srcDir, 0o755))
	f, err := os.Create(filepath.Join(srcDir, "huge"))
	must(t, err)
	must(t, f.Truncate(size))
	_, err = f.WriteAt(data, dataOff)
	must(t, err)
	must(t, f.Close())
	for _, format := range []string{"gnu", "pax"} {
		t.Run(format, func(t *testing.T) {
			src := filepath.Join(dir, format+".tar")
			gnuTar(t, "--sparse", "--format="+format, "-cf", src, "-C", srcDir, "huge")
			img, _ := buildImage(t, roundtrip.WorkDir(t), src, convert.Options{})
			if fi, err := os.Stat(img); err != nil || fi.Size() > 16<<20 {
				t.Errorf("image of a 5 GiB sparse file with 10 KB of data is %d bytes (%v)", fi.Size(), err)
			}
			mnt := roundtrip.Mount(t, img)
			g, err := os.Open(filepath.Join(mnt, "huge"))
			must(t, err)
			defer g.Close()
			fi, err := g.Stat()
			must(t, err)
			if fi.Size() != size {
				t.Errorf("size %d, want %d", fi.Size(), size)
			}
			buf := make([]byte, len(data)+8192)
			_, err = g.ReadAt(buf, dataOff-4096)
			must(t, err)
			if !bytes.Equal(buf[4096:4096+len(data)], data) || !bytes.Equal(buf[:4096], make([]byte, 4096)) ||
				!bytes.Equal(buf[4096+len(data):], make([]byte, 4096)) {
				t.Errorf("data around offset %d is not the file's", dataOff)
			}
			if _, err := g.ReadAt(buf[:4096], 1<<32+12345); err != nil || !bytes.Equal(buf[:4096], make([]byte, 4096)) {
				t.Errorf("hole past 4 GiB does not read as zeros (%v)", err)
			}
			r := readImage(t, img)
			if ino, err := r.Lstat("huge"); err != nil || ino.Size != size || ino.Layout != erofs.LayoutChunkBased {
				t.Errorf("erofs.Image: huge: %+v, %v; want %d bytes chunk-based", ino, err, size)
			}
			if skip := roundtrip.Fsck(t, img, 4096); skip != "" {
				t.Logf("fsck.erofs skipped: %s", skip)
			}
		})
	}
}

// badChecksum spoils a header block's checksum.
func badChecksum(b []byte) []byte {
	b = bytes.Clone(b)
	b[148] ^= 1
	return b
}
