package convert_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/ocierofs/ocierofs/convert"
)

// The layer content cache holds, for each tar layer, the bytes convert
// publishes for it, under the tar's diffID; reruns convert nothing that is
// there, and refill only what is missing.
func TestCacheImage(t *testing.T) {
	ctx := context.Background()
	src := e2eImage(t, "amd64", testImageLayers(t)...)
	desc := srcDescriptor(t, src)
	conv, err := convert.NewConverter(convert.ImageOptions{TempDir: t.TempDir(), Jobs: 2})
	must(t, err)
	defer conv.Close()
	out, _, err := conv.Image(ctx, src, desc)
	must(t, err)
	outCfg, err := out.ConfigFile()
	must(t, err)
	srcCfg, err := src.ConfigFile()
	must(t, err)

	dir := t.TempDir()
	run := func() []convert.CacheLayer {
		t.Helper()
		c, err := convert.NewConverter(convert.ImageOptions{TempDir: t.TempDir(), Jobs: 2})
		must(t, err)
		defer c.Close()
		ls, err := c.CacheImage(ctx, src, desc, dir)
		must(t, err)
		if len(ls) != len(srcCfg.RootFS.DiffIDs) {
			t.Fatalf("%d cache layers for %d layers", len(ls), len(srcCfg.RootFS.DiffIDs))
		}
		return ls
	}
	check := func(ls []convert.CacheLayer) {
		t.Helper()
		for i, l := range ls {
			want := convert.CachePath(dir, srcCfg.RootFS.DiffIDs[i])
			if l.Path != want {
				t.Errorf("layer %d: path %s, want %s", i, l.Path, want)
			}
			b, err := os.ReadFile(want)
			if err != nil {
				t.Fatalf("layer %d: %v", i, err)
			}
			if got := sha256Of(b); got != outCfg.RootFS.DiffIDs[i] {
				t.Errorf("layer %d: cache entry %s, convert made %s", i, got, outCfg.RootFS.DiffIDs[i])
			}
		}
	}
	first := run()
	for i, l := range first {
		if l.Cached {
			t.Errorf("layer %d cached before the first run", i)
		}
	}
	check(first)
	h := srcCfg.RootFS.DiffIDs[0]
	if rel, _ := filepath.Rel(dir, first[0].Path); rel != filepath.Join("sha256", h.Hex[:2], h.Hex+".erofs") {
		t.Errorf("cache layout %s", rel)
	}

	for i, l := range run() {
		if !l.Cached || l.ConvertSeconds != 0 {
			t.Errorf("rerun: layer %d converted again (%+v)", i, l)
		}
	}

	// An entry lost: only it is made again, with the same bytes (the
	// layers below it are read for their directories).
	must(t, os.Remove(first[3].Path))
	third := run()
	for i, l := range third {
		if l.Cached != (i != 3) {
			t.Errorf("after removing layer 3's entry: layer %d cached=%v", i, l.Cached)
		}
	}
	check(third)
	matches, _ := filepath.Glob(filepath.Join(dir, "sha256", "*", ".tmp-*"))
	if len(matches) != 0 {
		t.Errorf("temp files left: %v", matches)
	}
}
