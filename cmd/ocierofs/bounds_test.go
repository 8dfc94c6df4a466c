package main

import (
	"archive/tar"
	"compress/gzip"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// stallingRegistry is go-containerregistry's in-memory registry, except
// that every blob download sends half its bytes and then nothing, until
// the client goes away.
func stallingRegistry(t *testing.T) string {
	t.Helper()
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	stall := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, rq *http.Request) {
		if rq.Method != http.MethodGet || !strings.Contains(rq.URL.Path, "/blobs/sha256:") {
			reg.ServeHTTP(w, rq)
			return
		}
		rec := httptest.NewRecorder()
		reg.ServeHTTP(rec, rq)
		body := rec.Body.Bytes()
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		w.Write(body[:len(body)/2])
		w.(http.Flusher).Flush()
		select {
		case <-rq.Context().Done():
		case <-stall:
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(stall) })
	return srv.Listener.Addr().String()
}

// TestConvertCLIStall: convert from a registry that stops sending fails
// with exit 1 and one line naming the blob and the registry, after the
// retries, instead of hanging.
func TestConvertCLIStall(t *testing.T) {
	t.Parallel()
	host := stallingRegistry(t)
	src, err := name.ParseReference(host + "/e2e/bb:1")
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(src, busyboxImage(t)); err != nil {
		t.Fatal(err)
	}
	b := bin(t)
	start := time.Now()
	out := "oci:" + filepath.Join(t.TempDir(), "o") + ":t"
	_, e, code := run(t, b, "convert", "-q", "--stall-timeout", "300ms", src.String(), out)
	took := time.Since(start)
	t.Logf("exit %d after %.1fs: %s", code, took.Seconds(), e)
	if code != 1 {
		t.Fatalf("exit %d, want 1", code)
	}
	for _, s := range []string{"blob sha256:", "on registry " + host, "stalled"} {
		if !strings.Contains(e, s) {
			t.Errorf("stderr does not say %q", s)
		}
	}
	if lines := strings.Count(strings.TrimSpace(e), "\n") + 1; lines != 1 {
		t.Errorf("%d lines on stderr, want one", lines)
	}
}

// TestMkfsMaxLayerSize: mkfs takes convert's --max-layer-size, so that a
// small gzip of zeros does not become a huge image; the tar's size is
// bounded from a file and from stdin, with exit 1 and no output.
func TestMkfsMaxLayerSize(t *testing.T) {
	t.Parallel()
	b := bin(t)
	dir := t.TempDir()
	bomb := filepath.Join(dir, "bomb.tar.gz")
	writeGzipTar(t, bomb, "zeros", 64<<20)
	for _, input := range []string{bomb, "-"} {
		out := filepath.Join(dir, "out.erofs")
		var stdin io.Reader
		if input == "-" {
			f, err := os.Open(bomb)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			stdin = f
		}
		_, e, code := runStdin(t, stdin, b, "mkfs", "--max-layer-size", "1M", out, input)
		if code != 1 || !strings.Contains(e, "larger than the 1048576 bytes a layer may have") {
			t.Errorf("mkfs %s: exit %d: %s", input, code, e)
		}
		if _, err := os.Stat(out); !os.IsNotExist(err) {
			t.Errorf("mkfs %s: the output is there after the refusal", input)
		}
		if _, e, code := runStdin(t, nil, b, "mkfs", "-q", "--max-layer-size", "65M", out, bomb); code != 0 {
			t.Errorf("mkfs under the bound: exit %d: %s", code, e)
		}
		os.Remove(out)
	}
}

// writeGzipTar writes a gzip'ed tar of one file of size zero bytes.
func writeGzipTar(t *testing.T, path, name string, size int64) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zw := gzip.NewWriter(f)
	tw := tar.NewWriter(zw)
	if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: size, Typeflag: tar.TypeReg}); err != nil {
		t.Fatal(err)
	}
	if _, err := io.CopyN(tw, zeroReader{}, size); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
}

type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) { clear(p); return len(p), nil }
