package convert_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/layout"
	"golang.org/x/sys/unix"

	"github.com/ocierofs/ocierofs/convert"
	"github.com/ocierofs/ocierofs/convert/internal/roundtrip"
	"github.com/ocierofs/ocierofs/oci"
)

// convertBusybox converts testdata/busybox (three layers: a rootfs, one with
// a hard link, xattrs, a setuid file and an opaque directory, one with
// whiteouts and an implied parent) into an OCI layout under dir.
func convertBusybox(t *testing.T, dir string, opt convert.ImageOptions) (*convert.ImageReport, oci.Ref) {
	t.Helper()
	ctx := context.Background()
	src, err := oci.ParseRef("oci:../testdata/busybox:latest", false)
	if err != nil {
		t.Fatal(err)
	}
	art, err := oci.Get(ctx, src, oci.Remote{})
	if err != nil {
		t.Fatal(err)
	}
	opt.TempDir = t.TempDir()
	c, err := convert.NewConverter(opt)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	img, rep, err := c.Image(ctx, art.Image, art.Descriptor)
	if err != nil {
		t.Fatal(err)
	}
	dst := oci.Ref{Kind: oci.Layout, Path: dir, Tag: "latest-erofs"}
	if err := oci.Write(ctx, dst, img, nil, oci.Remote{}); err != nil {
		t.Fatal(err)
	}
	return rep, dst
}

func TestConvertLayout(t *testing.T) {
	dir := t.TempDir()
	rep, dst := convertBusybox(t, dir, convert.ImageOptions{Jobs: 2})
	again, _ := convertBusybox(t, t.TempDir(), convert.ImageOptions{Jobs: 1})
	if rep.Digest != again.Digest {
		t.Errorf("not deterministic: %s with 2 jobs, %s with 1", rep.Digest, again.Digest)
	}
	art, err := oci.Get(context.Background(), dst, oci.Remote{})
	if err != nil {
		t.Fatal(err)
	}
	m, err := art.Image.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	cf, err := art.Image.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Layers) != 3 || len(cf.RootFS.DiffIDs) != 3 {
		t.Fatalf("%d layers, %d diff_ids, want 3", len(m.Layers), len(cf.RootFS.DiffIDs))
	}
	if !contains(cf.OSFeatures, "erofs") {
		t.Errorf("config os.features = %q, want erofs", cf.OSFeatures)
	}
	if len(cf.Config.Cmd) != 1 || cf.Config.Cmd[0] != "/bin/sh" || len(cf.History) != 3 {
		t.Errorf("config not carried over: cmd %q, %d history entries", cf.Config.Cmd, len(cf.History))
	}
	if m.Annotations[convert.AnnotationSourceManifest] == "" {
		t.Error("no source manifest annotation")
	}
	p, err := layout.FromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	var blobs []string
	for i, l := range m.Layers {
		if l.MediaType != convert.MediaTypeLayer {
			t.Errorf("layer %d: media type %s", i, l.MediaType)
		}
		if l.Annotations[convert.AnnotationSourceLayer] != rep.Layers[i].Source {
			t.Errorf("layer %d: source annotation %q, want %q", i, l.Annotations[convert.AnnotationSourceLayer], rep.Layers[i].Source)
		}
		blob, err := p.Blob(l.Digest)
		if err != nil {
			t.Fatal(err)
		}
		blob.Close()
		name := filepath.Join(dir, "blobs", "sha256", l.Digest.Hex)
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(b)
		if want := "sha256:" + hex.EncodeToString(sum[:]); cf.RootFS.DiffIDs[i].String() != want {
			t.Errorf("layer %d: diff_id %s, want sha256 of the raw EROFS %s", i, cf.RootFS.DiffIDs[i], want)
		}
		blobs = append(blobs, name)
	}
	stackAndCheck(t, blobs)
}

// stackAndCheck mounts the layers, stacks them with overlayfs as containerd
// does, and checks what every layer contributed.
func stackAndCheck(t *testing.T, blobs []string) {
	if testing.Short() {
		t.Skip(roundtrip.ShortMount)
	}
	if os.Geteuid() != 0 {
		t.Skip("mounting needs root")
	}
	if b, _ := os.ReadFile("/proc/filesystems"); !strings.Contains(string(b), "erofs") {
		exec.Command("modprobe", "erofs").Run()
		if b, _ := os.ReadFile("/proc/filesystems"); !strings.Contains(string(b), "erofs") {
			t.Skip("the kernel has no EROFS")
		}
	}
	var lowers []string
	for i, b := range blobs {
		mnt := t.TempDir()
		if out, err := exec.Command("mount", "-t", "erofs", "-o", "loop,ro", b, mnt).CombinedOutput(); err != nil {
			t.Fatalf("mount layer %d: %v: %s", i, err, out)
		}
		t.Cleanup(func() { exec.Command("umount", mnt).Run() })
		lowers = append([]string{mnt}, lowers...)
	}
	merged := t.TempDir()
	if out, err := exec.Command("mount", "-t", "overlay", "overlay", "-o", "lowerdir="+strings.Join(lowers, ":"), merged).CombinedOutput(); err != nil {
		t.Fatalf("overlay: %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", merged).Run() })
	at := func(p string) string { return filepath.Join(merged, p) }
	for _, gone := range []string{"etc/motd", "opt/legacy", "var/cache/app/old.dat"} {
		if _, err := os.Lstat(at(gone)); !os.IsNotExist(err) {
			t.Errorf("%s: want it hidden by a whiteout or an opaque dir, got %v", gone, err)
		}
	}
	for _, p := range []string{"bin/busybox", "usr/local/bin/hello", "var/cache/app/new.dat", "etc/apt/apt.conf", "etc/apt/sources.list"} {
		if _, err := os.Lstat(at(p)); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
	var st unix.Stat_t
	if err := unix.Lstat(at("etc/apt"), &st); err != nil || st.Mode&0o7777 != 0o750 {
		t.Errorf("etc/apt (implied by layer 3): mode %#o, %v; want 0750 from the layer below", st.Mode&0o7777, err)
	}
	if err := unix.Lstat(at("usr/local/bin/suid"), &st); err != nil || st.Mode&0o4000 == 0 {
		t.Errorf("setuid bit lost: %#o %v", st.Mode, err)
	}
	var a, b unix.Stat_t
	unix.Lstat(at("usr/local/bin/hello"), &a)
	unix.Lstat(at("usr/local/bin/hello-link"), &b)
	if a.Ino != b.Ino || a.Nlink != 2 {
		t.Errorf("hard link: inodes %d/%d, nlink %d", a.Ino, b.Ino, a.Nlink)
	}
	v := make([]byte, 64)
	n, err := unix.Lgetxattr(at("usr/local/bin/tagged"), "user.origin", v)
	if err != nil || string(v[:n]) != "layer2" {
		t.Errorf("xattr user.origin = %q, %v", v[:max(n, 0)], err)
	}
	if out, err := exec.Command(at("bin/busybox"), "echo", "ok").Output(); err != nil || string(out) != "ok\n" {
		t.Errorf("busybox from the stacked layers: %q %v", out, err)
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
