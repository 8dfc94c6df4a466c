package convert_test

import (
	"context"
	"encoding/json"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/klauspost/compress/zstd"

	"github.com/ocierofs/ocierofs/convert"
	"github.com/ocierofs/ocierofs/convert/check"
	"github.com/ocierofs/ocierofs/oci"
	"github.com/ocierofs/ocierofs/oci/chunkindex"
)

// TestSpecLayers converts testdata/busybox with each of the EROFS image
// spec's layer features, raw and +zstd: the chunk index (embedded,
// standalone) and the dm-verity tree. Each image is checked by Check
// (trees against the source; every chunk against its checksum and the
// image data; the tree against its annotations), its annotations and
// diff_ids are the spec's (§2.3, §5.2), and, as root, its layers mount as
// they are (a raw blob with its index after the image) and stack to the
// source's tree.
func TestSpecLayers(t *testing.T) {
	for _, tc := range []struct {
		name  string
		zstd  bool
		spec  convert.SpecOptions
		extra int // standalone chunk-index layers
	}{
		{"embedded", false, convert.SpecOptions{ChunkIndex: convert.ChunkIndexEmbedded, ChunkSize: 4096}, 0},
		{"embedded-zstd", true, convert.SpecOptions{ChunkIndex: convert.ChunkIndexEmbedded, ChunkSize: 4096}, 0},
		{"standalone", false, convert.SpecOptions{ChunkIndex: convert.ChunkIndexStandalone, ChunkSize: 4096}, 2},
		{"standalone-zstd", true, convert.SpecOptions{ChunkIndex: convert.ChunkIndexStandalone, ChunkSize: 4096}, 2},
		{"dmverity", false, convert.SpecOptions{DMVerity: true}, 0},
		{"dmverity-zstd-embedded", true, convert.SpecOptions{DMVerity: true, ChunkIndex: convert.ChunkIndexEmbedded, ChunkSize: 8192}, 0},
		{"dmverity-embedded", false, convert.SpecOptions{DMVerity: true, ChunkIndex: convert.ChunkIndexEmbedded}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			opt := convert.ImageOptions{SpecMediaTypes: true, LayerZstd: tc.zstd, Spec: tc.spec, Jobs: 2}
			rep, dst := convertBusybox(t, dir, opt)
			if again, _ := convertBusybox(t, t.TempDir(), opt); again.Digest != rep.Digest {
				t.Errorf("not deterministic: %s, then %s", rep.Digest, again.Digest)
			}
			ctx := context.Background()
			art, err := oci.Get(ctx, dst, oci.Remote{})
			if err != nil {
				t.Fatal(err)
			}
			src, _ := oci.ParseRef("oci:../testdata/busybox:latest", false)
			srcArt, err := oci.Get(ctx, src, oci.Remote{})
			if err != nil {
				t.Fatal(err)
			}
			var diffs []string
			res, err := check.Converted(ctx, art, srcArt, check.Options{TempDir: t.TempDir(), Report: func(s string) { diffs = append(diffs, s) }})
			if err != nil || res.Differences > 0 || res.Layers != 3 {
				t.Fatalf("check: %d layers, %v, differences:\n%s", res.Layers, err, strings.Join(diffs, "\n"))
			}
			m, err := art.Image.Manifest()
			if err != nil {
				t.Fatal(err)
			}
			cf, err := art.Image.ConfigFile()
			if err != nil {
				t.Fatal(err)
			}
			if len(m.Layers) != 3+tc.extra || len(cf.RootFS.DiffIDs) != len(m.Layers) {
				t.Fatalf("%d layers and %d diff_ids, want %d", len(m.Layers), len(cf.RootFS.DiffIDs), 3+tc.extra)
			}
			var images []string
			for i, d := range m.Layers {
				blob := filepath.Join(dir, "blobs", "sha256", d.Digest.Hex)
				if d.MediaType == convert.MediaTypeChunkIndex {
					prev := m.Layers[i-1]
					if d.Annotations[chunkindex.AnnotationTarget] != prev.Digest.String() || cf.RootFS.DiffIDs[i] != d.Digest {
						t.Errorf("layer %d: chunk index with target %q, diff_id %s; want %s, %s", i, d.Annotations[chunkindex.AnnotationTarget], cf.RootFS.DiffIDs[i], prev.Digest, d.Digest)
					}
					continue
				}
				want := convert.MediaTypeSpec
				if tc.zstd {
					want = convert.MediaTypeSpecZstd
				}
				if d.MediaType != want {
					t.Errorf("layer %d: media type %s, want %s", i, d.MediaType, want)
				}
				_, hasRange := d.Annotations[chunkindex.AnnotationRange]
				_, hasDigest := d.Annotations[chunkindex.AnnotationDigest]
				if emb := tc.spec.ChunkIndex == convert.ChunkIndexEmbedded; hasRange != emb || hasDigest != emb {
					t.Errorf("layer %d: chunk-index annotations %v", i, d.Annotations)
				}
				if _, ok := d.Annotations[convert.AnnotationVerityRootDigest]; ok != tc.spec.DMVerity {
					t.Errorf("layer %d: dm-verity annotations %v", i, d.Annotations)
				}
				img := blob
				if tc.zstd {
					img = unzstd(t, blob, t.TempDir())
				} else if cf.RootFS.DiffIDs[i] != d.Digest {
					t.Errorf("layer %d: a raw layer's diff_id %s is not its digest %s (§5.2)", i, cf.RootFS.DiffIDs[i], d.Digest)
				}
				if tc.spec.DMVerity {
					veritysetupVerify(t, img, d.Annotations)
				}
				images = append(images, img)
			}
			stackAndCheck(t, images)
		})
	}
}

// TestSpecOptionsRefused: the spec's features need its media types.
func TestSpecOptionsRefused(t *testing.T) {
	_, err := convert.NewConverter(convert.ImageOptions{Spec: convert.SpecOptions{DMVerity: true}})
	if err == nil {
		t.Fatal("dm-verity without the spec's media types: no error")
	}
}

// unzstd decompresses a +zstd blob (its index frame skipped) into dir.
func unzstd(t *testing.T, blob, dir string) string {
	t.Helper()
	in, err := os.Open(blob)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	zr, err := zstd.NewReader(in)
	if err != nil {
		t.Fatal(err)
	}
	defer zr.Close()
	p := filepath.Join(dir, filepath.Base(blob)+".img")
	out, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	if _, err := io.Copy(out, zr); err != nil {
		t.Fatal(err)
	}
	return p
}

// veritysetupVerify has veritysetup, where installed, check the tree in
// img against the annotations: the kernel's userspace reading the layout
// the spec gives (§3.5).
func veritysetupVerify(t *testing.T, img string, ann map[string]string) {
	t.Helper()
	vs, err := exec.LookPath("veritysetup")
	if err != nil {
		t.Log("no veritysetup: the tree is checked by Check alone")
		return
	}
	root := strings.TrimPrefix(ann[convert.AnnotationVerityRootDigest], "sha256:")
	off := ann[convert.AnnotationVerityHashOffset]
	if out, err := exec.Command(vs, "verify", "--hash-offset="+off, img, img, root).CombinedOutput(); err != nil {
		t.Errorf("veritysetup verify --hash-offset=%s: %v: %s", off, err, out)
	}
}

// editedImage is an image whose manifest a test changed.
type editedImage struct {
	v1.Image
	m *v1.Manifest
}

func (e editedImage) Manifest() (*v1.Manifest, error) { return e.m, nil }
func (e editedImage) RawManifest() ([]byte, error)    { return json.Marshal(e.m) }

// TestSpecCheckFaults: Check names the section of each spec fault it
// finds in a layer's annotations: a root digest that is not the tree's,
// a chunk-index digest that is not the index's, a standalone index whose
// target is not the layer before it.
func TestSpecCheckFaults(t *testing.T) {
	ctx := context.Background()
	src, _ := oci.ParseRef("oci:../testdata/busybox:latest", false)
	srcArt, err := oci.Get(ctx, src, oci.Remote{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		spec convert.SpecOptions
		key  string
		val  string
		want string
	}{
		{"root digest", convert.SpecOptions{DMVerity: true}, convert.AnnotationVerityRootDigest, "sha256:" + strings.Repeat("ab", 32), "§3.5"},
		{"hash offset", convert.SpecOptions{DMVerity: true}, convert.AnnotationVerityHashOffset, "4096", "§3.5"},
		{"index digest", convert.SpecOptions{ChunkIndex: convert.ChunkIndexEmbedded}, chunkindex.AnnotationDigest, "sha256:" + strings.Repeat("cd", 32), "§3.4"},
		{"index range", convert.SpecOptions{ChunkIndex: convert.ChunkIndexEmbedded}, chunkindex.AnnotationRange, "0", "§3.4"},
		{"target", convert.SpecOptions{ChunkIndex: convert.ChunkIndexStandalone}, chunkindex.AnnotationTarget, "sha256:" + strings.Repeat("ef", 32), "§3.4"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, dst := convertBusybox(t, t.TempDir(), convert.ImageOptions{SpecMediaTypes: true, LayerZstd: true, Spec: tc.spec})
			art, err := oci.Get(ctx, dst, oci.Remote{})
			if err != nil {
				t.Fatal(err)
			}
			m, err := art.Image.Manifest()
			if err != nil {
				t.Fatal(err)
			}
			mm := *m
			mm.Layers = slices.Clone(m.Layers)
			for i, d := range mm.Layers {
				if _, ok := d.Annotations[tc.key]; ok {
					d.Annotations = maps.Clone(d.Annotations)
					d.Annotations[tc.key] = tc.val
					mm.Layers[i] = d
					break
				}
			}
			art.Image = editedImage{art.Image, &mm}
			var diffs []string
			res, err := check.Converted(ctx, art, srcArt, check.Options{TempDir: t.TempDir(), Report: func(s string) { diffs = append(diffs, s) }})
			if err != nil || res.Differences == 0 || !strings.Contains(strings.Join(diffs, "\n"), tc.want) {
				t.Errorf("check: %v, differences:\n%s", err, strings.Join(diffs, "\n"))
			}
			t.Log(strings.Join(diffs, "\n"))
		})
	}
}
