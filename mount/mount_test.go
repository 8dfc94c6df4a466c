package mount_test

import (
	"archive/tar"
	"bytes"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ocierofs/ocierofs/convert"
	"github.com/ocierofs/ocierofs/convert/fstree"
	"github.com/ocierofs/ocierofs/convert/overlaydata"
	"github.com/ocierofs/ocierofs/erofs"
	"github.com/ocierofs/ocierofs/mount"
)

// requireFUSE skips where this process cannot mount FUSE or EROFS.
func requireFUSE(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting needs root")
	}
	if err := mount.Available(); err != nil {
		t.Skip(err)
	}
}

type tarEntry struct {
	hdr  tar.Header
	data []byte
}

func tarOf(t *testing.T, ents []tarEntry) []byte {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range ents {
		h := e.hdr
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(e.data))
		}
		if h.ModTime.IsZero() {
			h.ModTime = time.Unix(1700000000, 0)
		}
		h.Format = tar.FormatPAX
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		tw.Write(e.data)
	}
	tw.Close()
	return buf.Bytes()
}

// testLayers writes two layer images: a bottom one with every file type,
// and a top one that removes a file, makes a directory opaque and changes
// a file.
func testLayers(t *testing.T) []string {
	big := make([]byte, 3<<20+123)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range big {
		big[i] = byte(r.Uint32())
	}
	layers := [][]tarEntry{{
		{hdr: tar.Header{Name: "etc/", Typeflag: tar.TypeDir, Mode: 0o755}},
		{hdr: tar.Header{Name: "etc/passwd", Typeflag: tar.TypeReg, Mode: 0o644, PAXRecords: map[string]string{"SCHILY.xattr.user.note": "hello"}}, data: []byte("root:x:0:0::/root:/bin/sh\n")},
		{hdr: tar.Header{Name: "etc/shadow", Typeflag: tar.TypeReg, Mode: 0o640, Uid: 0, Gid: 42, PAXRecords: map[string]string{"SCHILY.xattr.user.note": "shh"}}, data: []byte("secret\n")},
		{hdr: tar.Header{Name: "bin/", Typeflag: tar.TypeDir, Mode: 0o755}},
		{hdr: tar.Header{Name: "bin/sh", Typeflag: tar.TypeReg, Mode: 0o4755}, data: []byte("#!shell\n")},
		{hdr: tar.Header{Name: "bin/ls", Typeflag: tar.TypeSymlink, Linkname: "sh"}},
		{hdr: tar.Header{Name: "bin/link", Typeflag: tar.TypeLink, Linkname: "bin/sh"}},
		{hdr: tar.Header{Name: "dev/", Typeflag: tar.TypeDir, Mode: 0o755}},
		{hdr: tar.Header{Name: "dev/null", Typeflag: tar.TypeChar, Mode: 0o666, Devmajor: 1, Devminor: 3}},
		{hdr: tar.Header{Name: "dev/fifo", Typeflag: tar.TypeFifo, Mode: 0o600}},
		{hdr: tar.Header{Name: "opt/old/a", Typeflag: tar.TypeReg, Mode: 0o600, Uid: 1000, Gid: 1000}, data: []byte("a")},
		{hdr: tar.Header{Name: "rm-me", Typeflag: tar.TypeReg, Mode: 0o644}, data: []byte("gone")},
		{hdr: tar.Header{Name: "empty", Typeflag: tar.TypeReg, Mode: 0}},
	}, {
		{hdr: tar.Header{Name: ".wh.rm-me", Typeflag: tar.TypeReg}},
		{hdr: tar.Header{Name: "opt/old/.wh..wh..opq", Typeflag: tar.TypeReg}},
		{hdr: tar.Header{Name: "opt/old/b", Typeflag: tar.TypeReg, Mode: 0o644}, data: []byte("b")},
		{hdr: tar.Header{Name: "etc/passwd", Typeflag: tar.TypeReg, Mode: 0o644}, data: []byte("root:x:0:0::/root:/bin/bash\n")},
		{hdr: tar.Header{Name: "usr/lib/big", Typeflag: tar.TypeReg, Mode: 0o644}, data: big},
	}}
	dir := t.TempDir()
	var files []string
	for i, ents := range layers {
		p := filepath.Join(dir, "layer"+string(rune('0'+i))+".erofs")
		f, err := os.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := convert.BuildTar(f, bytes.NewReader(tarOf(t, ents)), convert.Options{}); err != nil {
			t.Fatal(err)
		}
		f.Close()
		files = append(files, p)
	}
	return files
}

// kernelMount mounts the EROFS image file with the kernel, read-only,
// until the test ends, and returns where; the test is skipped where the
// machine cannot mount EROFS.
func kernelMount(t *testing.T, file string) string {
	d := t.TempDir()
	if out, err := exec.Command("mount", "-t", "erofs", "-o", "loop,ro", file, d).CombinedOutput(); err != nil {
		t.Skipf("cannot mount EROFS: %v: %s", err, out)
	}
	t.Cleanup(func() { unix.Unmount(d, 0) })
	return d
}

// kernelStack mounts the layer images as EROFS and stacks them with
// overlayfs, as containerd's snapshotter does: the reference tree.
func kernelStack(t *testing.T, files []string) string {
	var lowers []string
	for _, f := range files {
		lowers = append([]string{kernelMount(t, f)}, lowers...)
	}
	merged := t.TempDir()
	if out, err := exec.Command("mount", "-t", "overlay", "overlay", "-o", "lowerdir="+strings.Join(lowers, ":"), merged).CombinedOutput(); err != nil {
		t.Fatalf("mount overlay: %v: %s", err, out)
	}
	t.Cleanup(func() { unix.Unmount(merged, 0) })
	return merged
}

func openImages(t *testing.T, files []string) []mount.Layer {
	var layers []mount.Layer
	for _, p := range files {
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		fi, _ := f.Stat()
		img, err := erofs.Open(f, fi.Size())
		if err != nil {
			t.Fatal(err)
		}
		layers = append(layers, mount.Layer{Image: img, Name: filepath.Base(p)})
	}
	return layers
}

// TestStackMatchesKernel: the FUSE layers stacked by overlayfs show the
// tree the kernel's EROFS mounts stacked by overlayfs show: types, modes,
// owners, times, contents, link targets, devices, xattrs, hard links.
func TestStackMatchesKernel(t *testing.T) {
	requireFUSE(t)
	files := testLayers(t)
	want, err := fstree.FromDir(kernelStack(t, files))
	if err != nil {
		t.Fatal(err)
	}
	target := t.TempDir()
	var logs []string
	m, err := mount.Stack(target, t.TempDir(), openImages(t, files), mount.Options{Log: func(s string) { logs = append(logs, s) }})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Unmount()
	got, err := fstree.FromDir(target)
	if err != nil {
		t.Fatal(err)
	}
	diffs := fstree.Diff(want, got, fstree.DiffOptions{Want: "kernel EROFS", Got: "FUSE"})
	for _, d := range diffs {
		t.Error(d)
	}
	for _, p := range []string{"rm-me", "opt/old/a"} {
		if got.Node(p) != nil {
			t.Errorf("%s: removed by the top layer, but the mount shows it", p)
		}
	}
	if n := got.Node("usr/lib/big"); n == nil || n.Size != 3<<20+123 {
		t.Errorf("usr/lib/big: %+v", n)
	}
	if n := got.Node("etc/shadow"); n == nil || n.Xattrs["user.note"] != "shh" || n.Gid != 42 {
		t.Errorf("etc/shadow: %+v", n)
	}
	if n := got.Node("dev/null"); n == nil || n.Devmajor != 1 || n.Devminor != 3 {
		t.Errorf("dev/null: %+v", n)
	}
	if g := got.LinkGroups(); len(g) != 1 || len(g[0]) != 2 {
		t.Errorf("hard links: %v, want [bin/link bin/sh]", g)
	}
	if len(logs) > 0 {
		t.Errorf("errors logged: %q", logs)
	}
	if err := m.Unmount(); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.ReadDir(target); err != nil || len(fi) != 0 {
		t.Fatalf("after Unmount the target holds %d entries (%v)", len(fi), err)
	}
}

// stackLike stacks layers with mount.Stack until the test ends, and
// reports each difference of its tree from want (the kernel's); it
// returns the mount point. got names the stack in the differences.
func stackLike(t *testing.T, want *fstree.Tree, layers []mount.Layer, got string) string {
	t.Helper()
	target := t.TempDir()
	m, err := mount.Stack(target, t.TempDir(), layers, mount.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Unmount() })
	tree, err := fstree.FromDir(target)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range fstree.Diff(want, tree, fstree.DiffOptions{Want: "kernel EROFS", Got: got}) {
		t.Error(d)
	}
	return target
}

// TestStackOneLayer: one layer is bound to the target.
func TestStackOneLayer(t *testing.T) {
	requireFUSE(t)
	files := testLayers(t)[:1]
	want, err := fstree.FromDir(kernelMount(t, files[0]))
	if err != nil {
		t.Fatal(err)
	}
	target := stackLike(t, want, openImages(t, files), "FUSE")
	b, err := os.ReadFile(filepath.Join(target, "etc/passwd"))
	if err != nil || string(b) != "root:x:0:0::/root:/bin/sh\n" {
		t.Fatalf("etc/passwd: %q, %v", b, err)
	}
	if err := os.WriteFile(filepath.Join(target, "new"), nil, 0o644); err == nil {
		t.Fatal("wrote to a read-only mount")
	}
}

// TestStackOverlayData: the two layers of the EROFS image spec's
// overlay-data form (overlaydata.Split of a layer image), the data layer
// data-only, show the tree of the image they were split from, each
// file's content read from the data layer through its redirect; the data
// layer's own tree does not show.
func TestStackOverlayData(t *testing.T) {
	requireFUSE(t)
	src := testLayers(t)[0]
	want, err := fstree.FromDir(kernelMount(t, src))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	meta, data := filepath.Join(dir, "meta.erofs"), filepath.Join(dir, "data.erofs")
	if _, err := overlaydata.Split(src, meta, data, erofs.Options{}); err != nil {
		t.Fatal(err)
	}
	layers := openImages(t, []string{meta, data})
	layers[1].DataOnly = true
	target := stackLike(t, want, layers, "FUSE overlay-data")
	if b, err := os.ReadFile(filepath.Join(target, "etc/passwd")); err != nil || string(b) != "root:x:0:0::/root:/bin/sh\n" {
		t.Errorf("etc/passwd: %q, %v", b, err)
	}
}
