package main

import (
	"io"
	"log"
	"net/http"
	"net/http/httptest"
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
