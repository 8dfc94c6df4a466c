package main

import (
	"archive/tar"
	"bytes"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/ocierofs/ocierofs/internal/testregistry"
)

// spreadLayout writes an image of one layer of n files of size random
// bytes each, in name order, as an OCI layout tagged latest.
func spreadLayout(t *testing.T, n, size int) string {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	rnd := rand.New(rand.NewChaCha8([32]byte{1}))
	mt := time.Unix(1700000000, 0)
	must(t, tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: "data/", Mode: 0o755, ModTime: mt}))
	for i := range n {
		data := make([]byte, size)
		for k := range data {
			data[k] = byte(rnd.Uint32())
		}
		must(t, tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: fmt.Sprintf("data/f%02d", i), Mode: 0o644, Size: int64(size), ModTime: mt}))
		_, err := tw.Write(data)
		must(t, err)
	}
	must(t, tw.Close())
	img, err := mutate.ConfigFile(empty.Image, &v1.ConfigFile{Architecture: "amd64", OS: "linux", RootFS: v1.RootFS{Type: "layers"}})
	must(t, err)
	img = mutate.MediaType(mutate.ConfigMediaType(img, types.OCIConfigJSON), types.OCIManifestSchema1)
	img, err = mutate.AppendLayers(img, static.NewLayer(buf.Bytes(), types.OCIUncompressedLayer))
	must(t, err)
	dir := filepath.Join(t.TempDir(), "spread")
	p, err := layout.Write(dir, empty.Index)
	must(t, err)
	must(t, p.AppendImage(img, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": "latest"})))
	return dir
}

// TestMountPrefetchList: files a prefetch list names, laid out together by
// convert --prefetch-list, are fetched by a lazy mount at its start in a
// request or two, before they are read, and reading them then asks the
// registry for nothing; the same files of the image converted without the
// list cost a request per chunk they touch. Range requests are counted at
// a proxy in front of the registry. The list names a file the image
// lacks (a list recorded over another version): skipped.
func TestMountPrefetchList(t *testing.T) {
	requireLazyMount(t)
	b := bin(t)
	host := dockerRegistry(t)
	var ranged atomic.Int64
	rp := testregistry.Proxy(t, host)
	proxy := testregistry.Serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Range") != "" {
			ranged.Add(1)
		}
		rp.ServeHTTP(w, r)
	}))
	src := spreadLayout(t, 24, 300<<10)
	listed := []string{"/data/f17", "/data/f03", "/data/f21", "/data/f09", "/data/f12"}
	list := filepath.Join(t.TempDir(), "list")
	must(t, os.WriteFile(list, []byte(strings.Join(append(listed, "/data/gone"), "\n")+"\n"), 0o644))
	if _, stderr, code := run(t, b, "convert", "--plain-http", "-q", "oci:"+src+":latest", host+"/spread:plain"); code != 0 {
		t.Fatalf("convert: exit %d: %s", code, stderr)
	}
	_, stderr, code := run(t, b, "convert", "--plain-http", "--prefetch-list", list, "oci:"+src+":latest", host+"/spread:listed")
	if code != 0 {
		t.Fatalf("convert --prefetch-list: exit %d: %s", code, stderr)
	}
	if !strings.Contains(stderr, "1 of its 6 paths are no file of the image, skipped (the first: /data/gone)") {
		t.Errorf("convert --prefetch-list does not say which listed path it skipped: %s", stderr)
	}
	readListed := func(target string) {
		for _, p := range listed {
			if _, err := os.ReadFile(filepath.Join(target, p)); err != nil {
				t.Fatal(err)
			}
		}
	}
	mountAt := func(ref string, args ...string) (*mountProc, string) {
		target := t.TempDir()
		args = append([]string{"--plain-http", "--cache-dir", t.TempDir()}, args...)
		return startMount(t, b, append(args, proxy+"/spread:"+ref, target)...), target
	}

	ranged.Store(0)
	_, target := mountAt("plain", "--prefetch", "none")
	readListed(target)
	plain := ranged.Load()

	ranged.Store(0)
	m, target := mountAt("listed")
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(m.stderr.String(), "listed files and metadata fetched") {
		if time.Now().After(deadline) {
			t.Fatalf("no prefetch of the listed files in 30s: %s", m.stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	atStart := ranged.Load()
	readListed(target)
	listedTotal := ranged.Load()
	t.Logf("range requests: %d reading the files without the list; %d with it (%d of them at mount)", plain, listedTotal, atStart)
	if listedTotal != atStart {
		t.Errorf("reading the listed files after their prefetch: %d more range requests, want none", listedTotal-atStart)
	}
	if listedTotal*2 > plain {
		t.Errorf("%d range requests with the list against %d without: want fewer than half", listedTotal, plain)
	}
}
