package main

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/klauspost/compress/zstd"

	"github.com/ocierofs/ocierofs/convert"
	"github.com/ocierofs/ocierofs/convert/fstree"
	"github.com/ocierofs/ocierofs/convert/spec"
)

// specVectorsDir holds the EROFS image spec's test vectors: a source
// image and an OCI layout of its conversion per feature.
const specVectorsDir = "../../testdata/spec"

// specVectors are the vectors and the convert flags that make each.
var specVectors = []struct {
	name string
	args []string
}{
	{"plain", []string{"--media-type", "spec"}},
	{"zstd", []string{"--media-type", "spec", "--layer-compression", "zstd"}},
	{"chunk-index-embedded", []string{"--media-type", "spec", "--chunk-index", "embedded", "--chunk-index-size", "4K"}},
	{"chunk-index-embedded-zstd", []string{"--media-type", "spec", "--layer-compression", "zstd", "--chunk-index", "embedded", "--chunk-index-size", "4K"}},
	{"chunk-index-standalone", []string{"--media-type", "spec", "--layer-compression", "zstd", "--chunk-index", "standalone", "--chunk-index-size", "4K"}},
	{"dmverity", []string{"--media-type", "spec", "--dmverity"}},
	{"device", []string{"--media-type", "spec", "--layout", "device"}},
	{"overlay-data", []string{"--media-type", "spec", "--layout", "overlay-data", "--layer-compression", "zstd", "--chunk-index", "standalone", "--chunk-index-size", "4K"}},
	{"mixed", []string{"--media-type", "spec", "--merge-platform"}},
}

// TestSpecVectors makes the spec's test vectors again (make spec-vectors:
// UPDATE_SPEC_VECTORS=1 writes them to testdata/spec) and wants the same
// bytes as those committed; then checks each: ocierofs check against the
// source (trees, chunk indexes chunk by chunk, dm-verity trees), and, as
// root, each layer mounted by the kernel (a raw blob as it is, its chunk
// index after the image) and compared with its source layer, and
// fsck.erofs where it is installed.
func TestSpecVectors(t *testing.T) {
	b := bin(t)
	out := t.TempDir()
	if os.Getenv("UPDATE_SPEC_VECTORS") != "" {
		out = specVectorsDir
		for _, v := range append(specVectors, struct {
			name string
			args []string
		}{name: "source"}) {
			if err := os.RemoveAll(filepath.Join(out, v.name)); err != nil {
				t.Fatal(err)
			}
		}
	}
	writeSpecSource(t, filepath.Join(out, "source"))
	src := "oci:" + filepath.Join(out, "source") + ":latest"
	for _, v := range specVectors {
		args := slices.Concat([]string{"convert", "-q"}, v.args, []string{src, "oci:" + filepath.Join(out, v.name) + ":latest"})
		if _, e, code := run(t, b, args...); code != 0 {
			t.Fatalf("%s: exit %d: %s", strings.Join(args, " "), code, e)
		}
	}
	if out != specVectorsDir {
		if diff := compareDirs(specVectorsDir, out); diff != "" {
			t.Errorf("the vectors made again differ from testdata/spec (make spec-vectors to make them anew): %s", diff)
		}
	}
	for _, v := range specVectors {
		t.Run(v.name, func(t *testing.T) {
			dir := filepath.Join(specVectorsDir, v.name)
			if o, e, code := run(t, b, "check", "-q", "oci:"+dir+":latest", "oci:"+filepath.Join(specVectorsDir, "source")+":latest"); code != 0 {
				t.Errorf("check: exit %d: %s%s", code, o, e)
			}
			if v.name == "mixed" {
				// Its images are checked against the source it names, and
				// against no other image.
				if _, _, code := run(t, b, "check", "-q", "oci:"+dir+":latest", "oci:"+filepath.Join(specVectorsDir, "plain")+":latest"); code != 1 {
					t.Errorf("check against another image: exit %d, want 1", code)
				}
			}
			checkVectorLayers(t, dir)
		})
	}
}

// vectorImage is the image of the layout entry d: the image itself, or,
// of a mixed index (--merge-platform), its EROFS image, after the spec's
// rules on the index (§6: the tar manifest first, "erofs" in the EROFS
// entry's os.features) are checked.
func vectorImage(t *testing.T, idx v1.ImageIndex, d v1.Descriptor) (v1.Image, error) {
	if !d.MediaType.IsIndex() {
		return idx.Image(d.Digest)
	}
	mixed, err := idx.ImageIndex(d.Digest)
	if err != nil {
		return nil, err
	}
	vs, err := spec.CheckIndex(context.Background(), mixed, spec.Options{TempDir: t.TempDir()})
	if err != nil {
		return nil, err
	}
	for _, v := range vs {
		t.Errorf("§%s %s: %s: %s", v.Section, v.Level, v.Where, v.Msg)
	}
	mm, err := mixed.IndexManifest()
	if err != nil {
		return nil, err
	}
	if n := len(mm.Manifests); n != 2 || mm.Manifests[0].Platform != nil && slices.Contains(mm.Manifests[0].Platform.OSFeatures, "erofs") {
		t.Fatalf("the mixed index: %d entries, the first %+v; want the tar image, then its EROFS twin", n, mm.Manifests[0].Platform)
	}
	return mixed.Image(mm.Manifests[1].Digest)
}

// checkVectorLayers mounts each EROFS layer of the layout at dir, compares
// it with its source layer, and runs fsck.erofs on it.
func checkVectorLayers(t *testing.T, dir string) {
	p, err := layout.FromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := p.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	im, _ := idx.IndexManifest()
	img, err := vectorImage(t, idx, im.Manifests[0])
	if err != nil {
		t.Fatal(err)
	}
	// The spec's rules on manifest, config and layers, as convert/spec
	// reads them: no MUST broken; the SHOULDs broken are logged.
	vs, err := spec.CheckImage(context.Background(), img, spec.Options{Contents: true, TempDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vs {
		if v.Level == spec.Must {
			t.Errorf("§%s %s: %s: %s", v.Section, v.Level, v.Where, v.Msg)
		} else {
			t.Logf("§%s %s: %s: %s", v.Section, v.Level, v.Where, v.Msg)
		}
	}
	m, _ := img.Manifest()
	own, stacked := sourceLayerTrees(t)
	n := 0
	var devices []string // the data of the device layers so far (§7)
	var dataLayers []string
	for _, d := range m.Layers {
		if !convert.IsEROFS(d.MediaType) {
			continue
		}
		blob := filepath.Join(dir, "blobs", d.Digest.Algorithm, d.Digest.Hex)
		data := blob
		if strings.HasSuffix(string(d.MediaType), "+zstd") {
			data = unzstdFile(t, blob)
		}
		switch {
		case d.Annotations[spec.AnnotationRole] == spec.RoleOverlayData:
			fsckErofs(t, data)
			dataLayers = append(dataLayers, data)
			continue
		case len(dataLayers) > 0:
			// The metadata layer of the overlay-data layout: the
			// source's layers stacked, its files' data read through
			// overlayfs from the data layer.
			fsckErofs(t, data)
			if got := mountOverlayDataTree(t, data, dataLayers); got != nil {
				for _, s := range fstree.Diff(stacked, got, fstree.DiffOptions{IgnoreImpliedMtime: true, IgnoreRootMeta: true, Want: "source", Got: "mounted"}) {
					t.Errorf("metadata layer: %s", s)
				}
			}
			return
		}
		if d.Annotations[spec.AnnotationRole] == spec.RoleDevice {
			devices = append(devices, data)
		} else if len(devices) > 0 {
			// The metadata layer of the device layout: the source's
			// layers stacked, read through its devices.
			fsckErofs(t, data, devices...)
			if got := mountTree(t, data, devices...); got != nil {
				for _, s := range fstree.Diff(stacked, got, fstree.DiffOptions{IgnoreImpliedMtime: true, IgnoreRootMeta: true, Want: "source", Got: "mounted"}) {
					t.Errorf("metadata layer: %s", s)
				}
			}
			devices = nil
			continue
		}
		fsckErofs(t, data)
		if got := mountTree(t, data); got != nil {
			for _, s := range fstree.Diff(own[n], got, fstree.DiffOptions{IgnoreImpliedMtime: true, IgnoreWhiteoutPerm: true, IgnoreRootMeta: true, Want: "source", Got: "mounted"}) {
				t.Errorf("layer %d: %s", n, s)
			}
		}
		n++
	}
	if n != len(own) {
		t.Errorf("%d EROFS layers, the source %d", n, len(own))
	}
}

// mountTree mounts an EROFS image and reads its tree; nil where this
// machine cannot mount.
func mountTree(t *testing.T, img string, devices ...string) *fstree.Tree {
	t.Helper()
	if testing.Short() || os.Geteuid() != 0 {
		t.Log("not mounted: -short, or not root")
		return nil
	}
	mnt := t.TempDir()
	o := "loop,ro"
	for _, d := range devices {
		out, err := exec.Command("losetup", "--find", "--show", "--read-only", d).Output()
		if err != nil {
			t.Fatalf("losetup %s: %v", d, err)
		}
		loop := string(bytes.TrimSpace(out))
		defer exec.Command("losetup", "-d", loop).Run()
		o += ",device=" + loop
	}
	if out, err := exec.Command("mount", "-t", "erofs", "-o", o, img, mnt).CombinedOutput(); err != nil {
		t.Fatalf("mount %s: %v: %s", img, err, out)
	}
	defer exec.Command("umount", mnt).Run()
	tr, err := fstree.FromDir(mnt)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// mountOverlayDataTree mounts the metadata layer meta and the data layers
// as a runtime mounts the overlay-data layout (each layer as EROFS, then
// overlayfs: lowerdir=META::DATA…, metacopy=on) and reads its tree; nil
// where this machine cannot mount.
func mountOverlayDataTree(t *testing.T, meta string, data []string) *fstree.Tree {
	t.Helper()
	if testing.Short() || os.Geteuid() != 0 {
		t.Log("not mounted: -short, or not root")
		return nil
	}
	lower := ""
	for i, img := range append([]string{meta}, data...) {
		mnt := t.TempDir()
		if out, err := exec.Command("mount", "-t", "erofs", "-o", "loop,ro", img, mnt).CombinedOutput(); err != nil {
			t.Fatalf("mount %s: %v: %s", img, err, out)
		}
		defer exec.Command("umount", mnt).Run()
		if i > 0 {
			lower += "::"
		}
		lower += mnt
	}
	merged := t.TempDir()
	opts := "ro,metacopy=on,redirect_dir=follow,lowerdir=" + lower
	if out, err := exec.Command("mount", "-t", "overlay", "overlay", "-o", opts, merged).CombinedOutput(); err != nil {
		t.Fatalf("mount -t overlay overlay -o %s %s: %v: %s", opts, merged, err, out)
	}
	defer exec.Command("umount", merged).Run()
	tr, err := fstree.FromDir(merged)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// fsckErofs runs erofs-utils' fsck.erofs on an image where installed.
func fsckErofs(t *testing.T, img string, devices ...string) {
	t.Helper()
	fsck, err := exec.LookPath("fsck.erofs")
	if err != nil {
		t.Log("no fsck.erofs")
		return
	}
	var args []string
	for _, d := range devices {
		args = append(args, "--device="+d)
	}
	if out, err := exec.Command(fsck, append(args, img)...).CombinedOutput(); err != nil {
		t.Errorf("fsck.erofs %s: %v: %s", img, err, out)
	}
}

func unzstdFile(t *testing.T, blob string) string {
	t.Helper()
	in, err := os.ReadFile(blob)
	if err != nil {
		t.Fatal(err)
	}
	zr, err := zstd.NewReader(bytes.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	defer zr.Close()
	raw, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "image.erofs")
	if err := os.WriteFile(p, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// compareDirs says how two trees of files differ, or "".
func compareDirs(a, b string) string {
	read := func(root string) map[string][]byte {
		files := map[string][]byte{}
		filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.Type().IsRegular() && d.Name() != "README.md" {
				rel, _ := filepath.Rel(root, p)
				files[rel], _ = os.ReadFile(p)
			}
			return nil
		})
		return files
	}
	fa, fb := read(a), read(b)
	var diffs []string
	for name, x := range fa {
		if y, ok := fb[name]; !ok {
			diffs = append(diffs, "not made again: "+name)
		} else if !bytes.Equal(x, y) {
			diffs = append(diffs, "other bytes: "+name)
		}
	}
	for name := range fb {
		if _, ok := fa[name]; !ok {
			diffs = append(diffs, "new: "+name)
		}
	}
	slices.Sort(diffs)
	return strings.Join(diffs, "; ")
}

// specEntry is a tar entry of the vectors' source.
type specEntry struct {
	hdr  tar.Header
	data string
}

var specMtime = time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)

// specSourceLayers are the source image's layers: the first has
// directories, files over several chunks, a symlink, a hard link and an
// xattr; the second removes a file by whiteout, makes a directory
// opaque, and adds a file.
func specSourceLayers() [][]specEntry {
	dir := func(name string, mode int64) specEntry {
		return specEntry{hdr: tar.Header{Name: name + "/", Typeflag: tar.TypeDir, Mode: mode}}
	}
	file := func(name string, mode int64, data string) specEntry {
		return specEntry{hdr: tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: mode, Size: int64(len(data))}, data: data}
	}
	text := func(lines int, seed string) string {
		var sb strings.Builder
		for i := range lines {
			fmt.Fprintf(&sb, "%s line %d: the EROFS image spec's test vector, %d\n", seed, i, i*i%997)
		}
		return sb.String()
	}
	tagged := file("etc/tagged.conf", 0o640, "tagged\n")
	tagged.hdr.PAXRecords = map[string]string{"SCHILY.xattr.user.origin": "spec-vectors"}
	return [][]specEntry{
		{
			dir("bin", 0o755), dir("etc", 0o755), dir("usr", 0o755), dir("usr/share", 0o755), dir("usr/share/doc", 0o755),
			dir("var", 0o755), dir("var/cache", 0o700),
			file("bin/tool", 0o755, "#!/bin/sh\necho tool\n"),
			file("etc/motd", 0o644, "welcome\n"),
			tagged,
			file("usr/share/doc/long.txt", 0o644, text(400, "long")),
			file("usr/share/doc/mid.txt", 0o644, text(90, "mid")),
			file("var/cache/old.dat", 0o600, text(10, "old")),
			{hdr: tar.Header{Name: "bin/tool-link", Typeflag: tar.TypeLink, Linkname: "bin/tool", Mode: 0o755}},
			{hdr: tar.Header{Name: "bin/sh", Typeflag: tar.TypeSymlink, Linkname: "tool", Mode: 0o777}},
		},
		{
			dir("etc", 0o755), dir("var", 0o755), dir("var/cache", 0o700),
			{hdr: tar.Header{Name: "etc/.wh.motd", Typeflag: tar.TypeReg, Mode: 0o644}},
			{hdr: tar.Header{Name: "var/cache/.wh..wh..opq", Typeflag: tar.TypeReg, Mode: 0o644}},
			file("var/cache/new.dat", 0o600, text(20, "new")),
			file("etc/hostname", 0o644, "spec\n"),
		},
	}
}

func specLayerTar(t testing.TB, entries []specEntry) []byte {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := e.hdr
		h.ModTime, h.Format = specMtime, tar.FormatPAX
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		io.WriteString(tw, e.data)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// writeSpecSource writes the source image, uncompressed tar layers (no
// compressor's version in its bytes), as an OCI layout tagged latest.
func writeSpecSource(t *testing.T, dir string) {
	t.Helper()
	img, err := mutate.ConfigFile(empty.Image, &v1.ConfigFile{
		Architecture: "amd64", OS: "linux", Created: v1.Time{Time: specMtime},
		Config: v1.Config{Cmd: []string{"/bin/tool"}}, RootFS: v1.RootFS{Type: "layers"},
	})
	if err != nil {
		t.Fatal(err)
	}
	img = mutate.MediaType(mutate.ConfigMediaType(img, types.OCIConfigJSON), types.OCIManifestSchema1)
	for i, entries := range specSourceLayers() {
		img, err = mutate.Append(img, mutate.Addendum{
			Layer:   static.NewLayer(specLayerTar(t, entries), types.OCIUncompressedLayer),
			History: v1.History{Created: v1.Time{Time: specMtime}, CreatedBy: fmt.Sprintf("spec test vectors: layer %d", i+1)},
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": "latest"})); err != nil {
		t.Fatal(err)
	}
}

// sourceLayerTrees is each source layer's own tree, whiteouts in
// overlayfs's form, as a converted layer holds it, and the layers
// stacked.
func sourceLayerTrees(t *testing.T) ([]*fstree.Tree, *fstree.Tree) {
	t.Helper()
	stack := fstree.NewStack(time.Time{})
	var trees []*fstree.Tree
	for i, entries := range specSourceLayers() {
		own, ownErr, err := stack.Layer(bytes.NewReader(specLayerTar(t, entries)))
		if err != nil || ownErr != nil {
			t.Fatalf("source layer %d: %v %v", i, err, ownErr)
		}
		trees = append(trees, own)
	}
	return trees, stack.Tree()
}
