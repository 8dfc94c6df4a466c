package convert_test

import (
	"os"
	"path/filepath"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/ocierofs/ocierofs/convert"
	"github.com/ocierofs/ocierofs/convert/internal/convtest"
	"github.com/ocierofs/ocierofs/convert/internal/roundtrip"
	"github.com/ocierofs/ocierofs/convert/spec"
)

// deviceSource is specSource with two layers more: one that makes a
// directory of a lower layer's file and adds a file large enough to be
// referenced in place, and one with another large file and a whiteout of
// a lower layer's directory.
func deviceSource(t testing.TB) v1.Image {
	ls, err := specSource(t, "amd64").Layers()
	must(t, err)
	ls = append(ls,
		convtest.Layer(t, convtest.Dir("etc/a", 0o755), convtest.File("etc/a/in", 0o644, []byte("a directory now\n")),
			convtest.File("big1", 0o644, convtest.RandomBytes(1, 100_000))),
		convtest.Layer(t, convtest.Dir("lib", 0o755), convtest.File("lib/big2", 0o600, convtest.RandomBytes(2, 70_000)),
			convtest.Whiteout("x"), convtest.Hardlink("lib/big2.link", "lib/big2")),
	)
	return convtest.Image(t, "amd64", ls...)
}

// layoutCases are the spec options each layout's test converts with:
// raw layers, +zstd with a standalone chunk index and dm-verity, and an
// embedded chunk index.
var layoutCases = []struct {
	name string
	opt  convert.ImageOptions
}{
	{"raw", convert.ImageOptions{SpecMediaTypes: true}},
	{"zstd with standalone chunk index and dm-verity", convert.ImageOptions{SpecMediaTypes: true, LayerZstd: true,
		Spec: convert.SpecOptions{ChunkIndex: convert.ChunkIndexStandalone, ChunkSize: 4096, DMVerity: true}}},
	{"embedded chunk index", convert.ImageOptions{SpecMediaTypes: true,
		Spec: convert.SpecOptions{ChunkIndex: convert.ChunkIndexEmbedded, ChunkSize: 8192}}},
}

// TestSpecDeviceLayout: with LayoutDevice, each converted layer is a
// device (§2.4), a standalone chunk index after its device (§3.8 rule 2),
// and one role-less metadata layer last, whose device slots are tagged
// with the device layers' digests (§8.1.12). The image passes every rule
// of the spec package; mounted as §7 says (the top layer, device= each
// device layer in order), it shows the tree of the overlay layout's
// conversion stacked with overlayfs; the same source gives the same bytes.
func TestSpecDeviceLayout(t *testing.T) {
	src := deviceSource(t)
	for _, tc := range layoutCases {
		t.Run(tc.name, func(t *testing.T) {
			opt := tc.opt
			opt.Layout = convert.LayoutDevice
			img, rep := convertImage(t, src, opt)
			specCheck(t, img, nil)
			m, err := img.Manifest()
			must(t, err)
			srcLayers, err := src.Layers()
			must(t, err)
			var devices []v1.Descriptor
			var devIdx []int
			for i, l := range m.Layers {
				role, has := l.Annotations[spec.AnnotationRole]
				switch {
				case i == len(m.Layers)-1:
					if has || l.MediaType == spec.MediaTypeChunkIndex {
						t.Errorf("top layer %s: role %q", l.MediaType, role)
					}
				case l.MediaType == spec.MediaTypeChunkIndex:
					if has || m.Layers[i-1].Annotations[spec.AnnotationRole] != spec.RoleDevice {
						t.Errorf("layer %d: a chunk index with role %q after a %q layer", i, role, m.Layers[i-1].Annotations[spec.AnnotationRole])
					}
				case role != spec.RoleDevice:
					t.Errorf("layer %d (%s): role %q, want device", i, l.MediaType, role)
				default:
					devices, devIdx = append(devices, l), append(devIdx, i)
				}
			}
			if len(devices) != len(srcLayers) {
				t.Fatalf("%d device layers for %d source layers", len(devices), len(srcLayers))
			}
			if tc.opt.Spec.ChunkIndex == convert.ChunkIndexStandalone && countType(m.Layers, spec.MediaTypeChunkIndex) != len(srcLayers) {
				t.Errorf("%d standalone chunk indexes, want one per device", countType(m.Layers, spec.MediaTypeChunkIndex))
			}
			if len(rep.Layers) != len(srcLayers)+1 {
				t.Errorf("report of %d layers", len(rep.Layers))
			}
			cf, err := img.ConfigFile()
			must(t, err)
			scf, err := src.ConfigFile()
			must(t, err)
			if len(cf.RootFS.DiffIDs) != len(m.Layers) || len(cf.History) != len(scf.History)+1 {
				t.Errorf("config: %d diff_ids, %d history entries for %d layers", len(cf.RootFS.DiffIDs), len(cf.History), len(m.Layers))
			}

			// §8.3: the same source, the same bytes.
			convertsTheSame(t, src, opt, img)

			// ocierofs check finds the source's layers in the devices, and
			// the source's layers stacked in the metadata layer.
			if layers := checkSource(t, img, src); layers != len(srcLayers)+1 {
				t.Errorf("check compared %d layers", layers)
			}

			// §8.1.12: device slot n is the n-th device layer, tagged with
			// the hex of its digest.
			raws := convtest.RawLayers(t, img, t.TempDir())
			top := raws[len(raws)-1]
			slots := openErofs(t, top).Devices()
			if len(slots) != len(devices) {
				t.Fatalf("top layer has %d devices, want %d", len(slots), len(devices))
			}
			var devFiles []string
			for i, s := range slots {
				if s.Tag != devices[i].Digest.Hex {
					t.Errorf("device %d: tag %q, want %s", i+1, s.Tag, devices[i].Digest.Hex)
				}
				devFiles = append(devFiles, raws[devIdx[i]])
			}
			// The large files are referenced, not copied.
			if fi, err := os.Stat(top); err == nil && fi.Size() >= 70_000 {
				t.Errorf("metadata layer of %d bytes: the large files' data was copied", fi.Size())
			}

			// §7: the top layer mounted with its devices shows what the
			// overlay layout shows stacked.
			ov, _ := convertImage(t, src, tc.opt)
			var lowers []string
			for _, p := range convtest.RawLayers(t, ov, filepath.Join(t.TempDir())) {
				if openable(p) {
					lowers = append(lowers, p)
				}
			}
			want := convtest.TreeFromDir(t, convtest.MountStack(t, lowers))
			got := convtest.TreeFromDir(t, roundtrip.Mount(t, top, devFiles...))
			convtest.ReportDiff(t, "device layout vs overlay layout", diffTrees(want, got))
			for _, p := range []string{"etc/a/in", "big1", "lib/big2", "lib/big2.link", "var/new2", "etc/c"} {
				if got.Node(p) == nil {
					t.Errorf("mounted: no %s", p)
				}
			}
			for _, p := range []string{"x", "etc/b", "var/kept"} {
				if got.Node(p) != nil {
					t.Errorf("mounted: %s, which a layer above hides", p)
				}
			}
			convtest.ReportDiff(t, "erofs.Image vs mount", diffTrees(roundtrip.ProjectTree(t, top, devFiles...), got))
		})
	}
}

// openable reports whether the file at p is an EROFS image (not a
// standalone chunk index).
func openable(p string) bool {
	b, err := os.ReadFile(p)
	return err == nil && len(b) >= 1028 && b[1024] == 0xe2 && b[1025] == 0xe1 && b[1026] == 0xf5 && b[1027] == 0xe0
}

// TestSpecDeviceLayoutRefusals: the device layout needs the spec's media
// types and is no flattened image.
func TestSpecDeviceLayoutRefusals(t *testing.T) {
	for _, opt := range []convert.ImageOptions{
		{Layout: convert.LayoutDevice},
		{Layout: convert.LayoutDevice, SpecMediaTypes: true, Flatten: true},
		{Layout: "sideways", SpecMediaTypes: true},
	} {
		opt.TempDir = t.TempDir()
		if c, err := convert.NewConverter(opt); err == nil {
			c.Close()
			t.Errorf("%+v: no error", opt)
		}
	}
}
