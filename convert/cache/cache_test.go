package cache_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/ocierofs/ocierofs/convert"
	"github.com/ocierofs/ocierofs/convert/cache"
	"github.com/ocierofs/ocierofs/convert/dmverity"
	"github.com/ocierofs/ocierofs/convert/internal/convtest"
	"github.com/ocierofs/ocierofs/convert/internal/roundtrip"
	"github.com/ocierofs/ocierofs/erofs"
)

var must = roundtrip.Must

// The layer content cache holds, for each tar layer, the bytes convert
// publishes for it, under the tar's diffID; reruns convert nothing that is
// there, and refill only what is missing.
func TestCacheImage(t *testing.T) {
	ctx := context.Background()
	src := convtest.Image(t, "amd64", convtest.TestImageLayers(t)...)
	desc := convtest.SourceDescriptor(t, src)
	published := publishedDiffIDs(t, src)
	srcCfg, err := src.ConfigFile()
	must(t, err)

	dir := t.TempDir()
	run := func() []cache.Layer {
		t.Helper()
		c, err := cache.New(dir, cache.Options{Convert: convert.ImageOptions{TempDir: t.TempDir(), Jobs: 2}, OverLower: true})
		must(t, err)
		defer c.Close()
		ls, err := c.Image(ctx, src, desc)
		must(t, err)
		if len(ls) != len(srcCfg.RootFS.DiffIDs) {
			t.Fatalf("%d cache layers for %d layers", len(ls), len(srcCfg.RootFS.DiffIDs))
		}
		return ls
	}
	check := func(ls []cache.Layer) {
		t.Helper()
		for i, l := range ls {
			want := cache.Path(dir, srcCfg.RootFS.DiffIDs[i])
			if l.Path != want {
				t.Errorf("layer %d: path %s, want %s", i, l.Path, want)
			}
			b, err := os.ReadFile(want)
			if err != nil {
				t.Fatalf("layer %d: %v", i, err)
			}
			if got := convtest.SHA256(b); got != published[i] {
				t.Errorf("layer %d: cache entry %s, convert made %s", i, got, published[i])
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

	// Damaged entries (truncated, empty) are made again, not trusted.
	must(t, os.Truncate(first[1].Path, 4096))
	must(t, os.WriteFile(first[2].Path, nil, 0o644))
	fourth := run()
	for i, l := range fourth {
		if l.Cached != (i != 1 && i != 2) {
			t.Errorf("after damaging layers 1 and 2: layer %d cached=%v", i, l.Cached)
		}
	}
	check(fourth)
}

// TestCacheLowerLayers: a layer that implies a directory is cached with
// the metadata the layers below give it; an image with other layers below
// gets the entry made first and a warning naming the directory. Two runs
// on one directory convert each layer once; what a killed run left is
// removed.
// TestCacheLowerLayers: with Options.OverLower, the directories a layer
// implies have the metadata of the first image cached's lower layers; a
// second image over other layers is warned.
func TestCacheLowerLayers(t *testing.T) {
	ctx := context.Background()
	top := convtest.Layer(t, convtest.File("opt/f", 0o644, []byte("shared\n")))
	a := convtest.Image(t, "amd64", convtest.Layer(t, convtest.Dir(".", 0o755), convtest.Dir("opt", 0o700).Own(1000, 1000), convtest.File("opt/a", 0o644, nil)), top)
	b := convtest.Image(t, "amd64", convtest.Layer(t, convtest.Dir(".", 0o755), convtest.Dir("opt", 0o755), convtest.File("opt/b", 0o644, nil)), top)
	dir := t.TempDir()
	// Left by a killed run: its temp directory (unlocked) and a copy.
	dead := filepath.Join(dir, "ocierofs-123")
	must(t, os.MkdirAll(dead, 0o755))
	must(t, os.WriteFile(filepath.Join(dead, ".ocierofs-lock"), nil, 0o600))
	old := time.Now().Add(-time.Hour)
	must(t, os.Chtimes(filepath.Join(dead, ".ocierofs-lock"), old, old))
	must(t, os.MkdirAll(filepath.Join(dir, "sha256", "ab"), 0o755))
	must(t, os.WriteFile(filepath.Join(dir, "sha256", "ab", ".tmp-x.erofs-1"), []byte("half"), 0o644))

	// cache caches img under the cache's lock; locked, if set, is called
	// once the lock is held.
	fill := func(img v1.Image, locked func()) []cache.Layer {
		t.Helper()
		unlock, err := cache.Lock(ctx, dir, nil)
		must(t, err)
		defer unlock()
		if locked != nil {
			locked()
		}
		c, err := cache.New(dir, cache.Options{Convert: convert.ImageOptions{TempDir: dir}, OverLower: true})
		must(t, err)
		defer c.Close()
		ls, err := c.Image(ctx, img, convtest.SourceDescriptor(t, img))
		must(t, err)
		return ls
	}
	// Both at once: b starts once a holds the lock, waits for it, and the
	// top layer is converted once.
	var la, lb []cache.Layer
	var wg sync.WaitGroup
	aLocked := make(chan struct{})
	lockedA := sync.OnceFunc(func() { close(aLocked) })
	wg.Go(func() {
		defer lockedA() // also if a fails before the lock
		la = fill(a, lockedA)
	})
	<-aLocked
	wg.Go(func() { lb = fill(b, nil) })
	wg.Wait()
	if la[1].Cached || !lb[1].Cached {
		t.Fatalf("the shared layer: cached %v for a, %v for b; want converted for a, found for b", la[1].Cached, lb[1].Cached)
	}
	if len(la[1].Warnings) != 0 {
		t.Errorf("a: warnings %q", la[1].Warnings)
	}
	if len(lb[1].Warnings) != 1 || !strings.Contains(lb[1].Warnings[0], "(/, /opt)") {
		t.Errorf("b: warnings %q, want one naming opt", lb[1].Warnings)
	}
	// The entry is the one convert publishes for a, and its opt/ is a's.
	published := publishedDiffIDs(t, a)
	got, err := os.ReadFile(la[1].Path)
	must(t, err)
	if convtest.SHA256(got) != published[1] {
		t.Errorf("entry %s, convert made %s for a", convtest.SHA256(got), published[1])
	}
	if m := convtest.ModeOf(t, convtest.TreeFromDir(t, convtest.MountStack(t, []string{la[0].Path, la[1].Path})), "opt"); m != 0o700 {
		t.Errorf("a's stack: opt mode %#o, want 0700", m)
	}
	for _, p := range []string{dead, filepath.Join(dir, "sha256", "ab", ".tmp-x.erofs-1")} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("%s left", p)
		}
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "ocierofs-*")); len(left) != 0 {
		t.Errorf("temp directories left: %v", left)
	}
}

// TestCacheDMVerity: with Options.DMVerity every entry is the image convert
// publishes followed by the dm-verity tree its sidecar describes
// (veritysetup verify accepts it), and the kernel mounts the entries as
// they are, the stack being the image's; two platforms sharing the layers
// append each tree once. An entry without a sidecar is made again for
// Options.DMVerity, and a tree or sidecar that does not match (sizes, offsets,
// superblock, the root hash against the top of the tree) is never trusted,
// with it or without it (containerd would fail to mount it). Images of
// 512-byte blocks get trees of 512-byte data blocks.
func TestCacheDMVerity(t *testing.T) {
	ctx := context.Background()
	layers := convtest.TestImageLayers(t)
	amd := convtest.Image(t, "amd64", layers...)
	idx := mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.OCIImageIndex),
		mutate.IndexAddendum{Add: amd, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "amd64"}}},
		mutate.IndexAddendum{Add: convtest.Image(t, "arm64", layers...), Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "arm64"}}},
	)
	idxDigest, err := idx.Digest()
	must(t, err)
	idxDesc := v1.Descriptor{MediaType: types.OCIImageIndex, Digest: idxDigest}
	want := publishedDiffIDs(t, amd)

	dir := t.TempDir()
	run := func(verity bool) []cache.Layer {
		t.Helper()
		c, err := cache.New(dir, cache.Options{Convert: convert.ImageOptions{TempDir: t.TempDir(), Jobs: 2}, DMVerity: verity, OverLower: true})
		must(t, err)
		defer c.Close()
		ls, err := c.Index(ctx, idx, idxDesc)
		must(t, err)
		if len(ls) != 2*len(want) {
			t.Fatalf("%d cache layers for 2 platforms of %d layers", len(ls), len(want))
		}
		// Both platforms have the same entries; one of them makes a
		// missing entry, and the other finds it made.
		n := len(want)
		for i := range n {
			a, b := ls[i], ls[n+i]
			if a.Path != b.Path || a.DMVerityRootHash != b.DMVerityRootHash || a.Size != b.Size || (!a.Cached && !b.Cached) {
				t.Errorf("layer %d: amd64 %+v, arm64 %+v", i, a, b)
			}
			if !b.Cached {
				ls[i] = b
			}
		}
		return ls[:n]
	}
	veritysetup, _ := exec.LookPath("veritysetup")
	// check: layer i's entry is convert's image and a tree its sidecar
	// describes; it returns the entry's bytes.
	check := func(i int, l cache.Layer) []byte {
		t.Helper()
		b, err := os.ReadFile(l.Path)
		must(t, err)
		m, err := dmverity.ReadSidecar(l.Path)
		if err != nil {
			t.Fatalf("layer %d: %v", i, err)
		}
		if m.RootHash != l.DMVerityRootHash || l.Size != int64(len(b)) {
			t.Errorf("layer %d: reported root hash %s and size %d; the sidecar says %s, the entry is %d bytes", i, l.DMVerityRootHash, l.Size, m.RootHash, len(b))
		}
		if m.HashOffset > uint64(len(b)) || convtest.SHA256(b[:m.HashOffset]) != want[i] {
			t.Errorf("layer %d: the entry up to the hash offset %d is not the image convert made", i, m.HashOffset)
		} else if err := dmverity.Verify(bytes.NewReader(b), m); err != nil {
			t.Errorf("layer %d: %v", i, err)
		}
		if veritysetup != "" {
			if out, err := exec.Command(veritysetup, "verify", fmt.Sprintf("--hash-offset=%d", m.HashOffset), l.Path, l.Path, m.RootHash).CombinedOutput(); err != nil {
				t.Errorf("layer %d: veritysetup verify: %v\n%s", i, err, out)
			}
		}
		return b
	}
	first := run(true)
	var entries [][]byte
	var paths []string
	for i, l := range first {
		if l.Cached {
			t.Errorf("layer %d cached before the first run", i)
		}
		entries = append(entries, check(i, l))
		paths = append(paths, l.Path)
	}
	if veritysetup == "" {
		t.Log("no veritysetup (Debian package cryptsetup-bin): trees checked by dmverity.Verify alone")
	}
	for i, l := range run(true) {
		if !l.Cached || l.DMVerityRootHash != first[i].DMVerityRootHash {
			t.Errorf("rerun: layer %d cached=%v root hash %q, want cached with %s", i, l.Cached, l.DMVerityRootHash, first[i].DMVerityRootHash)
		}
	}
	for i, l := range run(false) {
		if !l.Cached {
			t.Errorf("rerun without dm-verity: layer %d made again", i)
		}
	}

	// Without dm-verity, what does not match is made again, and made
	// without a tree: 0 has a tree but no sidecar (its size is no
	// image's), 2 a sidecar with another hash offset, 3 a tree cut short;
	// 1, its tree and sidecar removed, is a whole image.
	m1, err := dmverity.ReadSidecar(paths[1])
	must(t, err)
	must(t, os.Truncate(paths[1], int64(m1.HashOffset)))
	must(t, os.Remove(paths[0]+".dmverity"))
	must(t, os.Remove(paths[1]+".dmverity"))
	stale, err := dmverity.ReadSidecar(paths[2])
	must(t, err)
	stale.HashOffset += dmverity.BlockSize
	must(t, dmverity.WriteSidecar(paths[2], stale))
	must(t, os.Truncate(paths[3], int64(len(entries[3])-dmverity.BlockSize)))
	for i, l := range run(false) {
		if l.Cached != (i == 1) {
			t.Errorf("without dm-verity, after damage: layer %d cached=%v", i, l.Cached)
		}
		b, err := os.ReadFile(paths[i])
		must(t, err)
		if convtest.SHA256(b) != want[i] {
			t.Errorf("layer %d without dm-verity: not convert's image", i)
		}
		if _, err := os.Stat(paths[i] + ".dmverity"); err == nil {
			t.Errorf("layer %d: a sidecar beside an entry without a tree", i)
		}
	}
	// With dm-verity, entries without a sidecar are made again, with the
	// first run's bytes.
	for i, l := range run(true) {
		if l.Cached {
			t.Errorf("with dm-verity again: layer %d, which has no sidecar, cached", i)
		}
		if b := check(i, l); !bytes.Equal(b, entries[i]) {
			t.Errorf("layer %d: made again, %d bytes, not the first run's %d", i, len(b), len(entries[i]))
		}
	}
	// With dm-verity: a sidecar whose root hash is not the tree's (0), a
	// damaged top of the tree (1) are made again; a sidecar left without
	// its entry by a killed run goes.
	bad, err := dmverity.ReadSidecar(paths[0])
	must(t, err)
	bad.RootHash = strings.Repeat("ab", 32)
	must(t, dmverity.WriteSidecar(paths[0], bad))
	m1, err = dmverity.ReadSidecar(paths[1])
	must(t, err)
	top := int64(0) // one data block: no tree, the root is its digest
	if m1.HashOffset > dmverity.BlockSize {
		top = int64(m1.HashOffset) + dmverity.BlockSize
	}
	f, err := os.OpenFile(paths[1], os.O_RDWR, 0)
	must(t, err)
	_, err = f.WriteAt([]byte{0x5a}, top+9)
	must(t, err)
	must(t, f.Close())
	orphan := filepath.Join(filepath.Dir(paths[2]), strings.Repeat("0", 64)+".erofs.dmverity")
	must(t, os.WriteFile(orphan, []byte("{}"), 0o644))
	unlock, err := cache.Lock(ctx, dir, nil)
	must(t, err)
	for i, l := range run(true) {
		if l.Cached != (i >= 2) {
			t.Errorf("with dm-verity, after damage: layer %d cached=%v", i, l.Cached)
		}
		if b := check(i, l); !bytes.Equal(b, entries[i]) {
			t.Errorf("layer %d: %d bytes, not the first run's %d", i, len(b), len(entries[i]))
		}
	}
	unlock()
	if _, err := os.Stat(orphan); err == nil {
		t.Error("a sidecar without its entry is left")
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "sha256", "*", ".tmp-*")); len(left) != 0 {
		t.Errorf("temp files left: %v", left)
	}
	// The kernel mounts each entry, tree and all, and the stack is the
	// image's.
	convtest.CompareWithUmoci(t, amd, paths)

	// Images of 512-byte blocks have trees of 512-byte data blocks: a
	// dm-verity device has its data blocks as its logical blocks, and
	// EROFS mounts no image on a device of larger blocks than its own.
	small := t.TempDir()
	c, err := cache.New(small, cache.Options{Convert: convert.ImageOptions{TempDir: t.TempDir(), Layer: convert.Options{Erofs: erofs.Options{BlockSize: 512}}}, DMVerity: true, OverLower: true})
	must(t, err)
	defer c.Close()
	ls, err := c.Image(ctx, amd, convtest.SourceDescriptor(t, amd))
	must(t, err)
	var smallPaths []string
	for i, l := range ls {
		b, err := os.ReadFile(l.Path)
		must(t, err)
		m, err := dmverity.ReadSidecar(l.Path)
		must(t, err)
		if got := binary.LittleEndian.Uint32(b[m.HashOffset+64:]); got != 512 {
			t.Errorf("512-byte blocks, layer %d: the tree's data blocks are %d bytes", i, got)
		}
		if err := dmverity.Verify(bytes.NewReader(b), m); err != nil {
			t.Errorf("512-byte blocks, layer %d: %v", i, err)
		}
		if veritysetup != "" {
			if out, err := exec.Command(veritysetup, "verify", fmt.Sprintf("--hash-offset=%d", m.HashOffset), l.Path, l.Path, m.RootHash).CombinedOutput(); err != nil {
				t.Errorf("512-byte blocks, layer %d: veritysetup verify: %v\n%s", i, err, out)
			}
		}
		smallPaths = append(smallPaths, l.Path)
	}
	convtest.CompareWithUmoci(t, amd, smallPaths)
}

// publishedDiffIDs are the diff IDs of the EROFS layers convert publishes
// for img: what its cache entries must hold.
func publishedDiffIDs(t *testing.T, img v1.Image) []v1.Hash {
	t.Helper()
	conv, err := convert.NewConverter(convert.ImageOptions{TempDir: t.TempDir()})
	must(t, err)
	defer conv.Close()
	out, _, err := conv.Image(context.Background(), img, convtest.SourceDescriptor(t, img))
	must(t, err)
	cf, err := out.ConfigFile()
	must(t, err)
	return cf.RootFS.DiffIDs
}

// TestCacheAlone: by default an entry is made of its layer alone, as
// containerd's differ makes it: whichever image is cached first, the
// entry of a shared layer is the same, and an image cannot set the owner
// and mode of the directories the layer implies for another (review 20-a:
// an attacker's image cached first made /opt/app 0777, uid 1000, in the
// victim's containers). An entry an earlier version made over lower
// layers is made again.
func TestCacheAlone(t *testing.T) {
	ctx := context.Background()
	shared := convtest.Layer(t, convtest.File("opt/app/run.sh", 0o755, []byte("#!/bin/sh\n")))
	attacker := convtest.Image(t, "amd64", convtest.Layer(t, convtest.Dir(".", 0o755), convtest.Dir("opt", 0o777).Own(1000, 1000), convtest.Dir("opt/app", 0o777).Own(1000, 1000)), shared)
	victim := convtest.Image(t, "amd64", convtest.Layer(t, convtest.Dir(".", 0o755), convtest.Dir("opt", 0o755), convtest.Dir("opt/app", 0o755)), shared)
	fill := func(dir string, overLower bool, imgs ...v1.Image) []cache.Layer {
		t.Helper()
		var ls []cache.Layer
		for _, img := range imgs {
			c, err := cache.New(dir, cache.Options{Convert: convert.ImageOptions{TempDir: t.TempDir()}, OverLower: overLower})
			must(t, err)
			ls, err = c.Image(ctx, img, convtest.SourceDescriptor(t, img))
			must(t, err)
			c.Close()
		}
		return ls // the last image's
	}
	entry := func(ls []cache.Layer) v1.Hash {
		b, err := os.ReadFile(ls[1].Path)
		must(t, err)
		return convtest.SHA256(b)
	}
	first := fill(t.TempDir(), false, attacker, victim)
	second := fill(t.TempDir(), false, victim, attacker)
	if entry(first) != entry(second) {
		t.Errorf("the shared layer's entry depends on the image cached first: %s, %s", entry(first), entry(second))
	}
	if len(first[1].Warnings) != 0 {
		t.Errorf("warnings %q", first[1].Warnings)
	}
	// It is what convert makes of the layer alone.
	if alone := publishedDiffIDs(t, convtest.Image(t, "amd64", shared)); entry(first) != alone[0] {
		t.Errorf("entry %s, convert of the layer alone made %s", entry(first), alone[0])
	}
	// In the victim's stack, its own lower layer's /opt/app shows through
	// the implied one only as far as overlayfs merges: the mode and owner
	// are the entry's (root, 0755), never the attacker's.
	tree := convtest.TreeFromDir(t, convtest.MountStack(t, []string{first[0].Path, first[1].Path}))
	if m := convtest.ModeOf(t, tree, "opt/app"); m != 0o755 {
		t.Errorf("the victim's /opt/app: mode %#o, want 0755", m)
	}
	// An entry made over the attacker's layers (an earlier version's,
	// with its lower record) is made again of the layer alone.
	dir := t.TempDir()
	over := fill(dir, true, attacker)
	if _, err := os.Stat(over[1].Path + ".lower.json"); err != nil {
		t.Fatalf("an entry made over lower layers has no lower record: %v", err)
	}
	again := fill(dir, false, victim)
	if entry(again) != entry(first) {
		t.Errorf("the entry made over lower layers was kept: %s, want %s", entry(again), entry(first))
	}
	if raw, err := os.ReadFile(again[1].Path + ".lower.json"); err != nil || !strings.Contains(string(raw), `"alone":true`) {
		t.Errorf("its lower record is not one of a layer alone: %s %v", raw, err)
	}
	// OverLower takes the entry made alone, and says so.
	if ls := fill(dir, true, attacker); !ls[1].Cached || len(ls[1].Warnings) != 1 || !strings.Contains(ls[1].Warnings[0], "made with no layer below it") {
		t.Errorf("over lower layers, an entry made alone: cached %v, warnings %q", ls[1].Cached, ls[1].Warnings)
	}
	// But not for an image whose first layer it is: made alone or over
	// nothing, it is the same entry (review 20-d).
	base := convtest.Image(t, "amd64", shared)
	solo := t.TempDir()
	fill(solo, false, base)
	if ls := fill(solo, true, base); !ls[0].Cached || len(ls[0].Warnings) != 0 {
		t.Errorf("a first layer made alone, over lower layers: cached %v, warnings %q", ls[0].Cached, ls[0].Warnings)
	}
}

// TestCacheRootOpaque: a layer with an opaque marker on its root whites
// out what the layers below have at the root (overlayfs ignores the
// marker there). Its entry depends on them, and the lower record says
// so: reused over other lower layers, or made alone, it is reported.
func TestCacheRootOpaque(t *testing.T) {
	ctx := context.Background()
	top := convtest.Layer(t, convtest.Dir(".", 0o755), convtest.File("./.wh..wh..opq", 0, nil), convtest.File("c", 0o644, []byte("c\n"))) // implies nothing
	img := convtest.Image(t, "amd64", convtest.Layer(t, convtest.Dir(".", 0o755), convtest.File("a", 0o644, nil), convtest.Dir("b", 0o755), convtest.File("b/x", 0o644, nil)), top)
	other := convtest.Image(t, "amd64", convtest.Layer(t, convtest.Dir(".", 0o755), convtest.File("y", 0o644, nil)), top)
	fill := func(dir string, overLower bool, img v1.Image) []cache.Layer {
		t.Helper()
		c, err := cache.New(dir, cache.Options{Convert: convert.ImageOptions{TempDir: t.TempDir()}, OverLower: overLower})
		must(t, err)
		defer c.Close()
		ls, err := c.Image(ctx, img, convtest.SourceDescriptor(t, img))
		must(t, err)
		return ls
	}
	over := t.TempDir()
	ls := fill(over, true, img)
	tree := convtest.TreeFromDir(t, convtest.MountStack(t, []string{ls[0].Path, ls[1].Path}))
	for p, want := range map[string]bool{"a": false, "b": false, "b/x": false, "c": true} {
		if (tree.Node(p) != nil) != want {
			t.Errorf("over its lower layers: %s there: %v, want %v", p, tree.Node(p) != nil, want)
		}
	}
	if ls := fill(over, true, other); !ls[1].Cached || len(ls[1].Warnings) != 1 || !strings.Contains(ls[1].Warnings[0], "its opaque marker on the root whites out what they have at the root") {
		t.Errorf("reused over other lower layers: cached %v, warnings %q", ls[1].Cached, ls[1].Warnings)
	}
	alone := t.TempDir()
	if ls := fill(alone, false, img); len(ls[1].Warnings) != 1 || !strings.Contains(ls[1].Warnings[0], "an opaque marker on the root: overlayfs ignores it there") {
		t.Errorf("made alone: warnings %q", ls[1].Warnings)
	}
	if ls := fill(alone, true, img); !ls[1].Cached || len(ls[1].Warnings) != 1 || !strings.Contains(ls[1].Warnings[0], "hides nothing of this image's lower layers") {
		t.Errorf("made alone, reused over lower layers: cached %v, warnings %q", ls[1].Cached, ls[1].Warnings)
	}
}

// TestLockCacheRemoved: a run that made the cache directory and failed
// removes its lock file while it holds it; a run that waited for that lock
// takes a new one, so that a third run still waits (review 20-c: the
// waiter held a lock of a removed file, and the third ran beside it).
func TestLockCacheRemoved(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cache")
	unlockA, err := cache.Lock(context.Background(), dir, nil)
	must(t, err)
	gotB := make(chan func(), 1)
	bWaits := make(chan struct{})
	go func() {
		// Lock calls its wait once it finds the lock held.
		unlock, err := cache.Lock(context.Background(), dir, func() { close(bWaits) })
		if err != nil {
			t.Error(err)
			unlock = func() {}
		}
		gotB <- unlock
	}()
	select {
	case <-bWaits:
	case unlock := <-gotB:
		unlock()
		t.Fatal("B did not wait for the lock A holds")
	}
	must(t, os.Remove(filepath.Join(dir, cache.LockName)))
	unlockA()
	unlockB := <-gotB
	defer unlockB()
	ctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
	defer cancel()
	if unlockC, err := cache.Lock(ctx, dir, nil); err == nil {
		unlockC()
		t.Error("a third run took the lock while the second held it")
	}
}
