package main

import (
	"encoding/json"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// TestMain keeps the tests' twin records out of the user's cache, but not
// go build's: the programs the tests build reuse the user's build cache
// (GOCACHE, fixed before XDG_CACHE_HOME moves) instead of compiling every
// dependency afresh. It removes the programs afterwards.
func TestMain(m *testing.M) {
	if os.Getenv("GOCACHE") == "" {
		if out, err := exec.Command("go", "env", "GOCACHE").Output(); err == nil {
			if c := strings.TrimSpace(string(out)); c != "" && c != "off" {
				os.Setenv("GOCACHE", c)
			}
		}
	}
	dir, err := os.MkdirTemp("", "ocierofs-cache-")
	if err != nil {
		panic(err)
	}
	os.Setenv("XDG_CACHE_HOME", dir)
	code := m.Run()
	os.RemoveAll(dir)
	if built.dir != "" {
		os.RemoveAll(built.dir)
	}
	os.Exit(code)
}

// TestConvertUpToDate: converting an unchanged source again with the same
// options reads no layer and says the target is up to date; other
// options, --force, or a target changed since convert again.
func TestConvertUpToDate(t *testing.T) {
	var blobGets atomic.Int32
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, rq *http.Request) {
		if rq.Method == http.MethodGet && strings.Contains(rq.URL.Path, "/blobs/sha256:") {
			blobGets.Add(1)
		}
		reg.ServeHTTP(w, rq)
	}))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	src, err := name.ParseReference(host + "/e2e/bb:1")
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(src, busyboxImage(t)); err != nil {
		t.Fatal(err)
	}
	b := bin(t)
	type report struct {
		Digest   string
		UpToDate bool
		Images   []json.RawMessage
	}
	convert := func(args ...string) (report, int32) {
		t.Helper()
		blobGets.Store(0)
		t0 := time.Now()
		out, e, code := run(t, b, append(append([]string{"convert", "-o", "json"}, args...), src.String())...)
		t.Logf("convert %q: %s: %s", args, time.Since(t0), e)
		if code != 0 {
			t.Fatalf("convert %q: exit %d: %s", args, code, e)
		}
		var r report
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("convert %q printed %q: %v", args, out, err)
		}
		return r, blobGets.Load()
	}
	first, _ := convert()
	if first.UpToDate || len(first.Images) != 1 {
		t.Fatalf("first conversion: %+v", first)
	}
	start := time.Now()
	again, gets := convert()
	t.Logf("again in %s, %d blob reads", time.Since(start), gets)
	if !again.UpToDate || again.Digest != first.Digest || gets != 0 || len(again.Images) != 0 {
		t.Errorf("unchanged source, same options: %+v after %d blob reads; want up to date, %s, none read", again, gets, first.Digest)
	}
	if lz4, _ := convert("-z", "lz4"); lz4.UpToDate || lz4.Digest == first.Digest {
		t.Errorf("other options: %+v, want a new conversion", lz4)
	}
	// The target now holds the lz4 twin: the first options convert again.
	if back, _ := convert(); back.UpToDate || back.Digest != first.Digest {
		t.Errorf("target changed since: %+v, want a conversion to %s", back, first.Digest)
	}
	if forced, _ := convert("--force"); forced.UpToDate || forced.Digest != first.Digest {
		t.Errorf("--force: %+v, want a conversion to %s", forced, first.Digest)
	}
}
