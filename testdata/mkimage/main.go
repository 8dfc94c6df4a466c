// Command mkimage builds testdata/busybox: a small OCI image layout of three
// layers made from Debian's busybox-static, for `make demo` and the tests
// that need a real image without a network. Run it from the repository
// root as root (it needs apt-get download and dpkg-deb):
//
//	go run ./testdata/mkimage
//
// Layer 1 is a busybox rootfs; layer 2 adds files with a hard link, an
// xattr, a setuid file and an opaque directory; layer 3 deletes a file and
// a directory of layer 1 by whiteout and carries a file whose parent it does
// not list (so its mode must come from the layers below).
package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

var mtime = time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)

type entry struct {
	hdr  tar.Header
	data []byte
}

func dir(name string, mode int64) entry {
	return entry{hdr: tar.Header{Name: name + "/", Typeflag: tar.TypeDir, Mode: mode}}
}

func file(name string, mode int64, data string) entry {
	return entry{hdr: tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: mode, Size: int64(len(data))}, data: []byte(data)}
}

func layerTar(entries []entry) []byte {
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	tw := tar.NewWriter(zw)
	for _, e := range entries {
		h := e.hdr
		h.ModTime = mtime
		h.Format = tar.FormatPAX
		if err := tw.WriteHeader(&h); err != nil {
			log.Fatal(err)
		}
		if _, err := tw.Write(e.data); err != nil {
			log.Fatal(err)
		}
	}
	tw.Close()
	zw.Close()
	return buf.Bytes()
}

func busybox() []byte {
	tmp, err := os.MkdirTemp("", "mkimage-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(tmp)
	cmd := exec.Command("apt-get", "download", "busybox-static")
	cmd.Dir = tmp
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		log.Fatalf("apt-get download busybox-static: %v", err)
	}
	debs, _ := filepath.Glob(filepath.Join(tmp, "busybox-static_*.deb"))
	if len(debs) != 1 {
		log.Fatal("no busybox-static .deb downloaded")
	}
	if out, err := exec.Command("dpkg-deb", "-x", debs[0], filepath.Join(tmp, "x")).CombinedOutput(); err != nil {
		log.Fatalf("dpkg-deb: %v: %s", err, out)
	}
	b, err := os.ReadFile(filepath.Join(tmp, "x/bin/busybox"))
	if err != nil {
		log.Fatal(err)
	}
	return b
}

func main() {
	bb := busybox()
	applets := []string{"sh", "ls", "cat", "echo", "stat", "getfattr", "id", "find", "test", "readlink", "head", "sleep", "true"}
	sort.Strings(applets)
	base := []entry{
		dir(".", 0o755), dir("bin", 0o755),
		{hdr: tar.Header{Name: "bin/busybox", Typeflag: tar.TypeReg, Mode: 0o755, Size: int64(len(bb))}, data: bb},
	}
	for _, a := range applets {
		base = append(base, entry{hdr: tar.Header{Name: "bin/" + a, Typeflag: tar.TypeSymlink, Linkname: "busybox", Mode: 0o777}})
	}
	base = append(base,
		dir("etc", 0o755),
		file("etc/passwd", 0o644, "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n"),
		file("etc/group", 0o644, "root:x:0:\nnogroup:x:65534:\n"),
		file("etc/motd", 0o644, "deleted by layer 3\n"),
		dir("etc/apt", 0o750),
		file("etc/apt/sources.list", 0o644, "deb http://deb.debian.org/debian bookworm main\n"),
		dir("tmp", 0o1777), dir("root", 0o700),
		dir("var", 0o755), dir("var/cache", 0o755), dir("var/cache/app", 0o755),
		file("var/cache/app/old.dat", 0o644, "hidden by the opaque directory of layer 2\n"),
		dir("usr", 0o755), dir("usr/share", 0o755), dir("usr/share/doc", 0o755),
		file("usr/share/doc/README", 0o644, "busybox test image\n"),
		dir("opt", 0o755), dir("opt/legacy", 0o755),
		file("opt/legacy/tool", 0o755, "#!/bin/sh\necho legacy\n"),
	)
	layer2 := []entry{
		dir("usr/local", 0o755), dir("usr/local/bin", 0o755),
		file("usr/local/bin/hello", 0o755, "#!/bin/sh\necho hello from layer 2\n"),
		{hdr: tar.Header{Name: "usr/local/bin/hello-link", Typeflag: tar.TypeLink, Linkname: "usr/local/bin/hello"}},
		file("usr/local/bin/suid", 0o4755, "#!/bin/sh\nid\n"),
		{hdr: tar.Header{Name: "usr/local/bin/tagged", Typeflag: tar.TypeReg, Mode: 0o644, Size: 4,
			PAXRecords: map[string]string{"SCHILY.xattr.user.origin": "layer2", "SCHILY.xattr.trusted.note": "t"}}, data: []byte("tag\n")},
		dir("var/cache/app", 0o755),
		file("var/cache/app/.wh..wh..opq", 0o644, ""),
		file("var/cache/app/new.dat", 0o644, "only this survives in var/cache/app\n"),
	}
	layer3 := []entry{
		dir("etc", 0o755),
		file("etc/.wh.motd", 0o644, ""),
		file("opt/.wh.legacy", 0o644, ""),
		// etc/apt is implied: layer 3 lists its file but not the directory.
		file("etc/apt/apt.conf", 0o644, "APT::Install-Recommends \"false\";\n"),
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	for i, l := range [][]entry{base, layer2, layer3} {
		blob := layerTar(l)
		// LayerFromOpener keeps the gzip blob as it is and takes the
		// diff_id from the uncompressed tar, as the config must.
		layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
			return io.NopCloser(bytes.NewReader(blob)), nil
		}, tarball.WithMediaType(types.OCILayer))
		if err != nil {
			log.Fatal(err)
		}
		img, err = mutate.Append(img, mutate.Addendum{
			Layer:   layer,
			History: v1.History{Created: v1.Time{Time: mtime}, CreatedBy: fmt.Sprintf("mkimage layer %d", i+1)},
		})
		if err != nil {
			log.Fatal(err)
		}
	}
	cf, err := img.ConfigFile()
	if err != nil {
		log.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", "amd64"
	cf.Created = v1.Time{Time: mtime}
	cf.Config.Cmd = []string{"/bin/sh"}
	cf.Config.Env = []string{"PATH=/usr/local/bin:/bin"}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		log.Fatal(err)
	}
	out := "testdata/busybox"
	os.RemoveAll(out)
	p, err := layout.Write(out, empty.Index)
	if err != nil {
		log.Fatal(err)
	}
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": "latest"})); err != nil {
		log.Fatal(err)
	}
	fmt.Println("wrote", out)
}
