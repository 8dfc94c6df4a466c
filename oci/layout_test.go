package oci_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"golang.org/x/sys/unix"

	"github.com/ocierofs/ocierofs/oci"
)

// writeTo writes img into the layout dir under tag, as convert does.
func writeTo(t *testing.T, dir, tag string, img v1.Image) error {
	t.Helper()
	r, err := oci.ParseRef("oci:"+dir+":"+tag, false)
	if err != nil {
		t.Fatal(err)
	}
	return oci.Write(context.Background(), r, img, nil, oci.Remote{})
}

// layoutTags reads the layout at dir as go-containerregistry does and
// returns its tags and their manifests, each image validated (every blob
// there, of its digest).
func layoutTags(t *testing.T, dir string) map[string]v1.Hash {
	t.Helper()
	p, err := layout.FromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := p.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	tags := map[string]v1.Hash{}
	for _, d := range im.Manifests {
		tag := d.Annotations["org.opencontainers.image.ref.name"]
		if _, dup := tags[tag]; dup {
			t.Errorf("tag %q listed twice", tag)
		}
		tags[tag] = d.Digest
		img, err := idx.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		if err := blobsWhole(img); err != nil {
			t.Errorf("image %s (%q): %v", d.Digest, tag, err)
		}
	}
	return tags
}

// blobsWhole checks that the layout has every layer of img, of its digest.
func blobsWhole(img v1.Image) error {
	if _, err := img.ConfigFile(); err != nil {
		return err
	}
	layers, err := img.Layers()
	if err != nil {
		return err
	}
	for _, l := range layers {
		want, _ := l.Digest()
		rc, err := l.Compressed()
		if err != nil {
			return err
		}
		got, _, err := v1.SHA256(rc)
		rc.Close()
		if err != nil || got != want {
			return fmt.Errorf("layer %s: read %v, %v", want, got, err)
		}
	}
	return nil
}

func randomImage(t *testing.T, size int64) v1.Image {
	t.Helper()
	img, err := random.Image(size, 2)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

func digestOf(t *testing.T, img v1.Image) v1.Hash {
	t.Helper()
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// noTemps fails if a temp file of a write is left in dir.
func noTemps(t *testing.T, dir string) {
	t.Helper()
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && strings.HasPrefix(d.Name(), ".tmp-") {
			t.Errorf("left behind: %s", p)
		}
		return nil
	})
}

// TestWriteLayoutConcurrent: runs writing to one layout at once take
// turns: every tag is there afterwards (go-containerregistry's writer,
// reading and rewriting index.json unlocked, lost some with 8 at once).
func TestWriteLayoutConcurrent(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "layout")
	const n = 8
	imgs := make([]v1.Image, n)
	for i := range imgs {
		imgs[i] = randomImage(t, 1000+int64(i))
	}
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() { errs[i] = writeTo(t, dir, fmt.Sprintf("t%d", i), imgs[i]) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("t%d: %v", i, err)
		}
	}
	tags := layoutTags(t, dir)
	for i := range n {
		if got, want := tags[fmt.Sprintf("t%d", i)], digestOf(t, imgs[i]); got != want {
			t.Errorf("t%d: %v, want %v", i, got, want)
		}
	}
	if len(tags) != n {
		t.Errorf("%d tags, want %d", len(tags), n)
	}
	// A tag moves to the image written last; an untagged image is listed
	// once however often it is written.
	if err := writeTo(t, dir, "t0", imgs[1]); err != nil {
		t.Fatal(err)
	}
	r, _ := oci.ParseRef("oci:"+dir, false)
	for range 2 {
		if err := oci.Write(context.Background(), r, imgs[2], nil, oci.Remote{}); err != nil {
			t.Fatal(err)
		}
	}
	tags = layoutTags(t, dir)
	if tags["t0"] != digestOf(t, imgs[1]) || tags[""] != digestOf(t, imgs[2]) || len(tags) != n+1 {
		t.Errorf("after moving t0 and adding an untagged image: %v", tags)
	}
	noTemps(t, dir)
}

// TestWriteLayoutFailures: a write that fails leaves the layout as it was:
// a full disk while index.json is replaced (go-containerregistry's writer
// left it cut off, every tag lost), a layer that cannot be read (a new
// layout is removed again), a blob cut short by an older writer (written
// again).
func TestWriteLayoutFailures(t *testing.T) {
	src := randomImage(t, 4000)
	other := randomImage(t, 3000)

	t.Run("unreadable layer", func(t *testing.T) {
		// An image whose layer blob is gone from its own layout.
		srcDir := filepath.Join(t.TempDir(), "src")
		if err := writeTo(t, srcDir, "x", src); err != nil {
			t.Fatal(err)
		}
		layers, _ := src.Layers()
		ld, _ := layers[1].Digest()
		if err := os.Remove(filepath.Join(srcDir, "blobs", "sha256", ld.Hex)); err != nil {
			t.Fatal(err)
		}
		p, _ := layout.FromPath(srcDir)
		broken, err := p.Image(digestOf(t, src))
		if err != nil {
			t.Fatal(err)
		}
		fresh := filepath.Join(t.TempDir(), "new")
		if err := writeTo(t, fresh, "v1", broken); err == nil || !strings.Contains(err.Error(), ld.String()) {
			t.Errorf("err = %v, want one naming layer %s", err, ld)
		}
		if _, err := os.Stat(fresh); !os.IsNotExist(err) {
			t.Errorf("the new layout is left: %v", err)
		}
		existing := filepath.Join(t.TempDir(), "old")
		if err := writeTo(t, existing, "keep", other); err != nil {
			t.Fatal(err)
		}
		before, _ := os.ReadFile(filepath.Join(existing, "index.json"))
		if err := writeTo(t, existing, "v1", broken); err == nil {
			t.Error("wrote an image with a missing layer")
		}
		after, _ := os.ReadFile(filepath.Join(existing, "index.json"))
		if !bytes.Equal(before, after) {
			t.Errorf("index.json changed by a failed write:\n%s\n%s", before, after)
		}
		noTemps(t, existing)
	})

	t.Run("stale temp files and a broken index", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "layout")
		if err := writeTo(t, dir, "v1", src); err != nil {
			t.Fatal(err)
		}
		// A writer killed mid-blob left its temp file: the next one,
		// holding the lock, removes it.
		stale := filepath.Join(dir, "blobs", "sha256", ".tmp-0123-456")
		os.WriteFile(stale, []byte("half a layer"), 0o644)
		if err := writeTo(t, dir, "v2", other); err != nil {
			t.Fatal(err)
		}
		noTemps(t, dir)
		// An index.json that does not parse stops a write before any
		// blob is copied.
		os.WriteFile(filepath.Join(dir, "index.json"), nil, 0o644)
		before, _ := os.ReadDir(filepath.Join(dir, "blobs", "sha256"))
		third := randomImage(t, 2000)
		if err := writeTo(t, dir, "v3", third); err == nil || !strings.Contains(err.Error(), "index.json") {
			t.Errorf("err = %v, want one naming index.json", err)
		}
		if after, _ := os.ReadDir(filepath.Join(dir, "blobs", "sha256")); len(after) != len(before) {
			t.Errorf("%d blobs written before the broken index.json was found", len(after)-len(before))
		}
	})

	t.Run("not a directory", func(t *testing.T) {
		// A FIFO would block an open without O_DIRECTORY.
		for _, kind := range []string{"fifo", "file"} {
			p := filepath.Join(t.TempDir(), kind)
			var err error
			if kind == "fifo" {
				err = unix.Mkfifo(p, 0o644)
			} else {
				err = os.WriteFile(p, []byte("x"), 0o644)
			}
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- writeTo(t, p, "v1", src) }()
			select {
			case err := <-done:
				if err == nil || !strings.Contains(err.Error(), "not a directory") {
					t.Errorf("%s: err = %v, want not a directory", kind, err)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("%s: the write blocks", kind)
			}
			if fi, err := os.Lstat(p); err != nil || fi.IsDir() {
				t.Errorf("%s: changed: %v %v", kind, fi.Mode(), err)
			}
		}
	})

	t.Run("blob cut short", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "layout")
		if err := writeTo(t, dir, "v1", src); err != nil {
			t.Fatal(err)
		}
		layers, _ := src.Layers()
		ld, _ := layers[0].Digest()
		if err := os.Truncate(filepath.Join(dir, "blobs", "sha256", ld.Hex), 100); err != nil {
			t.Fatal(err)
		}
		if err := writeTo(t, dir, "v2", src); err != nil {
			t.Fatal(err)
		}
		if tags := layoutTags(t, dir); len(tags) != 2 {
			t.Errorf("tags %v", tags)
		}
	})

	t.Run("disk full", func(t *testing.T) {
		if testing.Short() {
			t.Skip("-short: no kernel mounts; make test runs them")
		}
		if os.Geteuid() != 0 {
			t.Skip("mounting a small tmpfs needs root")
		}
		mnt := t.TempDir()
		if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", mnt).CombinedOutput(); err != nil {
			t.Skipf("cannot mount a tmpfs here: %v: %s", err, out)
		}
		t.Cleanup(func() { exec.Command("umount", mnt).Run() })
		dir := filepath.Join(mnt, "layout")
		for i := range 20 { // an index.json of a few KiB
			if err := writeTo(t, dir, fmt.Sprintf("tag-%02d", i), src); err != nil {
				t.Fatal(err)
			}
		}
		before, _ := os.ReadFile(filepath.Join(dir, "index.json"))
		// Fill the filesystem; every blob of src is there already, so
		// only index.json would grow.
		filler, err := os.Create(filepath.Join(mnt, "filler"))
		if err != nil {
			t.Fatal(err)
		}
		for {
			if _, err := filler.Write(make([]byte, 4096)); err != nil {
				break
			}
		}
		filler.Close()
		if err := writeTo(t, dir, "v2", src); err == nil {
			t.Fatal("wrote to a full filesystem")
		} else {
			t.Logf("error: %v", err)
		}
		after, _ := os.ReadFile(filepath.Join(dir, "index.json"))
		if !bytes.Equal(before, after) {
			t.Fatalf("index.json changed by a failed write (%d → %d bytes)", len(before), len(after))
		}
		noTemps(t, dir)
		os.Remove(filler.Name())
		if err := writeTo(t, dir, "v2", src); err != nil {
			t.Fatal(err)
		}
		if tags := layoutTags(t, dir); len(tags) != 21 {
			t.Errorf("%d tags, want 21", len(tags))
		}
	})
}

// zeroLayer is a layer of size zero bytes whose first read calls onRead.
type zeroLayer struct {
	size   int64
	onRead func()
}

func (l zeroLayer) Digest() (v1.Hash, error) {
	return v1.NewHash("sha256:" + strings.Repeat("ab", 32))
}
func (l zeroLayer) DiffID() (v1.Hash, error)             { return l.Digest() }
func (l zeroLayer) Size() (int64, error)                 { return l.size, nil }
func (l zeroLayer) MediaType() (types.MediaType, error)  { return types.OCILayer, nil }
func (l zeroLayer) Uncompressed() (io.ReadCloser, error) { return l.Compressed() }
func (l zeroLayer) Compressed() (io.ReadCloser, error) {
	var once sync.Once
	return io.NopCloser(io.LimitReader(readFunc(func(b []byte) (int, error) {
		once.Do(l.onRead)
		clear(b)
		return len(b), nil
	}), l.size)), nil
}

type readFunc func([]byte) (int, error)

func (f readFunc) Read(b []byte) (int, error) { return f(b) }

// TestWriteLayoutCanceled: a write given up (Ctrl-C) stops while it waits
// for another writer's lock and within a large blob's copy, and leaves
// nothing.
func TestWriteLayoutCanceled(t *testing.T) {
	t.Run("waiting for the lock", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "layout")
		if err := writeTo(t, dir, "v1", randomImage(t, 1000)); err != nil {
			t.Fatal(err)
		}
		before, _ := os.ReadFile(filepath.Join(dir, "index.json"))
		// Another writer holds the layout.
		d, err := os.Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		if err := unix.Flock(int(d.Fd()), unix.LOCK_EX); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		r, _ := oci.ParseRef("oci:"+dir+":v2", false)
		start := time.Now()
		err = oci.Write(ctx, r, randomImage(t, 1000), nil, oci.Remote{})
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err = %v, want the context's", err)
		}
		if s := time.Since(start); s > 5*time.Second {
			t.Errorf("gave up after %v", s)
		}
		if after, _ := os.ReadFile(filepath.Join(dir, "index.json")); !bytes.Equal(before, after) {
			t.Errorf("index.json changed:\n%s\n%s", before, after)
		}
	})
	t.Run("copying a blob", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		const size = 1 << 30 // would take seconds to copy whole
		img, err := mutate.AppendLayers(empty.Image, zeroLayer{size: size, onRead: cancel})
		if err != nil {
			t.Fatal(err)
		}
		dir := filepath.Join(t.TempDir(), "layout")
		r, _ := oci.ParseRef("oci:"+dir+":v1", false)
		err = oci.Write(ctx, r, img, nil, oci.Remote{})
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want the context's", err)
		}
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("the new layout is left: %v", err)
		}
	})
}
