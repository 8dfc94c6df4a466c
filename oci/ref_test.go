package oci_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/klauspost/compress/zstd"
	"golang.org/x/sys/unix"

	"github.com/ocierofs/ocierofs/oci"
)

const hex64 = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func TestParseRef(t *testing.T) {
	for _, tc := range []struct {
		in   string
		kind oci.Kind
		// name is the full registry reference (Kind Registry).
		name string
		// registry, repo, tag or digest of a registry reference.
		registry, repo, id string
		path, tag          string
	}{
		{in: "alpine", kind: oci.Registry, name: "index.docker.io/library/alpine:latest", registry: "index.docker.io", repo: "library/alpine", id: "latest"},
		{in: "docker.io/library/alpine", kind: oci.Registry, name: "index.docker.io/library/alpine:latest", registry: "index.docker.io", repo: "library/alpine", id: "latest"},
		{in: "user/app:1.2", kind: oci.Registry, name: "index.docker.io/user/app:1.2", registry: "index.docker.io", repo: "user/app", id: "1.2"},
		{in: "host:5000/repo:tag", kind: oci.Registry, name: "host:5000/repo:tag", registry: "host:5000", repo: "repo", id: "tag"},
		{in: "host:5000/a/b/c", kind: oci.Registry, name: "host:5000/a/b/c:latest", registry: "host:5000", repo: "a/b/c", id: "latest"},
		{in: "repo@sha256:" + hex64, kind: oci.Registry, name: "index.docker.io/library/repo@sha256:" + hex64, registry: "index.docker.io", repo: "library/repo", id: "sha256:" + hex64},
		{in: "127.0.0.1:5000/r@sha256:" + hex64, kind: oci.Registry, name: "127.0.0.1:5000/r@sha256:" + hex64, registry: "127.0.0.1:5000", repo: "r", id: "sha256:" + hex64},
		{in: "oci:DIR", kind: oci.Layout, path: "DIR"},
		{in: "oci:DIR:TAG", kind: oci.Layout, path: "DIR", tag: "TAG"},
		{in: "oci:/abs/dir:v1.0", kind: oci.Layout, path: "/abs/dir", tag: "v1.0"},
		{in: "oci:./rel/dir", kind: oci.Layout, path: "./rel/dir"},
		// A colon in a directory name is not a tag separator.
		{in: "oci:/a:b/dir", kind: oci.Layout, path: "/a:b/dir"},
		{in: "oci:/a:b/dir:t", kind: oci.Layout, path: "/a:b/dir", tag: "t"},
		{in: "docker-archive:FILE", kind: oci.DockerArchive, path: "FILE"},
		{in: "docker-archive:/tmp/img.tar", kind: oci.DockerArchive, path: "/tmp/img.tar"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			r, err := oci.ParseRef(tc.in, false)
			if err != nil {
				t.Fatalf("ParseRef(%q): %v", tc.in, err)
			}
			if r.Kind != tc.kind {
				t.Fatalf("kind %v, want %v", r.Kind, tc.kind)
			}
			if tc.kind != oci.Registry {
				if r.Path != tc.path || r.Tag != tc.tag || r.Name != nil {
					t.Errorf("path %q tag %q name %v, want path %q tag %q", r.Path, r.Tag, r.Name, tc.path, tc.tag)
				}
				// String gives back what was parsed.
				if r.String() != tc.in {
					t.Errorf("String() = %q, want %q", r.String(), tc.in)
				}
				return
			}
			if r.Name == nil {
				t.Fatal("no name")
			}
			if got := r.Name.Name(); got != tc.name {
				t.Errorf("name %q, want %q", got, tc.name)
			}
			if got := r.Name.Context().RegistryStr(); got != tc.registry {
				t.Errorf("registry %q, want %q", got, tc.registry)
			}
			if got := r.Name.Context().RepositoryStr(); got != tc.repo {
				t.Errorf("repository %q, want %q", got, tc.repo)
			}
			if got := r.Name.Identifier(); got != tc.id {
				t.Errorf("identifier %q, want %q", got, tc.id)
			}
			if r.String() == "" {
				t.Errorf("empty String()")
			}
		})
	}
}

func TestParseRefErrors(t *testing.T) {
	for _, in := range []string{"", "oci:", "docker-archive:", "UPPER/case:tag", "repo@sha256:short", "host:5000/repo:bad tag"} {
		r, err := oci.ParseRef(in, false)
		if err == nil {
			t.Errorf("ParseRef(%q) = %+v, want an error", in, r)
			continue
		}
		if !strings.Contains(err.Error(), in) {
			t.Errorf("ParseRef(%q): error does not name the reference: %v", in, err)
		}
	}
}

func TestParseRefInsecure(t *testing.T) {
	for _, tc := range []struct {
		in       string
		insecure bool
		scheme   string
	}{
		{"registry.example.com/r:t", false, "https"},
		{"registry.example.com/r:t", true, "http"},
		{"127.0.0.1:5000/r:t", false, "http"}, // loopback is plain HTTP anyway
		{"localhost:5000/r:t", false, "http"},
	} {
		r, err := oci.ParseRef(tc.in, tc.insecure)
		if err != nil {
			t.Fatal(err)
		}
		if got := r.Name.Context().Scheme(); got != tc.scheme {
			t.Errorf("ParseRef(%q, %v): scheme %s, want %s", tc.in, tc.insecure, got, tc.scheme)
		}
	}
}

func TestDefaultTarget(t *testing.T) {
	for _, tc := range []struct {
		in, suffix, want string
		loop             bool
		fails            bool
	}{
		{in: "alpine", suffix: "-erofs", want: "index.docker.io/library/alpine:latest-erofs"},
		{in: "host:5000/repo:tag", suffix: "-erofs", want: "host:5000/repo:tag-erofs"},
		{in: "host:5000/repo", suffix: "-erofs", want: "host:5000/repo:latest-erofs"},
		{in: "host:5000/repo:tag", suffix: "_ero", want: "host:5000/repo:tag_ero"},
		{in: "host:5000/repo@sha256:" + hex64, suffix: "-erofs", want: "host:5000/repo:sha256-" + hex64 + "-erofs"},
		// By tag and digest: the tag named.
		{in: "host:5000/repo:v1@sha256:" + hex64, suffix: "-erofs", want: "host:5000/repo:v1-erofs"},
		{in: "alpine:3.20@sha256:" + hex64, suffix: "-erofs", want: "index.docker.io/library/alpine:3.20-erofs"},
		{in: "oci:DIR", suffix: "-erofs", want: "oci:DIR:latest-erofs"},
		{in: "oci:DIR:v1", suffix: "-erofs", want: "oci:DIR:v1-erofs"},
		{in: "oci:/a:b/DIR:v1", suffix: "-erofs", want: "oci:/a:b/DIR:v1-erofs"},
		// A converted source is refused: a mirror must not convert its output.
		{in: "host:5000/repo:tag-erofs", suffix: "-erofs", loop: true},
		{in: "oci:DIR:v1-erofs", suffix: "-erofs", loop: true},
		{in: "oci:DIR:-erofs", suffix: "-erofs", loop: true},
		// A docker-archive cannot be written: a target must be given.
		{in: "docker-archive:FILE", suffix: "-erofs", fails: true},
		{in: "host:5000/repo:tag", suffix: "", fails: true},
		// A twin tag over 128 characters: refused here, not as a 404 at
		// the upload.
		{in: "host:5000/repo:" + strings.Repeat("v", 122), suffix: "-erofs", want: "host:5000/repo:" + strings.Repeat("v", 122) + "-erofs"},
		{in: "host:5000/repo:" + strings.Repeat("v", 123), suffix: "-erofs", fails: true},
	} {
		t.Run(tc.in+" "+tc.suffix, func(t *testing.T) {
			src, err := oci.ParseRef(tc.in, false)
			if err != nil {
				t.Fatal(err)
			}
			got, err := oci.DefaultTarget(src, tc.suffix)
			switch {
			case tc.loop:
				if !errors.Is(err, oci.ErrLoop) {
					t.Errorf("DefaultTarget(%s) = %v, %v; want oci.ErrLoop", src, got, err)
				} else if !strings.Contains(err.Error(), tc.in) {
					t.Errorf("the error does not name the source: %v", err)
				}
				return
			case tc.fails:
				if err == nil {
					t.Errorf("DefaultTarget(%s, %q) = %v, want an error", src, tc.suffix, got)
				} else if errors.Is(err, oci.ErrLoop) {
					t.Errorf("DefaultTarget(%s, %q): %v is not a loop", src, tc.suffix, err)
				}
				return
			case err != nil:
				t.Fatalf("DefaultTarget(%s): %v", src, err)
			}
			s := got.String()
			if got.Kind == oci.Registry {
				s = got.Name.Name()
			}
			if s != tc.want {
				t.Errorf("DefaultTarget(%s) = %s, want %s", src, s, tc.want)
			}
			if got.Kind != src.Kind {
				t.Errorf("kind %v, source %v", got.Kind, src.Kind)
			}
			// The target of a source is never itself a source to convert.
			if !oci.HasSuffix(got, tc.suffix) {
				t.Errorf("HasSuffix(%s, %q) = false", got, tc.suffix)
			}
			if _, err := oci.DefaultTarget(got, tc.suffix); !errors.Is(err, oci.ErrLoop) {
				t.Errorf("DefaultTarget(DefaultTarget(%s)) = %v, want oci.ErrLoop", src, err)
			}
			if got.Kind == oci.Registry {
				// Docker tags are at most 128 characters.
				if n := len(got.Name.Identifier()); n > 128 {
					t.Errorf("tag of %d characters", n)
				}
				if got.Name.Context().Name() != src.Name.Context().Name() {
					t.Errorf("repository %s, source %s", got.Name.Context(), src.Name.Context())
				}
			}
		})
	}
}

func TestHasSuffix(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want bool
	}{
		{"host:5000/repo:tag-erofs", true},
		{"host:5000/repo:tag", false},
		{"repo", false},
		{"host:5000/erofs-repo-erofs:v1", false}, // the repository is not the tag
		{"host:5000/repo@sha256:" + hex64, false},
		{"oci:DIR:v1-erofs", true},
		{"oci:DIR-erofs", false},
		{"oci:DIR:v1", false},
		{"docker-archive:FILE-erofs", false},
	} {
		r, err := oci.ParseRef(tc.in, false)
		if err != nil {
			t.Fatal(err)
		}
		if got := oci.HasSuffix(r, "-erofs"); got != tc.want {
			t.Errorf("HasSuffix(%s, -erofs) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

// A docker-archive's images are named by their repo tags ("repo:tag", as
// in `docker save` and skopeo's docker-archive:PATH:REFERENCE).
func TestDockerArchiveTag(t *testing.T) {
	dir := t.TempDir()
	img, err := random.Image(512, 1)
	if err != nil {
		t.Fatal(err)
	}
	other, err := random.Image(256, 1)
	if err != nil {
		t.Fatal(err)
	}
	archive := filepath.Join(dir, "two.tar")
	a := name.MustParseReference("example.com/e2e/a:v1").(name.Tag)
	b := name.MustParseReference("example.com/e2e/b:v2").(name.Tag)
	if err := tarball.MultiRefWriteToFile(archive, map[name.Reference]v1.Image{a: img, b: other}); err != nil {
		t.Fatal(err)
	}
	wantA, _ := img.Digest()
	wantB, _ := other.Digest()
	for _, tc := range []struct {
		name, ref, want string
	}{
		{"a:v1", "docker-archive:" + archive + ":example.com/e2e/a:v1", wantA.String()},
		{"b:v2", "docker-archive:" + archive + ":example.com/e2e/b:v2", wantB.String()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := oci.ParseRef(tc.ref, false)
			if err != nil {
				t.Fatal(err)
			}
			if r.Path != archive {
				t.Errorf("BUG oci.ParseRef(%q): path %q tag %q, want path %q and the repo tag after it "+
					"(splitPathTag splits at the last colon, inside the repo tag)", tc.ref, r.Path, r.Tag, archive)
			}
			art, err := oci.Get(context.Background(), r, oci.Remote{})
			if err != nil {
				t.Fatalf("oci.Get(%s): %v", tc.ref, err)
			}
			if got := art.Descriptor.Digest.String(); got != tc.want {
				t.Errorf("got image %s, want %s", got, tc.want)
			}
		})
	}
	// Without a tag, an archive of two images cannot choose.
	r, err := oci.ParseRef("docker-archive:"+archive, false)
	if err != nil {
		t.Fatal(err)
	}
	want := "the archive holds 2 image(s) (tagged example.com/e2e/a:v1, example.com/e2e/b:v2): name one with docker-archive:FILE:TAG"
	if _, err := oci.Get(context.Background(), r, oci.Remote{}); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("oci.Get(%s) of an archive of two images: %v, want %q", r, err, want)
	}
	// A tag it does not hold gets the list too.
	if r, err = oci.ParseRef("docker-archive:"+archive+":example.com/e2e/c:v3", false); err != nil {
		t.Fatal(err)
	}
	if _, err := oci.Get(context.Background(), r, oci.Remote{}); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("oci.Get(%s): %v, want %q", r, err, want)
	}
	// One image, asked for another tag: its tag is named.
	one := filepath.Join(dir, "one.tar")
	if err := tarball.MultiRefWriteToFile(one, map[name.Reference]v1.Image{a: img}); err != nil {
		t.Fatal(err)
	}
	if r, err = oci.ParseRef("docker-archive:"+one+":example.com/e2e/c:v3", false); err != nil {
		t.Fatal(err)
	}
	if _, err := oci.Get(context.Background(), r, oci.Remote{}); err == nil || !strings.Contains(err.Error(), "holds 1 image(s) (tagged example.com/e2e/a:v1)") {
		t.Errorf("oci.Get(%s): %v, want the archive's one tag named", r, err)
	}
	// Read as skopeo reads them: a pipe (docker save | …), a gzip or zstd
	// file (docker save | gzip), each copied once into a file of TMPDIR.
	raw, err := os.ReadFile(archive)
	if err != nil {
		t.Fatal(err)
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(raw)
	zw.Close()
	gzPath := filepath.Join(dir, "two.tar.gz")
	if err := os.WriteFile(gzPath, gz.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	zsPath := filepath.Join(dir, "two.tar.zst")
	enc, _ := zstd.NewWriter(nil)
	if err := os.WriteFile(zsPath, enc.EncodeAll(raw, nil), 0o644); err != nil {
		t.Fatal(err)
	}
	cutPath := filepath.Join(dir, "cut.tar.gz")
	if err := os.WriteFile(cutPath, gz.Bytes()[:gz.Len()/2], 0o644); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	for _, p := range []string{fifo, gzPath, zsPath} {
		if p == fifo {
			go func() {
				f, err := os.OpenFile(fifo, os.O_WRONLY, 0)
				if err != nil {
					t.Error(err)
					return
				}
				f.Write(raw)
				f.Close()
			}()
		}
		r, err := oci.ParseRef("docker-archive:"+p+":example.com/e2e/b:v2", false)
		if err != nil {
			t.Fatal(err)
		}
		a, err := oci.Get(context.Background(), r, oci.Remote{})
		if err != nil {
			t.Fatalf("oci.Get(%s): %v", r, err)
		}
		if got, _ := a.Image.Digest(); got != wantB {
			t.Errorf("%s: image %s, want %s", r, got, wantB)
		}
		// Its layers are read from the copy.
		layers, err := a.Image.Layers()
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range layers {
			rc, err := l.Compressed()
			if err != nil {
				t.Fatal(err)
			}
			h, _, err := v1.SHA256(rc)
			rc.Close()
			if want, _ := l.Digest(); err != nil || h != want {
				t.Errorf("%s: a layer reads as %s (%v), want %s", r, h, err, want)
			}
		}
		if left, _ := os.ReadDir(tmp); len(left) != 0 {
			t.Errorf("%s: left %d files in TMPDIR", r, len(left))
		}
	}
	// Into ArchiveTempDir (--tmpdir) where set, not TMPDIR; and with
	// MaxArchiveFile (--max-layer-size), no file of it larger.
	t.Setenv("TMPDIR", filepath.Join(dir, "missing"))
	own := t.TempDir()
	gzRef, err := oci.ParseRef("docker-archive:"+gzPath+":example.com/e2e/b:v2", false)
	if err != nil {
		t.Fatal(err)
	}
	if a, err := oci.Get(context.Background(), gzRef, oci.Remote{ArchiveTempDir: own, MaxArchiveFile: 1 << 20}); err != nil {
		t.Errorf("oci.Get(%s) into %s: %v", gzRef, own, err)
	} else if got, _ := a.Image.Digest(); got != wantB {
		t.Errorf("%s: image %s, want %s", gzRef, got, wantB)
	}
	if _, err := oci.Get(context.Background(), gzRef, oci.Remote{}); err == nil || !strings.Contains(err.Error(), filepath.Join(dir, "missing")) {
		t.Errorf("oci.Get(%s) with TMPDIR missing: %v, want it named", gzRef, err)
	}
	if _, err := oci.Get(context.Background(), gzRef, oci.Remote{ArchiveTempDir: own, MaxArchiveFile: 100}); err == nil || !strings.Contains(err.Error(), "bytes, over the bound of 100 a file") {
		t.Errorf("oci.Get(%s) with files of at most 100 bytes: %v, want the first larger one named", gzRef, err)
	}
	if left, _ := os.ReadDir(own); len(left) != 0 {
		t.Errorf("left %d files in ArchiveTempDir", len(left))
	}
	for p, want := range map[string]string{cutPath: "copying the archive into " + tmp + ": unexpected EOF", dir: "a directory: docker-archive reads a file"} {
		r, err := oci.ParseRef("docker-archive:"+p, false)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := oci.Get(context.Background(), r, oci.Remote{ArchiveTempDir: tmp}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("oci.Get(%s): %v, want %q", r, err, want)
		}
	}
}

// TestDockerArchiveBomb: with MaxArchiveFile, a small compressed archive
// cannot fill the disk with what its headers do not declare: zeros after
// the end of the archive, or many small files (review 22-d). Nothing is
// left in the directory.
func TestDockerArchiveBomb(t *testing.T) {
	dir := t.TempDir()
	tmp := t.TempDir()
	archive := func(name string, files int, trailing int) string {
		var raw bytes.Buffer
		tw := tar.NewWriter(&raw)
		for i := 0; i < files; i++ {
			tw.WriteHeader(&tar.Header{Name: strings.Repeat("f", 1+i%90) + ".json", Mode: 0o644, Size: 1, Typeflag: tar.TypeReg})
			tw.Write([]byte("x"))
		}
		tw.Close()
		raw.Write(make([]byte, trailing))
		var gz bytes.Buffer
		zw := gzip.NewWriter(&gz)
		zw.Write(raw.Bytes())
		zw.Close()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, gz.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct {
		path, want string
	}{
		{archive("zeros.tar.gz", 1, 64<<20), "more than a tar record after its end"},
		{archive("many.tar.gz", 40, 0), "over the bound of 32064 bytes in all"},
	} {
		r, err := oci.ParseRef("docker-archive:"+tc.path, false)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := oci.Get(context.Background(), r, oci.Remote{ArchiveTempDir: tmp, MaxArchiveFile: 64}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", filepath.Base(tc.path), err, tc.want)
		}
	}
	// A tar record of padding is the archive's.
	r, _ := oci.ParseRef("docker-archive:"+archive("padded.tar.gz", 1, 9<<10), false)
	if _, err := oci.Get(context.Background(), r, oci.Remote{ArchiveTempDir: tmp, MaxArchiveFile: 64}); err == nil || strings.Contains(err.Error(), "after its end") || strings.Contains(err.Error(), "bound") {
		t.Errorf("a padded archive: %v, want it copied (and refused as no docker save archive)", err)
	}
	if left, _ := os.ReadDir(tmp); len(left) != 0 {
		t.Errorf("left %d files", len(left))
	}
}

// TestDockerArchiveCanceled: a pipe that stalls while its archive is
// copied gives way when the context ends (SIGINT), with the context's
// error, not the stream's.
func TestDockerArchiveCanceled(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TMPDIR", t.TempDir())
	go func() {
		f, err := os.OpenFile(fifo, os.O_WRONLY, 0)
		if err != nil {
			return
		}
		defer f.Close()
		f.Write(make([]byte, 4096)) // then nothing, and the pipe stays open
		time.Sleep(30 * time.Second)
	}()
	r, err := oci.ParseRef("docker-archive:"+fifo, false)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = oci.Get(ctx, r, oci.Remote{})
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 5*time.Second {
		t.Errorf("after %v: %v, want the context's end", time.Since(start), err)
	}
}
