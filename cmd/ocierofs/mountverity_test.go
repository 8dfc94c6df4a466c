package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/ocierofs/ocierofs/erofs"
	"github.com/ocierofs/ocierofs/internal/testregistry"
)

// TestMountVerity: a layer with the spec's dm-verity tree (convert
// --media-type spec --dmverity) whose registry sends one wrong byte in a
// file's data: reading that file through a lazy mount fails with EIO,
// never with the wrong byte, and the other files read as they are.
func TestMountVerity(t *testing.T) {
	requireLazyMount(t)
	b := bin(t)
	host := dockerRegistry(t)
	ref := convertBusyboxTo(t, b, host, "--media-type", "spec", "--dmverity")
	r, err := name.ParseReference(ref, name.Insecure)
	must(t, err)
	img, err := remote.Image(r)
	must(t, err)
	ls, err := img.Layers()
	must(t, err)
	var victim string
	var at, size int64
	var ei *erofs.Image
	var dg v1.Hash
	for _, l := range ls {
		mt, err := l.MediaType()
		must(t, err)
		if !strings.HasPrefix(string(mt), "application/vnd.erofs") {
			continue
		}
		rc, err := l.Compressed()
		must(t, err)
		raw, err := io.ReadAll(rc)
		must(t, err)
		rc.Close()
		img, err := erofs.Open(bytes.NewReader(raw), int64(len(raw)))
		must(t, err)
		// The largest file stored in blocks is the one spoilt.
		must(t, img.Walk(".", func(p string, ino *erofs.Inode) error {
			if ino.IsRegular() && ino.Size > size && ino.Size > 8192 && (ino.Layout == erofs.LayoutFlatPlain || ino.Layout == erofs.LayoutFlatInline) {
				victim, at, size, ei = p, int64(ino.StartBlock())*4096+123, ino.Size, img
				dg, err = l.Digest()
			}
			return err
		}))
	}
	if victim == "" {
		t.Fatal("no file stored in blocks in the layer")
	}
	rp := testregistry.Proxy(t, host)
	rp.ModifyResponse = func(resp *http.Response) error {
		var a, z int64
		if !strings.Contains(resp.Request.URL.Path, dg.Hex) || resp.StatusCode != http.StatusPartialContent {
			return nil
		}
		if _, err := fmt.Sscanf(resp.Request.Header.Get("Range"), "bytes=%d-%d", &a, &z); err != nil || at < a || at > z {
			return nil
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return err
		}
		body[at-a] ^= 0x40
		resp.Body = io.NopCloser(bytes.NewReader(body))
		return nil
	}
	proxy := testregistry.Serve(t, rp)
	target := t.TempDir()
	m := startMount(t, b, "--plain-http", "--cache-dir", t.TempDir(), "--prefetch", "none", proxy+"/busybox:erofs", target)
	if !strings.Contains(m.stderr.String(), "dm-verity") {
		t.Errorf("the mount does not say it checks the layer's dm-verity tree: %s", m.stderr.String())
	}
	_, err = os.ReadFile(filepath.Join(target, victim))
	if !errors.Is(err, syscall.EIO) {
		t.Errorf("reading %s, spoilt at byte %d of the blob: %v, want EIO", victim, at, err)
	}
	// Other files of the layer read as the layer has them (where an
	// upper layer does not hide or replace them).
	vino, err := ei.Lstat(victim)
	must(t, err)
	same := 0
	must(t, ei.Walk(".", func(p string, ino *erofs.Inode) error {
		if !ino.IsRegular() || ino.Nid == vino.Nid {
			return nil
		}
		want, err := ei.ReadFile(p)
		if err != nil {
			return err
		}
		if got, err := os.ReadFile(filepath.Join(target, p)); err == nil && bytes.Equal(got, want) {
			same++
		} else if err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: %v", p, err)
		}
		return nil
	}))
	if same == 0 {
		t.Error("no other file of the layer read as it is")
	}
}
