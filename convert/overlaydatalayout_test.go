package convert_test

import (
	"crypto/sha256"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/ocierofs/ocierofs/convert"
	"github.com/ocierofs/ocierofs/convert/internal/convtest"
	"github.com/ocierofs/ocierofs/convert/internal/roundtrip"
	"github.com/ocierofs/ocierofs/convert/overlaydata"
	"github.com/ocierofs/ocierofs/convert/spec"
	"github.com/ocierofs/ocierofs/erofs"
)

// overlayDataSource is deviceSource with a layer more: an empty file and
// a file with the content of a lower layer's large file, which the data
// layer stores once.
func overlayDataSource(t testing.TB) v1.Image {
	ls, err := deviceSource(t).Layers()
	must(t, err)
	ls = append(ls, convtest.Layer(t, convtest.File("empty", 0o644, nil),
		convtest.File("lib/same-as-big1", 0o640, convtest.RandomBytes(1, 100_000)).Xattr("user.same", "1")))
	return convtest.Image(t, "amd64", ls...)
}

// TestSpecOverlayDataLayout: with LayoutOverlayData, the image is one
// overlay-data layer (its standalone chunk index after it), and one
// role-less metadata layer last (§2.4, §3.8). It passes every rule of the
// spec package; mounted as a runtime mounts it (overlayfs, the data layer
// a data-only lower), it shows the tree of the overlay layout's
// conversion, contents read through the redirects; the same source gives
// the same bytes.
func TestSpecOverlayDataLayout(t *testing.T) {
	src := overlayDataSource(t)
	for _, tc := range layoutCases {
		t.Run(tc.name, func(t *testing.T) {
			opt := tc.opt
			opt.Layout = convert.LayoutOverlayData
			img, rep := convertImage(t, src, opt)
			specCheck(t, img, nil)
			m, err := img.Manifest()
			must(t, err)
			checkOverlayDataRoles(t, m.Layers, tc.opt.Spec.ChunkIndex == convert.ChunkIndexStandalone)
			if len(rep.Layers) != 2 {
				t.Errorf("report of %d layers, want 2", len(rep.Layers))
			}
			cf, err := img.ConfigFile()
			must(t, err)
			if len(cf.RootFS.DiffIDs) != len(m.Layers) || len(cf.History) != 2 || cf.History[0].CreatedBy != convert.OverlayDataBy {
				t.Errorf("config: %d diff_ids for %d layers, history %+v", len(cf.RootFS.DiffIDs), len(m.Layers), cf.History)
			}

			// §8.3: the same source, the same bytes.
			convertsTheSame(t, src, opt, img)

			// ocierofs check finds the source's layers stacked in the
			// metadata layer read through the data layer.
			if layers := checkSource(t, img, src); layers != 2 {
				t.Errorf("check compared %d layers", layers)
			}

			raws := convtest.RawLayers(t, img, t.TempDir())
			data, meta := raws[0], raws[len(raws)-1]
			checkMetaLayer(t, meta, data)

			// Mounted, it shows what the overlay layout shows stacked.
			ov, _ := convertImage(t, src, tc.opt)
			var lowers []string
			for _, p := range convtest.RawLayers(t, ov, t.TempDir()) {
				if openable(p) {
					lowers = append(lowers, p)
				}
			}
			wantDir, gotDir := convtest.MountStack(t, lowers), convtest.MountOverlayData(t, meta, data)
			want, got := convtest.TreeFromDir(t, wantDir), convtest.TreeFromDir(t, gotDir)
			convtest.ReportDiff(t, "overlay-data layout vs overlay layout", diffTrees(want, got))
			checkLinkCounts(t, wantDir, gotDir, got.Paths())
			for _, p := range []string{"etc/a/in", "big1", "lib/big2", "lib/big2.link", "var/new2", "etc/c", "empty", "lib/same-as-big1"} {
				if got.Node(p) == nil {
					t.Errorf("mounted: no %s", p)
				}
			}
			for _, p := range []string{"x", "etc/b", "var/kept"} {
				if got.Node(p) != nil {
					t.Errorf("mounted: %s, which a layer above hides", p)
				}
			}
			if skip := roundtrip.Fsck(t, meta, 0); skip != "" {
				t.Logf("fsck.erofs skipped: %s", skip)
			}
			roundtrip.Fsck(t, data, 0)
		})
	}
}

// checkLinkCounts: each non-directory of paths has the same link count
// under both mounts (overlayfs reports a merged directory's differently).
func checkLinkCounts(t *testing.T, wantDir, gotDir string, paths []string) {
	t.Helper()
	nlink := func(p string) (uint64, bool) {
		fi, err := os.Lstat(p)
		if err != nil || fi.IsDir() {
			return 0, false
		}
		return uint64(fi.Sys().(*syscall.Stat_t).Nlink), true
	}
	for _, p := range paths {
		w, ok := nlink(filepath.Join(wantDir, p))
		if !ok {
			continue
		}
		if g, _ := nlink(filepath.Join(gotDir, p)); g != w {
			t.Errorf("%s: %d links, the overlay layout %d", p, g, w)
		}
	}
}

// checkOverlayDataRoles: layer 0 is overlay-data, a standalone chunk
// index (if any) follows it without a role, and the top layer has none.
func checkOverlayDataRoles(t *testing.T, ls []v1.Descriptor, standalone bool) {
	t.Helper()
	want := 2
	if standalone {
		want = 3
	}
	if len(ls) != want {
		t.Fatalf("%d layers, want %d", len(ls), want)
	}
	if r := ls[0].Annotations[spec.AnnotationRole]; r != spec.RoleOverlayData {
		t.Errorf("layer 0: role %q, want overlay-data", r)
	}
	if standalone && (ls[1].MediaType != spec.MediaTypeChunkIndex || ls[1].Annotations[spec.AnnotationRole] != "") {
		t.Errorf("layer 1: %s, role %q: want the data layer's chunk index", ls[1].MediaType, ls[1].Annotations[spec.AnnotationRole])
	}
	if r, has := ls[len(ls)-1].Annotations[spec.AnnotationRole]; has {
		t.Errorf("top layer: role %q", r)
	}
}

// checkMetaLayer reads the metadata layer with the project's reader: each
// non-empty regular file is metacopy, its redirect names a file of the
// data layer of its size, and it stores no data; empty files are plain.
func checkMetaLayer(t *testing.T, meta, data string) {
	t.Helper()
	mimg, dimg := openErofs(t, meta), openErofs(t, data)
	files := 0
	must(t, mimg.Walk(".", func(p string, ino *erofs.Inode) error {
		if !ino.IsRegular() {
			return nil
		}
		xs, err := mimg.Xattrs(p)
		if err != nil {
			return err
		}
		x := map[string]string{}
		for _, a := range xs {
			x[a.Name] = string(a.Value)
		}
		red, hasRed := x[overlaydata.RedirectXattr]
		_, hasMeta := x[overlaydata.MetacopyXattr]
		if ino.Size == 0 {
			if hasRed || hasMeta {
				t.Errorf("%s: empty, with overlay xattrs %v", p, x)
			}
			return nil
		}
		files++
		if !hasMeta || !strings.HasPrefix(red, "/") {
			t.Errorf("%s: xattrs %v: want metacopy and an absolute redirect", p, x)
			return nil
		}
		if di, err := dimg.Lstat(strings.TrimPrefix(red, "/")); err != nil || di.Size != ino.Size {
			t.Errorf("%s: redirect %s in the data layer: %+v, %v", p, red, di, err)
		}
		return nil
	}))
	if files < 5 {
		t.Errorf("%d metacopy files", files)
	}
	if fi, err := os.Stat(meta); err != nil || fi.Size() >= 64<<10 {
		t.Errorf("metadata layer of %d bytes: file data in it", fi.Size())
	}
}

// TestSpecOverlayDataLayoutRefusals: the overlay-data layout needs the
// spec's media types and is no flattened image.
func TestSpecOverlayDataLayoutRefusals(t *testing.T) {
	for _, opt := range []convert.ImageOptions{
		{Layout: convert.LayoutOverlayData},
		{Layout: convert.LayoutOverlayData, SpecMediaTypes: true, Flatten: true},
		{Layout: convert.LayoutOverlayData, SpecMediaTypes: true, Layer: convert.Options{PrefetchList: []string{"a"}}},
	} {
		opt.TempDir = t.TempDir()
		if c, err := convert.NewConverter(opt); err == nil {
			c.Close()
			t.Errorf("%+v: no error", opt)
		}
	}
}

// TestSpecOverlayDataCrossLayerLink: a hard link to a lower layer's file,
// which the overlay layout refuses (§3.7), is made as --flatten makes it:
// the metadata layer is one layer, and through overlayfs the link shows
// its target's content.
func TestSpecOverlayDataCrossLayerLink(t *testing.T) {
	linked := convtest.Image(t, "amd64",
		convtest.Layer(t, convtest.Dir(".", 0o755), convtest.File("f", 0o644, []byte("f\n"))),
		convtest.Layer(t, convtest.Hardlink("l", "f")))
	img, _ := convertImage(t, linked, convert.ImageOptions{SpecMediaTypes: true, Layout: convert.LayoutOverlayData})
	specCheck(t, img, nil)
	raws := convtest.RawLayers(t, img, t.TempDir())
	got := convtest.TreeFromDir(t, convtest.MountOverlayData(t, raws[1], raws[0]))
	want := sha256.Sum256([]byte("f\n"))
	for _, p := range []string{"f", "l"} {
		if n := got.Node(p); n == nil || n.Digest != want {
			t.Errorf("%s through the overlay: %+v", p, n)
		}
	}
}
