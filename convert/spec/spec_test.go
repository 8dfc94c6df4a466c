package spec

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/klauspost/compress/zstd"

	"github.com/ocierofs/ocierofs/convert/dmverity"
	"github.com/ocierofs/ocierofs/erofs"
	"github.com/ocierofs/ocierofs/oci/chunkindex"
)

// fsImage builds an EROFS image of the entries (regular files empty).
func fsImage(t *testing.T, entries ...erofs.Entry) []byte {
	t.Helper()
	p := filepath.Join(t.TempDir(), "img")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b, err := erofs.NewBuilder(f, erofs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for _, e := range entries {
		e.Mtime = time.Unix(0, 0)
		if err := b.Add(e, bytes.NewReader(make([]byte, e.Size))); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Finish(); err != nil {
		t.Fatal(err)
	}
	out, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func file(p string) erofs.Entry { return erofs.Entry{Path: p, Mode: erofs.S_IFREG | 0o644} }
func dir(p string) erofs.Entry  { return erofs.Entry{Path: p, Mode: erofs.S_IFDIR | 0o755} }
func whiteoutAt(p string) erofs.Entry {
	return erofs.Entry{Path: p, Mode: erofs.S_IFCHR}
}
func opaqueDir(p string) erofs.Entry {
	e := dir(p)
	e.Xattrs = []erofs.Xattr{{Name: "trusted.overlay.opaque", Value: []byte("y")}}
	return e
}

func zstdOf(t *testing.T, b []byte) []byte {
	t.Helper()
	enc, err := zstd.NewWriter(nil)
	if err != nil {
		t.Fatal(err)
	}
	return enc.EncodeAll(b, nil)
}

func sha(b []byte) v1.Hash {
	h, _, _ := v1.SHA256(bytes.NewReader(b))
	return h
}

// lay is one layer of a hand-made image.
type lay struct {
	mt   types.MediaType
	data []byte // the blob
	ann  map[string]string
	// diffID for the config: the digest of data, or of raw for +zstd.
	raw []byte
}

func rawLayer(fs []byte, ann ...string) lay {
	return lay{mt: MediaTypeErofs, data: fs, raw: fs, ann: annots(ann...)}
}

func zstdLayer(t *testing.T, fs []byte, ann ...string) lay {
	a := annots(ann...)
	if _, ok := a[AnnotationUncompressed]; !ok {
		a[AnnotationUncompressed] = sha(fs).String()
	}
	return lay{mt: MediaTypeErofsZstd, data: zstdOf(t, fs), raw: fs, ann: a}
}

func annots(kv ...string) map[string]string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] == "-" {
			m[kv[i]] = "\x00delete"
			continue
		}
		m[kv[i]] = kv[i+1]
	}
	return m
}

// handImage is an image made of its raw manifest and config.
type handImage struct {
	manifest, config []byte
	blobs            map[v1.Hash][]byte
}

func (h *handImage) RawConfigFile() ([]byte, error)      { return h.config, nil }
func (h *handImage) MediaType() (types.MediaType, error) { return types.OCIManifestSchema1, nil }
func (h *handImage) RawManifest() ([]byte, error)        { return h.manifest, nil }
func (h *handImage) LayerByDigest(d v1.Hash) (partial.CompressedLayer, error) {
	if b, ok := h.blobs[d]; ok {
		return static.NewLayer(b, types.OCILayer), nil
	}
	return nil, fmt.Errorf("no blob %s", d)
}

// makeImage makes an image of the layers, with a config of os.features
// ["erofs"] and the layers' diff_ids, which edit may change (nil: none).
func makeImage(t *testing.T, edit func(cfg map[string]any), layers ...lay) v1.Image {
	t.Helper()
	h := &handImage{blobs: map[v1.Hash][]byte{}}
	var diffIDs []string
	mf := v1.Manifest{SchemaVersion: 2, MediaType: types.OCIManifestSchema1, Layers: []v1.Descriptor{}}
	for _, l := range layers {
		d := v1.Descriptor{MediaType: l.mt, Digest: sha(l.data), Size: int64(len(l.data))}
		for k, v := range l.ann {
			if v == "\x00delete" {
				continue
			}
			if d.Annotations == nil {
				d.Annotations = map[string]string{}
			}
			d.Annotations[k] = v
		}
		mf.Layers = append(mf.Layers, d)
		h.blobs[d.Digest] = l.data
		raw := l.raw
		if raw == nil {
			raw = l.data
		}
		diffIDs = append(diffIDs, sha(raw).String())
	}
	cfg := map[string]any{
		"architecture": "amd64", "os": "linux", "os.features": []string{"erofs"},
		"rootfs": map[string]any{"type": "layers", "diff_ids": diffIDs},
	}
	if edit != nil {
		edit(cfg)
	}
	var err error
	if h.config, err = json.Marshal(cfg); err != nil {
		t.Fatal(err)
	}
	mf.Config = v1.Descriptor{MediaType: types.OCIConfigJSON, Digest: sha(h.config), Size: int64(len(h.config))}
	h.blobs[mf.Config.Digest] = h.config
	if h.manifest, err = json.Marshal(mf); err != nil {
		t.Fatal(err)
	}
	img, err := partial.CompressedToImage(h)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

func check(t *testing.T, img v1.Image) []string {
	t.Helper()
	vs, err := CheckImage(context.Background(), img, Options{Contents: true, TempDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, v := range vs {
		out = append(out, v.String())
	}
	return out
}

// expect says that the violations are exactly want, each matched as a
// prefix (nil: none).
func expect(t *testing.T, got []string, want ...string) {
	t.Helper()
	ok := len(got) == len(want)
	for i := 0; ok && i < len(want); i++ {
		ok = strings.HasPrefix(got[i], want[i])
	}
	if !ok {
		t.Errorf("violations:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

func TestConformantImages(t *testing.T) {
	fs := fsImage(t, dir("etc"), file("etc/a"))
	t.Run("raw", func(t *testing.T) { expect(t, check(t, makeImage(t, nil, rawLayer(fs)))) })
	t.Run("zstd", func(t *testing.T) { expect(t, check(t, makeImage(t, nil, zstdLayer(t, fs)))) })
	t.Run("zstd without rootfs", func(t *testing.T) {
		expect(t, check(t, makeImage(t, func(c map[string]any) { delete(c, "rootfs") }, zstdLayer(t, fs))),
			"§5.2: config: no rootfs.diff_ids")
	})
	t.Run("overlay stack", func(t *testing.T) {
		up := fsImage(t, whiteoutAt("etc"), opaqueDir("usr"))
		expect(t, check(t, makeImage(t, nil, rawLayer(fs, AnnotationRole, RoleOverlayLower), zstdLayer(t, up))))
	})
	t.Run("dm-verity and roles", func(t *testing.T) {
		blob, off, root := withVerity(t, fs)
		expect(t, check(t, makeImage(t, nil,
			lay{mt: types.OCILayer, data: []byte("model"), ann: annots(AnnotationRole, RoleDevice)},
			rawLayer(blob, AnnotationHashOffset, off, AnnotationRootDigest, root, AnnotationBlockSize, "4096"))))
	})
	t.Run("embedded chunk index", func(t *testing.T) {
		blob, ann := withChunkIndex(t, fs, nil)
		expect(t, check(t, makeImage(t, nil, rawLayer(blob, ann...))))
	})
}

// withVerity appends a dm-verity tree to the image fs: the blob, its
// hash_offset and root digest annotations.
func withVerity(t *testing.T, fs []byte) (blob []byte, off, root string) {
	t.Helper()
	f, err := os.Create(filepath.Join(t.TempDir(), "verity"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(fs); err != nil {
		t.Fatal(err)
	}
	m, err := dmverity.Format(f, int64(len(fs)), 4096)
	if err != nil {
		t.Fatal(err)
	}
	if blob, err = os.ReadFile(f.Name()); err != nil {
		t.Fatal(err)
	}
	return blob, fmt.Sprint(m.HashOffset), "sha256:" + m.RootHash
}

// withChunkIndex appends a chunk index of one chunk, with its SHA-256
// checksum (edit, if set, changes the index before it is written), to
// the raw image fs: the blob and its annotations.
func withChunkIndex(t *testing.T, fs []byte, edit func(*chunkindex.Index)) ([]byte, []string) {
	t.Helper()
	sum := sha256.Sum256(fs)
	x := &chunkindex.Index{Compression: chunkindex.None, UncompressedSize: uint64(len(fs)), HashAlgo: chunkindex.HashSHA2, HashSize: 32,
		BlockOffsets: []uint64{0}, UncompressedOffsets: []uint64{0}, Checksums: sum[:]}
	if edit != nil {
		edit(x)
	}
	payload, err := x.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	return append(slices.Clone(fs), payload...), []string{AnnotationChunkRange, fmt.Sprint(len(fs)), AnnotationChunkDigest, chunkindex.Digest(payload)}
}

func TestSection2_3(t *testing.T) {
	fs := fsImage(t, file("a"))
	root := "sha256:" + strings.Repeat("ab", 32)
	for _, c := range []struct {
		name string
		ann  []string
		want string
	}{
		{"range", []string{AnnotationChunkRange, "x:4", AnnotationChunkDigest, root}, "§2.3: layer 0: org.erofs.chunk-index.range \"x:4\" is not a range"},
		{"digest", []string{AnnotationChunkDigest, "sha256:xyz"}, "§2.3: layer 0: org.erofs.chunk-index.digest \"sha256:xyz\" is not a digest"},
		{"media type", []string{AnnotationChunkMediaType, "chunk index"}, "§2.3: layer 0: org.erofs.chunk-index.mediaType \"chunk index\" is not a media type"},
		{"uint", []string{AnnotationHashOffset, "-4096", AnnotationRootDigest, root}, "§2.3: layer 0: org.erofs.dmverity.hash_offset \"-4096\" is not a uint"},
		{"role", []string{AnnotationRole, "lower"}, "§2.3: layer 0: org.erofs.role \"lower\" is not a role"},
		{"hash_offset multiple", []string{AnnotationHashOffset, "6144", AnnotationRootDigest, root, AnnotationBlockSize, "4096"},
			"§2.3: layer 0: org.erofs.dmverity.hash_offset 6144 not a multiple of block_size 4096"},
		{"hash_offset default block", []string{AnnotationHashOffset, "512", AnnotationRootDigest, root},
			"§2.3: layer 0: org.erofs.dmverity.hash_offset 512 not a multiple of block_size 4096"},
		{"root without offset", []string{AnnotationRootDigest, root}, "§2.3: layer 0: org.erofs.dmverity.root_digest without"},
		{"offset without root", []string{AnnotationHashOffset, "4096"}, "§2.3: layer 0: org.erofs.dmverity.hash_offset without"},
		{"raw uncompressed digest", []string{AnnotationUncompressed, root}, "§2.3: layer 0: org.erofs.uncompressed-digest " + root + " of a raw layer"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := check(t, makeImage(t, nil, rawLayer(fs, c.ann...)))
			if c.name == "raw uncompressed digest" { // §5.2 says it too
				expect(t, got, c.want, "§5.2: layer 0: org.erofs.uncompressed-digest")
				return
			}
			expect(t, got, c.want)
		})
	}
	t.Run("chunk digest recommended", func(t *testing.T) {
		blob, ann := withChunkIndex(t, fs, nil)
		expect(t, check(t, makeImage(t, nil, rawLayer(blob, ann[:2]...))),
			"§2.3: layer 0: an embedded chunk index without org.erofs.chunk-index.digest (SHOULD)")
	})
	t.Run("unknown org.erofs annotations", func(t *testing.T) {
		expect(t, check(t, makeImage(t, nil, rawLayer(fs, "org.erofs.future", "anything"))))
	})
}

func TestSection2_4(t *testing.T) {
	fs := fsImage(t, file("a"))
	tarLayer := lay{mt: types.OCILayer, data: []byte("tar"), ann: annots(AnnotationRole, RoleOverlayLower)}
	expect(t, check(t, makeImage(t, nil, tarLayer, rawLayer(fs))),
		"§2.4: layer 0: role overlay-lower on a application/vnd.oci.image.layer.v1.tar+gzip layer",
		"§4: layer 0: media type application/vnd.oci.image.layer.v1.tar+gzip is none of",
		"§4: EROFS and tar layers in one manifest (SHOULD)")
	t.Run("device unconsumed", func(t *testing.T) {
		expect(t, check(t, makeImage(t, nil, rawLayer(fs), lay{mt: types.OCILayer, data: []byte("dev"), ann: annots(AnnotationRole, RoleDevice)})),
			"§2.4: layer 1: a device layer that no non-device EROFS layer above it consumes",
			"§3.8: layer 1: last layer is application/vnd.oci.image.layer.v1.tar+gzip")
	})
	t.Run("overlay-data unconsumed", func(t *testing.T) {
		expect(t, check(t, makeImage(t, nil, rawLayer(fs, AnnotationRole, RoleOverlayData))),
			"§2.4: layer 0: an overlay-data layer that no EROFS metadata layer above it consumes",
			"§3.8: layer 0: last layer has role overlay-data")
	})
	t.Run("overlay-data on a tar layer", func(t *testing.T) {
		expect(t, check(t, makeImage(t, nil, lay{mt: types.OCILayer, data: []byte("data"), ann: annots(AnnotationRole, RoleOverlayData)}, rawLayer(fs))),
			"§2.4: layer 0: role overlay-data on a application/vnd.oci.image.layer.v1.tar+gzip layer",
			"§4: layer 0: media type application/vnd.oci.image.layer.v1.tar+gzip is none of",
			"§4: EROFS and tar layers in one manifest (SHOULD)")
	})
}

// metacopy is a metadata-only file of size bytes whose data is at the
// data layer's path target.
func metacopy(p string, size int64, target string) erofs.Entry {
	e := file(p)
	e.Size = size
	e.Xattrs = []erofs.Xattr{{Name: "trusted.overlay.metacopy", Value: []byte{}}, {Name: "trusted.overlay.redirect", Value: []byte(target)}}
	return e
}

// TestOverlayDataConsumer: the metadata layer over an overlay-data layer
// redirects its metacopy files to files of that layer, absolute paths of
// their size (§2.4, §3.8 rule 3); a data layer above its metadata layer
// has no consumer.
func TestOverlayDataConsumer(t *testing.T) {
	payload := file("ab/abc")
	payload.Size = 5
	data := rawLayer(fsImage(t, dir("ab"), payload), AnnotationRole, RoleOverlayData)
	meta := func(e erofs.Entry) lay { return rawLayer(fsImage(t, dir("etc"), e, file("etc/empty"))) }
	for _, tc := range []struct {
		name   string
		layers []lay
		want   []string
	}{
		{"consumed", []lay{data, meta(metacopy("etc/f", 5, "/ab/abc"))}, nil},
		{"redirect to nothing", []lay{data, meta(metacopy("etc/f", 5, "/ab/abd"))},
			[]string{"§2.4: layer 1: metacopy file /etc/f: redirect /ab/abd is no file of the overlay-data layers below it"}},
		{"relative redirect", []lay{data, meta(metacopy("etc/f", 5, "ab/abc"))},
			[]string{`§2.4: layer 1: metacopy file /etc/f: redirect "ab/abc" is no absolute path`}},
		{"other size", []lay{data, meta(metacopy("etc/f", 6, "/ab/abc"))},
			[]string{"§2.4: layer 1: metacopy file /etc/f: 6 bytes, its data /ab/abc 5 (SHOULD)"}},
		{"data layer above its metadata layer", []lay{meta(metacopy("etc/f", 5, "/ab/abc")), data},
			[]string{"§2.4: layer 1: an overlay-data layer that no EROFS metadata layer above it consumes",
				"§3.8: layer 1: last layer has role overlay-data"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			expect(t, check(t, makeImage(t, nil, tc.layers...)), tc.want...)
		})
	}
}

func TestSection3_2(t *testing.T) {
	expect(t, check(t, makeImage(t, nil, rawLayer([]byte("not an image")))),
		"§3.2: layer 0: not an EROFS image")
}

func TestSection3_4(t *testing.T) {
	fs := fsImage(t, file("a"))
	sum := sha256.Sum256(fs)
	good := &chunkindex.Index{Compression: chunkindex.None, UncompressedSize: uint64(len(fs)), HashAlgo: chunkindex.HashSHA2, HashSize: 32,
		BlockOffsets: []uint64{0}, UncompressedOffsets: []uint64{0}, Checksums: sum[:]}
	payload, err := good.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	idx := lay{mt: MediaTypeChunkIndex, data: payload}
	t.Run("standalone", func(t *testing.T) {
		idx := idx
		idx.ann = annots(AnnotationChunkTarget, sha(fs).String())
		expect(t, check(t, makeImage(t, nil, rawLayer(fs, AnnotationRole, RoleOverlayData), idx, rawLayer(fs))))
	})
	t.Run("target", func(t *testing.T) {
		idx := idx
		idx.ann = annots(AnnotationChunkTarget, sha([]byte("other")).String())
		expect(t, check(t, makeImage(t, nil, rawLayer(fs, AnnotationRole, RoleOverlayData), idx, rawLayer(fs))),
			"§3.4: layer 0: standalone chunk index "+sha(payload).String()+": chunk index",
			"§3.4.3: layer 1: org.erofs.chunk-index.target "+sha([]byte("other")).String()+" is not the layer below it")
	})
	t.Run("no target", func(t *testing.T) {
		expect(t, check(t, makeImage(t, nil, rawLayer(fs, AnnotationRole, RoleOverlayData), idx, rawLayer(fs))),
			"§3.4.3: layer 1: a standalone chunk index without org.erofs.chunk-index.target (SHOULD)")
	})
	t.Run("checksum", func(t *testing.T) {
		blob, ann := withChunkIndex(t, fs, func(x *chunkindex.Index) { x.Checksums = make([]byte, 32) })
		expect(t, check(t, makeImage(t, nil, rawLayer(blob, ann...))), "§3.4: layer 0: chunk index")
	})
	t.Run("uncompressed size", func(t *testing.T) {
		blob, ann := withChunkIndex(t, fs, func(x *chunkindex.Index) { x.UncompressedSize-- })
		expect(t, check(t, makeImage(t, nil, rawLayer(blob, ann...))), "§3.4: layer 0: ")
	})
	t.Run("digest", func(t *testing.T) {
		blob, ann := withChunkIndex(t, fs, nil)
		ann[3] = sha([]byte("another index")).String()
		expect(t, check(t, makeImage(t, nil, rawLayer(blob, ann...))), "§3.4: layer 0: embedded chunk index: ")
	})
	t.Run("no checksums", func(t *testing.T) {
		blob, ann := withChunkIndex(t, fs, func(x *chunkindex.Index) { x.HashAlgo, x.HashSize, x.Checksums = chunkindex.HashNone, 0, nil })
		expect(t, check(t, makeImage(t, nil, rawLayer(blob, ann...))), "§3.4.5: layer 0: a chunk index without per-chunk checksums (SHOULD)")
	})
}

func TestSection3_5(t *testing.T) {
	fs := fsImage(t, file("a"))
	blob, off, root := withVerity(t, fs)
	other := "sha256:" + strings.Repeat("ab", 32)
	expect(t, check(t, makeImage(t, nil, rawLayer(blob, AnnotationHashOffset, off, AnnotationRootDigest, root))))
	expect(t, check(t, makeImage(t, nil, rawLayer(blob, AnnotationHashOffset, off, AnnotationRootDigest, other))),
		"§3.5: layer 0: dm-verity: the tree's root hash is")
	expect(t, check(t, makeImage(t, nil, rawLayer(blob, AnnotationHashOffset, "0", AnnotationRootDigest, root))),
		"§3.5: layer 0: hash_offset 0 is inside the EROFS image")
	expect(t, check(t, makeImage(t, nil, rawLayer(fs, AnnotationHashOffset, off, AnnotationRootDigest, root))),
		"§3.5: layer 0: hash_offset "+off+" is past the image data's")
	// A tree of other parameters (a salt of its own) is not verified.
	salted := slices.Clone(blob)
	o, _ := strconv.Atoi(off)
	salted[o+88] ^= 1
	expect(t, check(t, makeImage(t, nil, rawLayer(salted, AnnotationHashOffset, off, AnnotationRootDigest, root))))
	// The tree of a +zstd layer is in its image data.
	expect(t, check(t, makeImage(t, nil, zstdLayer(t, blob, AnnotationHashOffset, off, AnnotationRootDigest, other))),
		"§3.5: layer 0: dm-verity: the tree's root hash is")
}

func TestSection3_6(t *testing.T) {
	base := fsImage(t, dir("etc"), file("etc/a"))
	wh := fsImage(t, whiteoutAt("etc"))
	t.Run("bottom layer has whiteouts", func(t *testing.T) {
		expect(t, check(t, makeImage(t, nil, rawLayer(wh))),
			"§3.6: layer 0: whiteout /etc with no overlay-lower layer below")
	})
	t.Run("no overlay-lower below", func(t *testing.T) {
		expect(t, check(t, makeImage(t, nil, rawLayer(base), rawLayer(wh))),
			"§3.6: layer 1: whiteout /etc with no overlay-lower layer below")
	})
	t.Run("bottom opaque", func(t *testing.T) {
		expect(t, check(t, makeImage(t, nil, zstdLayer(t, fsImage(t, opaqueDir("usr"))))),
			"§3.6: layer 0: opaque directory /usr with no overlay-lower layer below (SHOULD)")
	})
	t.Run(".wh. name", func(t *testing.T) {
		named := fsImage(t, dir("etc"), file("etc/.wh.a"))
		expect(t, check(t, makeImage(t, nil, rawLayer(base, AnnotationRole, RoleOverlayLower), rawLayer(base), zstdLayer(t, named))),
			"§3.6: layer 2: .wh. name /etc/.wh.a")
	})
	t.Run("device layer's whiteouts ignored", func(t *testing.T) {
		expect(t, check(t, makeImage(t, nil, rawLayer(wh, AnnotationRole, RoleDevice), rawLayer(base))))
	})
}

func TestSection3_8(t *testing.T) {
	fs := fsImage(t, file("a"))
	sum := sha256.Sum256(fs)
	payload, err := (&chunkindex.Index{UncompressedSize: uint64(len(fs)), HashAlgo: chunkindex.HashSHA2, HashSize: 32,
		BlockOffsets: []uint64{0}, UncompressedOffsets: []uint64{0}, Checksums: sum[:]}).MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	idx := lay{mt: MediaTypeChunkIndex, data: payload}
	t.Run("last", func(t *testing.T) {
		idx := idx
		idx.ann = annots(AnnotationChunkTarget, sha(fs).String())
		expect(t, check(t, makeImage(t, nil, rawLayer(fs), idx)),
			"§3.8: layer 1: last layer is a chunk index")
	})
	t.Run("first", func(t *testing.T) {
		expect(t, check(t, makeImage(t, nil, idx, rawLayer(fs))),
			"§3.8: layer 0: first layer is a chunk index")
	})
	t.Run("none", func(t *testing.T) {
		expect(t, check(t, makeImage(t, nil)), "§3.8: no layers")
	})
}

func TestSection4(t *testing.T) {
	fs := fsImage(t, file("a"))
	containerd := rawLayer(fs)
	containerd.mt = "application/vnd.erofs.layer.v1"
	expect(t, check(t, makeImage(t, nil, containerd)),
		"§3.8: layer 0: last layer is application/vnd.erofs.layer.v1",
		"§4: layer 0: media type application/vnd.erofs.layer.v1 is none of")
	expect(t, check(t, makeImage(t, nil, lay{mt: types.OCILayer, data: []byte("tar")}, rawLayer(fs))),
		"§4: layer 0: media type application/vnd.oci.image.layer.v1.tar+gzip is none of",
		"§4: EROFS and tar layers in one manifest (SHOULD)")
}

func TestSection5(t *testing.T) {
	fs := fsImage(t, file("a"))
	other := "sha256:" + strings.Repeat("cd", 32)
	t.Run("rootfs.type", func(t *testing.T) {
		expect(t, check(t, makeImage(t, func(c map[string]any) {
			c["rootfs"].(map[string]any)["type"] = "erofs"
		}, rawLayer(fs))), `§5.1: config: rootfs.type "erofs", not "layers"`)
	})
	t.Run("no diff_ids and no annotation", func(t *testing.T) {
		expect(t, check(t, makeImage(t, func(c map[string]any) { delete(c, "rootfs") }, zstdLayer(t, fs, AnnotationUncompressed, "-"))),
			"§5.2: layer 0: +zstd layer without org.erofs.uncompressed-digest (SHOULD)",
			"§5.2: config: no rootfs.diff_ids, and layer 0 has no org.erofs.uncompressed-digest")
	})
	t.Run("diff_ids count", func(t *testing.T) {
		expect(t, check(t, makeImage(t, func(c map[string]any) {
			c["rootfs"].(map[string]any)["diff_ids"] = []string{}
		}, rawLayer(fs))), "§5.2: config: 0 rootfs.diff_ids for 1 layers")
	})
	t.Run("wrong uncompressed digest", func(t *testing.T) {
		expect(t, check(t, makeImage(t, nil, zstdLayer(t, fs, AnnotationUncompressed, other))),
			"§5.2: layer 0: org.erofs.uncompressed-digest "+other+", but the layer's uncompressed data is "+sha(fs).String())
	})
	t.Run("wrong diff_id", func(t *testing.T) {
		expect(t, check(t, makeImage(t, func(c map[string]any) {
			c["rootfs"].(map[string]any)["diff_ids"] = []string{other}
		}, zstdLayer(t, fs))), "§5.2: layer 0: rootfs.diff_ids has "+other)
	})
	t.Run("os.features", func(t *testing.T) {
		expect(t, check(t, makeImage(t, func(c map[string]any) { delete(c, "os.features") }, rawLayer(fs))),
			"§5.4: config: config os.features lacks erofs")
	})
}

func TestSection6(t *testing.T) {
	fs := fsImage(t, file("a"))
	img := makeImage(t, nil, rawLayer(fs))
	tarImg := makeImage(t, func(c map[string]any) { delete(c, "os.features") }, lay{mt: types.OCILayer, data: []byte("tar")})
	amd := func(feats ...string) *v1.Platform {
		return &v1.Platform{OS: "linux", Architecture: "amd64", OSFeatures: feats}
	}
	run := func(adds ...mutate.IndexAddendum) []string {
		t.Helper()
		idx := mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.OCIImageIndex), adds...)
		vs, err := CheckIndex(context.Background(), idx, Options{Contents: true, TempDir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, v := range vs {
			out = append(out, v.String())
		}
		return out
	}
	entry := func(img v1.Image, p *v1.Platform) mutate.IndexAddendum {
		return mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: p}}
	}
	expect(t, run(entry(tarImg, amd()), entry(img, amd("erofs"))))
	expect(t, run(entry(img, amd())), "§6: index entry 0: platform os.features lacks erofs")
	expect(t, run(entry(img, amd("erofs")), entry(tarImg, amd())),
		"§6: index entry 0: an EROFS image listed before index entry 1, the tar image of its platform (SHOULD)")
	// An image's own violations carry the entry.
	bad := makeImage(t, func(c map[string]any) { delete(c, "os.features") }, rawLayer(fs))
	got := run(entry(bad, amd("erofs")))
	if !slices.Contains(got, "§5.4: index entry 0: config: config os.features lacks erofs") {
		t.Errorf("violations %q: want the config's, named by entry", got)
	}
}
