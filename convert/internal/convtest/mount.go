package convtest

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/klauspost/compress/zstd"

	"github.com/ocierofs/ocierofs/convert/fstree"
	"github.com/ocierofs/ocierofs/convert/internal/roundtrip"
)

// Reading converted images back, mounting them, comparing with umoci.

// RawLayers writes the raw EROFS image of every layer of img into dir
// (decompressing +zstd) and checks that its sha256 is the config's diff_id.
func RawLayers(t testing.TB, img v1.Image, dir string) []string {
	t.Helper()
	m, err := img.Manifest()
	must(t, err)
	cf, err := img.ConfigFile()
	must(t, err)
	if len(cf.RootFS.DiffIDs) != len(m.Layers) {
		t.Fatalf("%d layers but %d diff_ids", len(m.Layers), len(cf.RootFS.DiffIDs))
	}
	var files []string
	for i, d := range m.Layers {
		l, err := img.LayerByDigest(d.Digest)
		must(t, err)
		rc, err := l.Compressed()
		must(t, err)
		blob, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			t.Fatalf("layer %d %s: download: %v", i, d.Digest, err)
		}
		if got := SHA256(blob); got != d.Digest {
			t.Fatalf("layer %d: blob hashes to %s, descriptor says %s", i, got, d.Digest)
		}
		raw := blob
		if strings.HasSuffix(string(d.MediaType), "+zstd") {
			zr, err := zstd.NewReader(bytes.NewReader(blob))
			must(t, err)
			raw, err = io.ReadAll(zr)
			zr.Close()
			if err != nil {
				t.Fatalf("layer %d %s: zstd: %v", i, d.Digest, err)
			}
		}
		if got := SHA256(raw); got != cf.RootFS.DiffIDs[i] {
			t.Errorf("layer %d %s: diff_id %s, but the raw EROFS image hashes to %s", i, d.Digest, cf.RootFS.DiffIDs[i], got)
		}
		f := filepath.Join(dir, fmt.Sprintf("layer%d.erofs", i))
		must(t, os.WriteFile(f, raw, 0o644))
		files = append(files, f)
	}
	return files
}

// MountStack mounts every layer image (mount -t erofs -o loop,ro) and
// stacks them with overlayfs, the first image at the bottom, as containerd's
// EROFS snapshotter does. It returns the merged directory.
func MountStack(t testing.TB, layers []string) string {
	t.Helper()
	roundtrip.RequireMount(t)
	if len(layers) > 1 && !HasFilesystem("overlay") {
		exec.Command("modprobe", "overlay").Run()
		if !HasFilesystem("overlay") {
			t.Skip("cannot stack layers: no overlay in /proc/filesystems, even after modprobe overlay")
		}
	}
	var mnts []string
	for _, l := range layers {
		mnts = append(mnts, roundtrip.Mount(t, l))
	}
	if len(mnts) == 1 {
		return mnts[0] // overlayfs wants two lower directories without an upper one
	}
	lower := make([]string, len(mnts))
	for i, m := range mnts {
		lower[len(mnts)-1-i] = m // lowerdir=TOP:…:BOTTOM
	}
	merged := t.TempDir()
	opts := "lowerdir=" + strings.Join(lower, ":")
	if out, err := exec.Command("mount", "-t", "overlay", "overlay", "-o", opts, merged).CombinedOutput(); err != nil {
		t.Fatalf("mount -t overlay overlay -o %s %s: %v: %s", opts, merged, err, bytes.TrimSpace(out))
	}
	t.Cleanup(func() { roundtrip.Unmount(t, merged) })
	return merged
}

// MountOverlayData mounts the metadata layer meta and the data layer data
// of the EROFS image spec's overlay-data form, each as EROFS, and
// overlayfs over them with data as a data-only lower layer (Linux 6.5+),
// as a runtime does. It returns the merged directory.
func MountOverlayData(t testing.TB, meta, data string) string {
	t.Helper()
	roundtrip.RequireMount(t)
	if !HasFilesystem("overlay") {
		exec.Command("modprobe", "overlay").Run()
	}
	m, d := roundtrip.Mount(t, meta), roundtrip.Mount(t, data)
	merged := t.TempDir()
	opts := "ro,metacopy=on,redirect_dir=follow,lowerdir=" + m + "::" + d
	if out, err := exec.Command("mount", "-t", "overlay", "overlay", "-o", opts, merged).CombinedOutput(); err != nil {
		t.Fatalf("mount -t overlay overlay -o %s %s: %v: %s\nkernel log:\n%s", opts, merged, err, bytes.TrimSpace(out), roundtrip.KernelLog())
	}
	t.Cleanup(func() { roundtrip.Unmount(t, merged) })
	return merged
}

// HasFilesystem reports whether the kernel lists fs in /proc/filesystems.
func HasFilesystem(fs string) bool {
	b, err := os.ReadFile("/proc/filesystems")
	if err != nil {
		return false
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 0 && f[len(f)-1] == fs {
			return true
		}
	}
	return false
}

// UmociRootfs unpacks img with umoci (as root) and returns the rootfs.
func UmociRootfs(t testing.TB, img v1.Image) string {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: no umoci; make test runs it")
	}
	bin, err := exec.LookPath("umoci")
	if err != nil {
		t.Skip("no umoci (Debian package umoci)")
	}
	dir := t.TempDir()
	p, err := layout.Write(filepath.Join(dir, "layout"), empty.Index)
	must(t, err)
	must(t, p.AppendImage(img, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": "src"})))
	bundle := filepath.Join(dir, "bundle")
	out, err := exec.Command(bin, "unpack", "--image", filepath.Join(dir, "layout")+":src", bundle).CombinedOutput()
	if err != nil {
		t.Fatalf("umoci unpack: %v: %s", err, bytes.TrimSpace(out))
	}
	return filepath.Join(bundle, "rootfs")
}

// CompareWithUmoci mounts the converted layers, stacks them and compares
// the merged tree with umoci's unpacking of the source image.
func CompareWithUmoci(t testing.TB, src v1.Image, layers []string) (want, got *fstree.Tree) {
	t.Helper()
	merged := MountStack(t, layers)
	want = TreeFromDir(t, UmociRootfs(t, src))
	got = TreeFromDir(t, merged)
	diffs := fstree.Diff(want, got, fstree.DiffOptions{
		Ignore: func(p, field string) bool {
			// overlayfs hides its own trusted.overlay.* xattrs (opaque,
			// origin) from listxattr; umoci, rootless, records owners in
			// user.rootlesscontainers. Neither is the image's content.
			// Everything else fstree compares (type, mode, uid, gid,
			// mtime, size, content, symlink targets, device numbers,
			// other xattrs, hard-link groups) must be the same, the root
			// directory included: its metadata comes from the top layer,
			// which takes it from the layers below. fstree does not
			// compare st_nlink, st_ino or st_dev, which overlayfs reports
			// differently from a plain directory tree.
			return strings.HasPrefix(field, "xattr:trusted.overlay.") || field == "xattr:user.rootlesscontainers"
		},
	})
	ReportDiff(t, "merged overlay vs umoci unpack", diffs)
	t.Logf("merged overlay of %d layers vs umoci unpack: %d paths, %d hard-link groups, %d differences",
		len(layers), got.Len(), len(got.LinkGroups()), len(diffs))
	if want.Len() < 2 {
		t.Errorf("umoci unpacked %d paths: nothing compared", want.Len())
	}
	return want, got
}

// SourceDescriptor is the descriptor of an image (as pushed).
func SourceDescriptor(t testing.TB, img v1.Image) v1.Descriptor {
	t.Helper()
	dg, err := img.Digest()
	must(t, err)
	sz, err := img.Size()
	must(t, err)
	mt, err := img.MediaType()
	must(t, err)
	return v1.Descriptor{MediaType: mt, Digest: dg, Size: sz}
}
