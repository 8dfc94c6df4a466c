package convtest

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Test layers and images, built entry by entry (PAX tars, gzipped), with
// the config the conversion must keep.

// MTime is the default mtime of the test images' entries.
var MTime = time.Date(2023, 5, 6, 7, 8, 9, 0, time.UTC)

// Entry is one tar entry of a test layer.
type Entry struct {
	Hdr  tar.Header
	Data []byte
}

// Dir is a directory entry.
func Dir(name string, mode int64) Entry {
	return Entry{Hdr: tar.Header{Typeflag: tar.TypeDir, Name: strings.TrimSuffix(name, "/") + "/", Mode: mode}}
}

// File is a regular file holding data.
func File(name string, mode int64, data []byte) Entry {
	return Entry{Hdr: tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(data))}, Data: data}
}

// Symlink is a symbolic link to target.
func Symlink(name, target string) Entry {
	return Entry{Hdr: tar.Header{Typeflag: tar.TypeSymlink, Name: name, Linkname: target, Mode: 0o777}}
}

// Hardlink is a hard link to target.
func Hardlink(name, target string) Entry {
	return Entry{Hdr: tar.Header{Typeflag: tar.TypeLink, Name: name, Linkname: target}}
}

// Node is a device or fifo of tar type typ.
func Node(name string, typ byte, mode, major, minor int64) Entry {
	return Entry{Hdr: tar.Header{Typeflag: typ, Name: name, Mode: mode, Devmajor: major, Devminor: minor}}
}

// Whiteout deletes name (a file or a directory) from the layers below.
func Whiteout(name string) Entry {
	dir, base := filepath.Split(name)
	return File(dir+".wh."+base, 0o644, nil)
}

// Opaque hides what the layers below have in dir.
func Opaque(dir string) Entry { return File(dir+"/.wh..wh..opq", 0o644, nil) }

// Own sets the entry's owner.
func (e Entry) Own(uid, gid int) Entry { e.Hdr.Uid, e.Hdr.Gid = uid, gid; return e }

// Mode sets the entry's mode bits, as a tar writer may give a hard
// link's header.
func (e Entry) Mode(mode int64) Entry { e.Hdr.Mode = mode; return e }

// At sets the entry's mtime.
func (e Entry) At(tm time.Time) Entry { e.Hdr.ModTime = tm; return e }

// Xattr adds the PAX record SCHILY.xattr.NAME.
func (e Entry) Xattr(name, value string) Entry {
	recs := map[string]string{}
	for k, v := range e.Hdr.PAXRecords {
		recs[k] = v
	}
	recs["SCHILY.xattr."+name] = value
	e.Hdr.PAXRecords = recs
	return e
}

// LayerTar writes entries into a tar (PAX, so that sub-second mtimes and
// xattrs survive).
func LayerTar(t testing.TB, entries ...Entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := e.Hdr
		if h.ModTime.IsZero() {
			h.ModTime = MTime
		}
		h.Format = tar.FormatPAX
		must(t, tw.WriteHeader(&h))
		_, err := tw.Write(e.Data)
		must(t, err)
	}
	must(t, tw.Close())
	return buf.Bytes()
}

// Gzip compresses b.
func Gzip(t testing.TB, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	_, err := zw.Write(b)
	must(t, err)
	must(t, zw.Close())
	return buf.Bytes()
}

// BlobLayer is a layer given by its Blob: what a registry serves, with the
// diffID the config claims (go-containerregistry's static layers take the
// blob for the uncompressed content, which is wrong for gzip).
type BlobLayer struct {
	Blob []byte
	Diff v1.Hash // the diffID the config claims
	Type types.MediaType
}

func (l *BlobLayer) Digest() (v1.Hash, error) {
	h, _, err := v1.SHA256(bytes.NewReader(l.Blob))
	return h, err
}
func (l *BlobLayer) DiffID() (v1.Hash, error)            { return l.Diff, nil }
func (l *BlobLayer) Size() (int64, error)                { return int64(len(l.Blob)), nil }
func (l *BlobLayer) MediaType() (types.MediaType, error) { return l.Type, nil }
func (l *BlobLayer) Compressed() (io.ReadCloser, error) {
	return io.NopCloser(bytes.NewReader(l.Blob)), nil
}
func (l *BlobLayer) Uncompressed() (io.ReadCloser, error) {
	return nil, errors.New("BlobLayer: no uncompressed form")
}

// SHA256 is the sha256 digest of b.
func SHA256(b []byte) v1.Hash {
	s := sha256.Sum256(b)
	return v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(s[:])}
}

// Layer is a tar+gzip layer of entries.
func Layer(t testing.TB, entries ...Entry) v1.Layer {
	t.Helper()
	raw := LayerTar(t, entries...)
	return &BlobLayer{Blob: Gzip(t, raw), Diff: SHA256(raw), Type: types.OCILayer}
}

// imageConfig is what the test images carry besides their layers; the
// conversion must keep all of it.
func imageConfig(cf *v1.ConfigFile, arch string) {
	cf.OS, cf.Architecture = "linux", arch
	cf.Created = v1.Time{Time: MTime}
	cf.Author = "ocierofs e2e"
	cf.Config.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "E2E=1"}
	cf.Config.Entrypoint = []string{"/bin/sh", "-c"}
	cf.Config.Cmd = []string{"echo hello"}
	cf.Config.WorkingDir = "/home/user"
	cf.Config.Labels = map[string]string{"org.example.e2e": "yes"}
	cf.History = append(cf.History, v1.History{Created: v1.Time{Time: MTime}, CreatedBy: "ENV E2E=1", EmptyLayer: true})
}

// Image stacks layers into an OCI image with one history entry per layer
// and an empty-layer entry.
func Image(t testing.TB, arch string, layers ...v1.Layer) v1.Image {
	t.Helper()
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	for i, l := range layers {
		var err error
		img, err = mutate.Append(img, mutate.Addendum{
			Layer:   l,
			History: v1.History{Created: v1.Time{Time: MTime.Add(time.Duration(i) * time.Minute)}, CreatedBy: fmt.Sprintf("e2e layer %d", i+1), Comment: "built by the test"},
		})
		must(t, err)
	}
	cf, err := img.ConfigFile()
	must(t, err)
	cf = cf.DeepCopy()
	imageConfig(cf, arch)
	img, err = mutate.ConfigFile(img, cf)
	must(t, err)
	return img
}

// CapNetRaw is a security.capability value (VFS_CAP_REVISION_2) granting
// cap_net_raw, permitted and effective.
var CapNetRaw = string([]byte{0x01, 0x00, 0x00, 0x02, 0x00, 0x20, 0x00, 0x00, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})

// RandomBytes is n deterministic pseudo-random bytes.
func RandomBytes(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// TestImageLayers are the four layers of the image the end-to-end tests
// convert:
//
//  1. a base rootfs: directories with several modes and owners, files (one
//     over several blocks), symlinks, devices, a fifo, etc/apt 0750 root
//     with an xattr, nanosecond mtimes;
//  2. whiteouts deleting a file, a symlink and a directory tree;
//  3. an opaque directory, hard links, xattrs (user.* and
//     security.capability), setuid and setgid files;
//  4. etc/apt/apt.conf with neither etc/ nor etc/apt/ in the tar: the two
//     directories must keep what the layers below say (etc/apt 0750), and
//     likewise home/user (as layer 3 changed it) and var/cache/app (made
//     opaque by layer 3).
func TestImageLayers(t testing.TB) []v1.Layer {
	t.Helper()
	tEtc := time.Date(2022, 1, 2, 3, 4, 5, 0, time.UTC)
	tApt := time.Date(2021, 6, 7, 8, 9, 10, 123456789, time.UTC)
	base := []Entry{
		Dir(".", 0o755),
		Dir("bin", 0o755),
		File("bin/sh", 0o755, []byte("#!/bin/false\n# not a shell\n")),
		File("bin/big", 0o644, RandomBytes(1, 300<<10+123)),
		Symlink("bin/ls", "sh"),
		Symlink("bin/abs", "/etc/passwd"),
		Dir("etc", 0o755).At(tEtc),
		File("etc/passwd", 0o644, []byte("root:x:0:0:root:/root:/bin/sh\nuser:x:1000:1000::/home/user:/bin/sh\n")),
		File("etc/motd", 0o644, []byte("deleted by layer 2\n")),
		File("etc/shadow", 0o640, []byte("root:*:19000:0:99999:7:::\n")).Own(0, 42),
		Dir("etc/apt", 0o750).Own(0, 0).At(tApt).Xattr("user.e2e.dir", "apt"),
		File("etc/apt/sources.list", 0o644, []byte("deb http://deb.debian.org/debian bookworm main\n")),
		Dir("dev", 0o755),
		Node("dev/null", tar.TypeChar, 0o666, 1, 3),
		Node("dev/loop9", tar.TypeBlock, 0o660, 7, 9).Own(0, 6),
		Node("dev/fifo", tar.TypeFifo, 0o600, 0, 0),
		Dir("opt", 0o755),
		Dir("opt/legacy", 0o755),
		File("opt/legacy/tool", 0o755, []byte("#!/bin/sh\necho legacy\n")),
		Dir("opt/legacy/sub", 0o700),
		File("opt/legacy/sub/deep", 0o600, []byte("deep\n")),
		File("opt/keep", 0o644, []byte("stays\n")),
		Dir("var", 0o755),
		Dir("var/cache", 0o755),
		Dir("var/cache/app", 0o700).Own(1000, 1000),
		File("var/cache/app/old.dat", 0o644, []byte("hidden by the opaque directory of layer 3\n")),
		Dir("var/cache/app/olddir", 0o755),
		File("var/cache/app/olddir/f", 0o644, []byte("hidden too\n")),
		Dir("home", 0o755),
		Dir("home/user", 0o750).Own(1000, 1000).At(MTime.Add(500 * time.Millisecond)),
		File("home/user/.profile", 0o644, []byte("export PS1='$ '\n")).Own(1000, 1000),
		Dir("tmp", 0o1777),
		Dir("root", 0o700),
	}
	whiteouts := []Entry{
		Whiteout("etc/motd"),
		Whiteout("opt/legacy"),
		Whiteout("bin/ls"),
		File("opt/added", 0o644, []byte("added by layer 2\n")).At(MTime.Add(time.Hour)),
	}
	opaque := []Entry{
		Dir("var/cache/app", 0o755).Own(1000, 1000).At(MTime.Add(2 * time.Hour)),
		Opaque("var/cache/app"),
		File("var/cache/app/new.dat", 0o644, []byte("only this survives in var/cache/app\n")),
		Dir("usr", 0o755),
		Dir("usr/local", 0o755),
		Dir("usr/local/bin", 0o755).Xattr("user.e2e.dir", "bin"),
		File("usr/local/bin/hello", 0o755, []byte("#!/bin/sh\necho hello from layer 3\n")),
		Hardlink("usr/local/bin/hello-link", "usr/local/bin/hello"),
		Hardlink("usr/local/hello-too", "usr/local/bin/hello"),
		File("usr/local/bin/suid", 0o4755, []byte("#!/bin/sh\nid\n")),
		File("usr/local/bin/sgid", 0o2755, []byte("#!/bin/sh\nid -g\n")).Own(0, 50),
		File("usr/local/bin/ping", 0o755, []byte("#!/bin/sh\necho pong\n")).
			Xattr("security.capability", CapNetRaw).
			Xattr("user.e2e.origin", "layer3"),
		File("usr/local/bin/tagged", 0o644, []byte("tag\n")).
			Xattr("user.e2e.a", "1").Xattr("user.e2e.b", strings.Repeat("v", 300)),
		// Layer 1's home/user, changed: layer 4 must take this one.
		Dir("home/user", 0o700).Own(1000, 1000).At(MTime.Add(3*time.Hour)).Xattr("user.e2e.home", "layer3"),
	}
	implied := []Entry{
		// Neither etc/ nor etc/apt/: both are implied by this entry.
		File("etc/apt/apt.conf", 0o644, []byte("APT::Install-Recommends \"false\";\n")),
		// home/user as layer 3 left it (not as layer 1 made it).
		File("home/user/.history", 0o600, []byte("ls\n")).Own(1000, 1000),
		// var/cache/app as layer 3 made it, opaque there but not here: the
		// new.dat of layer 3 must stay visible.
		File("var/cache/app/late.dat", 0o644, []byte("added by layer 4\n")),
	}
	return []v1.Layer{Layer(t, base...), Layer(t, whiteouts...), Layer(t, opaque...), Layer(t, implied...)}
}
