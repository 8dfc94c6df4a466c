package merge_test

import (
	"archive/tar"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ocierofs/ocierofs/convert"
	"github.com/ocierofs/ocierofs/convert/fstree"
	"github.com/ocierofs/ocierofs/convert/internal/convtest"
	"github.com/ocierofs/ocierofs/convert/internal/roundtrip"
	"github.com/ocierofs/ocierofs/convert/merge"
	"github.com/ocierofs/ocierofs/convert/mkfs"
	"github.com/ocierofs/ocierofs/erofs"
	"github.com/ocierofs/ocierofs/whiteout"
)

var must = roundtrip.Must

// mergeLayers are three layers that exercise every overlay rule: a
// whiteout, an opaque directory (and an opaque root, which hides nothing),
// a directory replaced by a file and a file
// by a directory, an overridden file, a deleted symlink; hard links,
// devices, xattrs; and content repeated across layers.
func mergeLayers(t *testing.T) [3][]byte {
	t1 := time.Unix(1700000000, 0)
	t2 := t1.Add(time.Hour)
	big := string(convtest.Content("big", 300_000))
	withX := convtest.TarFile("a/keep", "kept from layer 1\n", 0o644, t1)
	withX.Hdr.PAXRecords = map[string]string{"SCHILY.xattr.user.k": "v1"}
	dev := convtest.TarEntry{Hdr: tar.Header{Name: "null", Typeflag: tar.TypeChar, Mode: 0o666, Devmajor: 1, Devminor: 3, ModTime: t1}}
	fifo := convtest.TarEntry{Hdr: tar.Header{Name: "p", Typeflag: tar.TypeFifo, Mode: 0o600, ModTime: t1}}
	l1 := convtest.TarOf(t,
		convtest.TarDir("./", 0o755, t1), convtest.TarDir("a/", 0o755, t1), withX,
		convtest.TarFile("a/gone", string(convtest.Content("gone", 40_000)), 0o644, t1),
		convtest.TarFile("big", big, 0o644, t1), convtest.TarLink("a/hl", "big"), convtest.TarSym("s", "big", t1),
		dev, fifo,
		convtest.TarDir("o/", 0o755, t1), convtest.TarFile("o/hidden", "hidden by an opaque dir\n", 0o644, t1),
		convtest.TarDir("r/", 0o755, t1), convtest.TarFile("r/x", "under a dir that becomes a file\n", 0o644, t1),
		convtest.TarFile("f2d", "a file that becomes a dir\n", 0o644, t1),
		convtest.TarFile("mid", string(convtest.Content("mid", 9000)), 0o640, t1),
	)
	l2 := convtest.TarOf(t,
		convtest.TarDir("a/", 0o750, t2), convtest.TarFile("a/.wh.gone", "", 0o644, t2),
		convtest.TarFile("a/new", "new in layer 2\n", 0o644, t2),
		convtest.TarDir("o/", 0o755, t2), convtest.TarFile("o/.wh..wh..opq", "", 0o644, t2), convtest.TarFile("o/vis", "visible\n", 0o644, t2),
		convtest.TarFile("r", "now a file\n", 0o644, t2),
		convtest.TarDir("f2d/", 0o755, t2), convtest.TarFile("f2d/in", "inside\n", 0o644, t2),
		convtest.TarFile("big3", big, 0o644, t2),
	)
	l3 := convtest.TarOf(t,
		// An opaque marker on the root, which overlayfs ignores there.
		convtest.TarFile(".wh..wh..opq", "", 0o644, t2),
		convtest.TarFile("a/keep", "overridden by layer 3\n", 0o600, t2), convtest.TarFile(".wh.s", "", 0o644, t2),
		convtest.TarDir("newdir/", 0o700, t2), convtest.TarFile("newdir/n", string(convtest.Content("n", 5000)), 0o644, t2),
		convtest.TarFile("shared", big, 0o644, t2),
	)
	return [3][]byte{l1, l2, l3}
}

// devicesBeside lists an image's extra devices as the files their tags
// name beside it, in device order.
func devicesBeside(t *testing.T, img string) []string {
	t.Helper()
	f, err := os.Open(img)
	must(t, err)
	defer f.Close()
	fi, err := f.Stat()
	must(t, err)
	im, err := erofs.Open(f, fi.Size())
	must(t, err)
	var devs []string
	for _, d := range im.Devices() {
		devs = append(devs, filepath.Join(filepath.Dir(img), d.Tag))
	}
	return devs
}

// overlayMount stacks mounted layer trees (bottom first) with overlayfs.
func overlayMount(t *testing.T, lowers ...string) string {
	t.Helper()
	dirs := make([]string, len(lowers))
	for i, l := range lowers {
		dirs[len(lowers)-1-i] = l // lowerdir lists the top first
	}
	mnt := t.TempDir()
	if out, err := exec.Command("mount", "-t", "overlay", "overlay", "-o", "lowerdir="+strings.Join(dirs, ":"), mnt).CombinedOutput(); err != nil {
		t.Fatalf("mount -t overlay: %v: %s", err, out)
	}
	t.Cleanup(func() { roundtrip.Unmount(t, mnt) })
	return mnt
}

// TestMerge builds the layers in each storage mode, merges them by
// reference and by copy into a deduplicating blob, and checks that the
// kernel's mount of each merged image is the overlayfs stack of the layer
// images; that a merged image stacks under a further layer as the layers
// it replaces do; that our reader agrees; and that the copy stores
// content shared between layers once.
func TestMerge(t *testing.T) {
	roundtrip.RequireMount(t)
	layers := mergeLayers(t)
	noLinks := fstree.DiffOptions{Ignore: func(_, field string) bool { return field == "links" }}
	for _, mode := range []struct {
		name     string
		opt      func(dir string, i int) convert.Options
		copyData bool // by reference, some data cannot stay in place
	}{
		{"blob", func(dir string, i int) convert.Options {
			return convert.Options{Blob: filepath.Join(dir, fmt.Sprintf("l%d.blob", i))}
		}, false},
		// Each layer's blob holds only what the layers below do not: the
		// images below are its chunk dictionary.
		{"blob-dict", func(dir string, i int) convert.Options {
			o := convert.Options{Blob: filepath.Join(dir, fmt.Sprintf("l%d.blob", i))}
			for j := range i {
				o.ChunkDicts = append(o.ChunkDicts, filepath.Join(dir, fmt.Sprintf("l%d.erofs", j)))
			}
			return o
		}, false},
		{"noinline", func(string, int) convert.Options {
			return convert.Options{Erofs: erofs.Options{NoInlineData: true}}
		}, false},
		{"chunk4k-noinline", func(string, int) convert.Options {
			return convert.Options{Erofs: erofs.Options{NoInlineData: true, ChunkSize: 4096}}
		}, false},
		{"inline", func(string, int) convert.Options { return convert.Options{} }, true},
		{"lz4", func(string, int) convert.Options {
			return convert.Options{Erofs: erofs.Options{Compression: &erofs.Compression{Algorithm: erofs.AlgLZ4, PclusterSize: 4096}}}
		}, true},
	} {
		t.Run(mode.name, func(t *testing.T) {
			dir := roundtrip.WorkDir(t)
			var imgs, mnts []string
			for i, l := range layers {
				src := filepath.Join(dir, fmt.Sprintf("l%d.tar", i))
				must(t, os.WriteFile(src, l, 0o644))
				img := filepath.Join(dir, fmt.Sprintf("l%d.erofs", i))
				if _, err := mkfs.Build(img, src, mode.opt(dir, i)); err != nil {
					t.Fatal(err)
				}
				imgs = append(imgs, img)
				mnts = append(mnts, roundtrip.Mount(t, img, devicesBeside(t, img)...))
			}
			want := convtest.TreeFromDir(t, overlayMount(t, mnts...))
			if mode.name == "blob-dict" {
				// big3 and shared repeat layer 1's big: their layers' blobs
				// do not hold it again.
				for _, b := range []string{"l1.blob", "l2.blob"} {
					if fi, err := os.Stat(filepath.Join(dir, b)); err != nil || fi.Size() > 64<<10 {
						t.Errorf("%s: %v bytes (%v): the chunks of the layers below are stored again", b, fi.Size(), err)
					}
				}
			}
			// The reference is what the overlay rules make of the layers.
			for p, present := range map[string]bool{
				"a/gone": false, "o/hidden": false, "s": false, "r/x": false,
				"a/keep": true, "a/new": true, "o/vis": true, "f2d/in": true, "newdir/n": true,
				"null": true, "p": true, "big": true, "big3": true, "shared": true, "mid": true,
			} {
				if (want.Node(p) != nil) != present {
					t.Fatalf("overlay of the layers: %s present = %v", p, !present)
				}
			}
			if n := want.Node("a/keep"); n.Size != int64(len("overridden by layer 3\n")) || n.Mode&0o777 != 0o600 {
				t.Fatalf("overlay of the layers: a/keep is not layer 3's: %+v", n)
			}
			if n := want.Node("r"); n.Mode&erofs.S_IFMT != erofs.S_IFREG {
				t.Fatalf("overlay of the layers: r is not layer 2's file")
			}

			ref := filepath.Join(dir, "merged.erofs")
			res, err := merge.Images(ref, imgs, merge.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if mode.name == "blob-dict" && len(res.Devices) != 3 {
				t.Errorf("merged by reference: devices %q, want the three blobs once each", res.Devices)
			}
			if mode.copyData != (res.CopiedBytes > 0) {
				t.Errorf("by reference: %d bytes copied", res.CopiedBytes)
			}
			again := filepath.Join(dir, "again.erofs")
			if _, err := merge.Images(again, imgs, merge.Options{}); err != nil {
				t.Fatal(err)
			}
			if a, b := convtest.ReadFile(t, ref), convtest.ReadFile(t, again); !bytes.Equal(a, b) {
				t.Errorf("two merges of the same layers differ (first at %d)", convtest.FirstDiff(a, b))
			}
			got := convtest.TreeFromDir(t, roundtrip.Mount(t, ref, res.Devices...))
			convtest.ReportDiff(t, "overlay of the layers vs merged by reference", fstree.Diff(want, got, noLinks))
			convtest.ReportDiff(t, "erofs.Image vs mount, merged", fstree.Diff(roundtrip.ProjectTree(t, ref, res.Devices...), got, fstree.DiffOptions{}))
			if hl := got.Node("a/hl"); hl == nil || got.Node("big") == nil {
				t.Error("merged: a/hl or big missing")
			}

			cp := filepath.Join(dir, "copied.erofs")
			blob := filepath.Join(dir, "copied.blob")
			cres, err := merge.Images(cp, imgs, merge.Options{Blob: blob})
			if err != nil {
				t.Fatal(err)
			}
			got = convtest.TreeFromDir(t, roundtrip.Mount(t, cp, cres.Devices...))
			convtest.ReportDiff(t, "overlay of the layers vs merged into a blob", fstree.Diff(want, got, noLinks))
			// big, big3 and shared hold the same 300,000 bytes: once in the blob.
			if fi, err := os.Stat(blob); err != nil || fi.Size() > 300_000+64<<10 || cres.CopiedBytes < 3*300_000 {
				t.Errorf("blob of %v bytes for %d bytes copied: content shared by layers is not stored once (%v)", fi.Size(), cres.CopiedBytes, err)
			}

			// A merged image of the two lower layers stacks under the third
			// as they do.
			low := filepath.Join(dir, "low.erofs")
			lres, err := merge.Images(low, imgs[:2], merge.Options{})
			if err != nil {
				t.Fatal(err)
			}
			stacked := convtest.TreeFromDir(t, overlayMount(t, roundtrip.Mount(t, low, lres.Devices...), mnts[2]))
			convtest.ReportDiff(t, "overlay of the layers vs overlay of merged(1,2) and 3", fstree.Diff(want, stacked, noLinks))
		})
	}
}

func TestMergeErrors(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "l.tar")
	must(t, os.WriteFile(src, convtest.TarOf(t, convtest.TarFile("f", "x", 0o644, time.Unix(1, 0))), 0o644))
	a, b := filepath.Join(dir, "a.erofs"), filepath.Join(dir, "b.erofs")
	if _, err := mkfs.Build(a, src, convert.Options{}); err != nil {
		t.Fatal(err)
	}
	if _, err := mkfs.Build(b, src, convert.Options{Erofs: erofs.Options{BlockSize: 1024}}); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "m.erofs")
	for _, in := range [][]string{nil, {a, b}, {a, src}, {a, filepath.Join(dir, "missing")}} {
		if _, err := merge.Images(out, in, merge.Options{}); err == nil {
			t.Errorf("Merge(%v) succeeded", in)
		}
		if _, err := os.Stat(out); err == nil {
			t.Errorf("Merge(%v) failed but left %s", in, out)
		}
	}
}

// overlayFormLayers are layers whose images spell the overlay rules the
// way merge reads them: the middle one is made with --whiteouts keep, so
// its character devices 0:0 and trusted.overlay.opaque xattrs come from
// the tar as they are, and its .wh. name is a plain file.
func overlayFormLayers(t *testing.T) (layers [3][]byte, opts [3]convert.Options) {
	t1 := time.Unix(1700000000, 0)
	t2 := t1.Add(time.Hour)
	wh := func(name string) convtest.TarEntry {
		return convtest.TarEntry{Hdr: tar.Header{Name: name, Typeflag: tar.TypeChar, ModTime: t2, Format: tar.FormatPAX}}
	}
	const opq = "SCHILY.xattr." + whiteout.OpaqueXattr
	layers[0] = convtest.TarOf(t,
		convtest.TarDir("./", 0o755, t1), convtest.TarFile("f", "whited out by a device\n", 0o644, t1),
		convtest.TarDir("d/", 0o755, t1), convtest.TarFile("d/x", "in a whited-out dir\n", 0o644, t1),
		convtest.TarDir("o/", 0o755, t1), convtest.TarFile("o/hidden", "under an opaque dir\n", 0o644, t1),
		convtest.TarFile("o/kept", "replaced in the opaque dir\n", 0o644, t1),
		convtest.TarFile("g", "a .wh.g file does not delete me\n", 0o644, t1),
		convtest.TarFile("f2d", "a file that becomes a dir\n", 0o644, t1),
		convtest.TarDir("d2f/", 0o755, t1), convtest.TarFile("d2f/y", "under a dir that becomes a file\n", 0o644, t1),
		convtest.TarDir("keep/", 0o755, t1), convtest.TarFile("keep/z", "in a dir an opaque root does not hide\n", 0o644, t1),
	)
	layers[1] = convtest.TarOf(t,
		// An opaque root, which overlayfs ignores on a layer's root.
		convtest.TarDir("./", 0o755, t2).PAX(opq, "y"),
		wh("f"), wh("d"), wh("nothing"),
		convtest.TarDir("o/", 0o750, t2).PAX(opq, "y"), convtest.TarFile("o/kept", "layer 2's\n", 0o644, t2), wh("o/gone"),
		convtest.TarFile(".wh.g", "a plain file in an image\n", 0o644, t2),
		convtest.TarDir("f2d/", 0o755, t2), convtest.TarFile("f2d/in", "inside\n", 0o644, t2),
		convtest.TarFile("d2f", "now a file\n", 0o644, t2),
	)
	layers[2] = convtest.TarOf(t,
		// A directory over the whiteout of the one below: nothing of
		// layer 1's d shows.
		convtest.TarDir("d/", 0o700, t2), convtest.TarFile("d/new", "new\n", 0o644, t2),
		convtest.TarFile(".wh.f2d", "", 0o644, t2), convtest.TarFile("o/.wh.kept", "", 0o644, t2),
	)
	opts[1].Whiteouts = whiteout.Keep
	return layers, opts
}

// TestMergeOverlayForm merges layer images that hold the overlay rules in
// each spelling (devices 0:0 over a file and a directory, an opaque
// directory, an opaque root, a .wh. plain file, a directory over a file
// and the reverse) and compares the mount of the merged image with the
// overlayfs mount of the layers.
func TestMergeOverlayForm(t *testing.T) {
	roundtrip.RequireMount(t)
	layers, opts := overlayFormLayers(t)
	dir := roundtrip.WorkDir(t)
	var imgs, mnts []string
	for i, l := range layers {
		src := filepath.Join(dir, fmt.Sprintf("l%d.tar", i))
		must(t, os.WriteFile(src, l, 0o644))
		img := filepath.Join(dir, fmt.Sprintf("l%d.erofs", i))
		if _, err := mkfs.Build(img, src, opts[i]); err != nil {
			t.Fatal(err)
		}
		imgs = append(imgs, img)
		mnts = append(mnts, roundtrip.Mount(t, img))
	}
	want := convtest.TreeFromDir(t, overlayMount(t, mnts...))
	for p, present := range map[string]bool{
		"f": false, "d/x": false, "o/hidden": false, "o/kept": false, "nothing": false, "f2d": false, "d2f/y": false,
		"d/new": true, ".wh.g": true, "g": true, "keep/z": true, "d2f": true, "o": true,
	} {
		if (want.Node(p) != nil) != present {
			t.Fatalf("overlay of the layers: %s present = %v", p, !present)
		}
	}
	out := filepath.Join(dir, "merged.erofs")
	res, err := merge.Images(out, imgs, merge.Options{})
	if err != nil {
		t.Fatal(err)
	}
	got := convtest.TreeFromDir(t, roundtrip.Mount(t, out, res.Devices...))
	convtest.ReportDiff(t, "overlay of the layers vs merged", fstree.Diff(want, got, fstree.DiffOptions{}))
}
