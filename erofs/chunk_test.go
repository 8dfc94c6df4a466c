package erofs

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	goerofs "github.com/erofs/go-erofs"
)

// chunkFiles is a tree full of duplicates at chunk granularity: the same
// files under many names, files sharing chunks at different offsets, a
// file repeating itself, sparse files, shared partial last chunks and
// near-copies that must stay apart. unit is the smallest chunk size the
// tests use, so pieces line up with chunks of every tested size.
func chunkFiles(unit int) map[string][]byte {
	rnd := rand.New(rand.NewPCG(11, 3))
	random := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rnd.Uint32())
		}
		return b
	}
	p := make([][]byte, 8) // pieces, one chunk each
	for i := range p {
		p[i] = random(unit)
	}
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	zeros := make([]byte, 3*unit)
	tail := random(unit/3 + 5)
	files := map[string][]byte{
		"a/one":        cat(p[0], p[1], p[2], p[3]),
		"b/shifted":    cat(p[5], p[0], p[1], p[6], p[3]),         // shares p0, p1, p3 at other offsets
		"b/repeats":    cat(p[4], p[4], p[4], p[7], p[4], tail),   // repeats itself, shares its tail
		"c/sparse":     cat(zeros, p[2], zeros, p[6], zeros[:17]), // holes, and a partial last chunk
		"c/allzero":    make([]byte, 5*unit+100),
		"d/tail-twin":  cat(p[7], tail),
		"d/near":       cat(p[0], p[1], p[2], p[3][:unit-1], []byte{^p[3][unit-1]}),
		"d/unique":     random(6*unit + 1234), // nothing shared: flat, its tail inline
		"d/blocks":     random(6 * unit),      // nothing shared, no tail: one chunk
		"e/small":      []byte("smaller than a chunk\n"),
		"e/small-twin": []byte("smaller than a chunk\n"),
	}
	for i := range 5 {
		files[fmt.Sprintf("copies/%d", i)] = files["a/one"]
	}
	// Copies of a file chunking found nothing in (stored flat, its tail
	// inline): past three copies the tail moves to a shared block.
	for i := range 4 {
		files[fmt.Sprintf("d/unique-copy%d", i)] = files["d/unique"]
	}
	return files
}

// distinctChunkBytes is what chunk dedupe must store: the distinct
// non-zero chunks of size cs, each rounded up to a block, of the files
// stored chunk-based (those of at least cs bytes, or all).
func distinctChunkBytes(files map[string][]byte, cs, bs int, all bool) int {
	seen := map[[32]byte]bool{}
	n := 0
	for _, data := range files {
		if len(data) < cs && !all {
			continue
		}
		for off := 0; off < len(data); off += cs {
			c := data[off:min(off+cs, len(data))]
			k := sha256.Sum256(c)
			if isZero(c) || seen[k] {
				continue
			}
			seen[k] = true
			n += (len(c) + bs - 1) / bs * bs
		}
	}
	return n
}

// buildFiles builds an image of regular files, in name order.
func buildFiles(t testing.TB, opt Options, files map[string][]byte) []byte {
	t.Helper()
	var img memWriterAt
	opt.TempDir = t.TempDir()
	b, err := NewBuilder(&img, opt)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for _, name := range sortedKeys(files) {
		data := files[name]
		if err := b.Add(Entry{Path: name, Mode: S_IFREG | 0o644, Size: int64(len(data))}, bytes.NewReader(data)); err != nil {
			t.Fatalf("Add %s: %v", name, err)
		}
	}
	if err := b.Finish(); err != nil {
		t.Fatalf("Finish: %v", err)
	}
	return img.b
}

// TestChunkDedupe builds the tree chunk-based for several chunk sizes
// (including one above the 1 MiB read buffer, which writes and rewinds)
// and checks that every distinct chunk is stored once and nothing else,
// that files with nothing shared get one index entry, that the image is
// reproducible, and that our reader, go-erofs, fsck.erofs and the kernel
// read every file back.
func TestChunkDedupe(t *testing.T) {
	for _, tc := range []struct{ unit, chunk int }{
		{4096, 4096}, {65536, 65536}, {65536, 16384}, {2 << 20, 2 << 20},
	} {
		t.Run(fmt.Sprintf("unit%d/chunk%d", tc.unit, tc.chunk), func(t *testing.T) {
			files := chunkFiles(tc.unit)
			raw := buildFiles(t, Options{ChunkSize: tc.chunk}, files)
			if again := buildFiles(t, Options{ChunkSize: tc.chunk}, files); !bytes.Equal(raw, again) {
				t.Fatal("two builds of the same tree differ")
			}
			plain := buildFiles(t, Options{NoDedupe: true}, files)
			want := distinctChunkBytes(files, tc.chunk, 4096, false)
			// Metadata and the small files are a few blocks here; an inline
			// tail saves a block.
			if slack := 16 * 4096; len(raw) < want-len(files)*4096 || len(raw) > want+slack {
				t.Errorf("image of %d bytes; distinct chunks are %d bytes (+ at most %d of metadata)", len(raw), want, slack)
			}
			t.Logf("chunk %d: image %d bytes, without dedupe %d, distinct chunk data %d", tc.chunk, len(raw), len(plain), want)
			img := openBytes(t, raw)
			checkFiles(t, "reader", img, files)
			if ino, err := img.Lstat("d/blocks"); err != nil || ino.Layout != LayoutChunkBased {
				t.Errorf("d/blocks: %v, layout %v", err, ino)
			} else if d, err := img.chunkReader(ino); err != nil || d.count != 1 {
				t.Errorf("d/blocks: %d index entries, want 1 (widened): %v", d.count, err)
			}
			// d/unique shares nothing with other content: it was stored flat
			// with its tail inline, until its copies moved the tail to a
			// block that all five share (FLAT_PLAIN when that block came
			// right after its data, else chunk-based).
			type where struct {
				layout uint8
				start  uint64
				refs   string
			}
			var first where
			for i, name := range []string{"d/unique", "d/unique-copy0", "d/unique-copy3"} {
				ino, err := img.Lstat(name)
				if err != nil || ino.Layout == LayoutFlatInline {
					t.Fatalf("%s: %v, layout %v: want its tail in a shared block", name, err, ino)
				}
				_, refs, _, err := img.ChunkRefs(ino)
				if err != nil {
					t.Fatal(err)
				}
				w := where{ino.Layout, ino.StartBlock(), fmt.Sprint(refs)}
				if i == 0 {
					first = w
				} else if w != first {
					t.Errorf("%s: stored at %+v, d/unique at %+v", name, w, first)
				}
			}
			if ino, err := img.Lstat("c/sparse"); err == nil {
				if d, err := img.chunkReader(ino); err != nil || d.count < 3 {
					t.Errorf("c/sparse: %d index entries, want holes between chunks: %v", d.count, err)
				}
			}
			path := filepath.Join(t.TempDir(), "c.erofs")
			if err := os.WriteFile(path, raw, 0o644); err != nil {
				t.Fatal(err)
			}
			goErofsCompare(t, path, files)
			fsckErofs(t, path)
			kernelCompare(t, path, nil, files)
		})
	}
}

// TestChunkBlob puts the chunk data in a blob (extra device 1): the image
// is metadata only; the kernel mounts it with -o device=BLOB and, flat,
// as the image and the blob concatenated.
func TestChunkBlob(t *testing.T) {
	files := chunkFiles(4096)
	var blob memWriterAt
	raw := buildFiles(t, Options{ChunkSize: 16384, Blob: &blob, Devices: []DeviceSlot{{Tag: "layer.blob"}}}, files)
	// The small files go to the blob too; dedupe still finds their twins.
	want := distinctChunkBytes(files, 16384, 4096, true)
	if len(blob.b) != want {
		t.Errorf("blob of %d bytes; distinct chunk data is %d", len(blob.b), want)
	}
	img := openBytes(t, raw, WithDevice(bytes.NewReader(blob.b), int64(len(blob.b))))
	checkFiles(t, "reader", img, files)
	devs := img.Devices()
	if len(devs) != 1 || devs[0].Tag != "layer.blob" || devs[0].Blocks != uint64(len(blob.b)/4096) || devs[0].UniAddr != uint64(len(raw)/4096) {
		t.Errorf("device table %+v; want tag layer.blob, %d blocks at %d", devs, len(blob.b)/4096, len(raw)/4096)
	}
	flat := append(bytes.Clone(raw), blob.b...)
	checkFiles(t, "reader, flat", openBytes(t, flat, WithFlatDevices()), files)

	dir := t.TempDir()
	meta, blobPath, flatPath := filepath.Join(dir, "meta.erofs"), filepath.Join(dir, "layer.blob"), filepath.Join(dir, "flat.erofs")
	for p, b := range map[string][]byte{meta: raw, blobPath: blob.b, flatPath: flat} {
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	kernelCompare(t, meta, []string{blobPath}, files)
	kernelCompare(t, flatPath, nil, files)
}

// TestChunkRefs builds files from chunks already stored on an extra
// device, as a tar index and a merged image do, and checks the argument
// checks.
func TestChunkRefs(t *testing.T) {
	dev := bytes.Repeat([]byte("0123456789abcdef"), 4*4096/16)
	for i := range dev {
		dev[i] ^= byte(i / 4096)
	}
	var img memWriterAt
	b, err := NewBuilder(&img, Options{Devices: []DeviceSlot{{Tag: "dev", Blocks: 4}}})
	if err != nil {
		t.Fatal(err)
	}
	e := Entry{Path: "f", Mode: S_IFREG | 0o600, Size: 2*4096 + 10}
	// Chunks of 8 KiB: blocks 2–3, then block 0 for the last 10 bytes.
	if err := b.AddChunks(e, 1, []ChunkRef{{Device: 1, Block: 2}, {Device: 1, Block: 0}}); err != nil {
		t.Fatal(err)
	}
	h := Entry{Path: "holes", Mode: S_IFREG | 0o600, Size: 3 * 4096}
	if err := b.AddChunks(h, 0, []ChunkRef{{Hole: true}, {Device: 1, Block: 1}, {Hole: true}}); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []struct {
		e    Entry
		bits uint8
		refs []ChunkRef
	}{
		{e, 1, []ChunkRef{{Device: 1, Block: 2}}},                        // too few refs
		{e, 1, []ChunkRef{{Device: 2, Block: 0}, {Device: 1}}},           // no such device
		{e, 1, []ChunkRef{{Device: 1, Block: 3}, {Device: 1, Block: 0}}}, // beyond the device
		{Entry{Path: "d", Mode: S_IFDIR | 0o755}, 0, nil},
	} {
		if err := b.AddChunks(bad.e, bad.bits, bad.refs); err == nil {
			t.Errorf("AddChunks(%q, %d, %v) accepted", bad.e.Path, bad.bits, bad.refs)
		}
	}
	if err := b.Finish(); err != nil {
		t.Fatal(err)
	}
	want := map[string][]byte{
		"f":     append(bytes.Clone(dev[2*4096:4*4096]), dev[:10]...),
		"holes": append(append(make([]byte, 4096), dev[4096:2*4096]...), make([]byte, 4096)...),
	}
	checkFiles(t, "reader", openBytes(t, img.b, WithDevice(bytes.NewReader(dev), int64(len(dev)))), want)
	dir := t.TempDir()
	meta, devPath := filepath.Join(dir, "meta.erofs"), filepath.Join(dir, "dev")
	os.WriteFile(meta, img.b, 0o644)
	os.WriteFile(devPath, dev, 0o644)
	kernelCompare(t, meta, []string{devPath}, want)
}

func TestChunkOptions(t *testing.T) {
	for _, o := range []Options{
		{ChunkSize: 1000},
		{ChunkSize: 2048},
		{ChunkSize: 8192, Compression: &Compression{Algorithm: AlgLZ4}},
		{Blob: &memWriterAt{}, Compression: &Compression{Algorithm: AlgLZ4}},
		{ChunkSize: 8192, MinKernel: Kernel{5, 10}},
		{Blob: &memWriterAt{}, MinKernel: Kernel{5, 15}},
		{Devices: []DeviceSlot{{Tag: strings.Repeat("x", 65)}}},
	} {
		if err := o.Validate(); err == nil {
			t.Errorf("%+v: accepted", o)
		}
	}
}

func checkFiles(t *testing.T, who string, img *Image, files map[string][]byte) {
	t.Helper()
	for name, want := range files {
		got, err := img.ReadFile(name)
		if err != nil {
			t.Errorf("%s: %s: %v", who, name, err)
		} else if !bytes.Equal(got, want) {
			t.Errorf("%s: %s: %d bytes differ from the %d written (first at %d)", who, name, len(got), len(want), firstDiff(got, want))
		}
	}
}

// goErofsCompare reads every file with github.com/erofs/go-erofs.
func goErofsCompare(t *testing.T, path string, files map[string][]byte) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fsys, err := goerofs.Open(f)
	if err != nil {
		t.Fatalf("go-erofs: %v", err)
	}
	for name, want := range files {
		got, err := fs.ReadFile(fsys, name)
		if err != nil {
			t.Errorf("go-erofs: %s: %v", name, err)
		} else if !bytes.Equal(got, want) {
			t.Errorf("go-erofs: %s: differs from what was written (first at %d)", name, firstDiff(got, want))
		}
	}
}

// fsckErofs runs Debian's fsck.erofs with --extract, which reads every
// byte, where it is installed.
func fsckErofs(t *testing.T, path string) {
	t.Helper()
	if testing.Short() {
		t.Log("fsck.erofs skipped: -short: no fsck.erofs; make test runs it")
		return
	}
	if _, err := exec.LookPath("fsck.erofs"); err != nil {
		t.Log("no fsck.erofs: skipped")
		return
	}
	out := filepath.Join(t.TempDir(), "x")
	if b, err := exec.Command("fsck.erofs", "--extract="+out, path).CombinedOutput(); err != nil {
		t.Errorf("fsck.erofs: %v\n%s", err, b)
	}
}

// kernelCompare mounts the image (loop, ro) with its extra devices, each
// on a loop device of its own (the kernel opens device= as a block
// device), and compares every file as the kernel reads it; it skips when
// this machine cannot mount.
func kernelCompare(t *testing.T, path string, devices []string, files map[string][]byte) {
	t.Helper()
	if why := noMount(); why != "" {
		t.Log("kernel round trip skipped: " + why)
		return
	}
	o := "loop,ro"
	for _, d := range devices {
		out, err := exec.Command("losetup", "--find", "--show", "--read-only", d).Output()
		if err != nil {
			t.Fatalf("losetup %s: %v", d, err)
		}
		loop := strings.TrimSpace(string(out))
		defer exec.Command("losetup", "-d", loop).Run()
		o += ",device=" + loop
	}
	mnt := t.TempDir()
	if out, err := exec.Command("mount", "-t", "erofs", "-o", o, path, mnt).CombinedOutput(); err != nil {
		dmesg, _ := exec.Command("sh", "-c", "dmesg | tail -5").Output()
		t.Fatalf("mount -o %s: %v: %s\n%s", o, err, out, dmesg)
	}
	defer exec.Command("umount", mnt).Run()
	for name, want := range files {
		got, err := os.ReadFile(filepath.Join(mnt, name))
		if err != nil {
			t.Errorf("kernel: %s: %v", name, err)
		} else if !bytes.Equal(got, want) {
			t.Errorf("kernel: %s: %d bytes differ from the %d written (first at %d)", name, len(got), len(want), firstDiff(got, want))
		}
	}
}

// countingWriterAt discards what is written, remembering the end.
type countingWriterAt struct{ end int64 }

func (c *countingWriterAt) WriteAt(p []byte, off int64) (int, error) {
	c.end = max(c.end, off+int64(len(p)))
	return len(p), nil
}

// randomReader yields ChaCha8 bytes: every 512-byte chunk distinct.
type randomReader struct{ r *rand.ChaCha8 }

func (r randomReader) Read(p []byte) (int, error) { return r.r.Read(p) }

// TestChunkTableMemory measures what the chunk table costs per distinct
// chunk, with 200,000 distinct 512-byte chunks streamed through one file:
// memory grows with the chunks, not with the data.
func TestChunkTableMemory(t *testing.T) {
	const n = 200_000
	var out countingWriterAt
	b, err := NewBuilder(&out, Options{BlockSize: 512, ChunkSize: 512, TempDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	var before, after runtime.MemStats
	// Twice: what the finalizers of earlier tests' objects held, freed by
	// the second cycle, must not be freed while the table is measured.
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&before)
	src := randomReader{rand.NewChaCha8([32]byte{9})}
	if err := b.Add(Entry{Path: "f", Mode: S_IFREG | 0o644, Size: n * 512}, src); err != nil {
		t.Fatal(err)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	// Signed: what an earlier test left behind may be freed meanwhile.
	per := float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / n
	t.Logf("chunk table: %.1f bytes per distinct chunk (%d chunks, %d MB of data)", per, n, n*512>>20)
	if b.chunks.len() != n {
		t.Fatalf("%d chunks in the table, want %d", b.chunks.len(), n)
	}
	// A 32-byte entry and a 4-byte index slot, the index at most 3/4 and
	// at least 3/8 full, a slab partly filled.
	if per > 48 {
		t.Errorf("%.1f bytes per distinct chunk", per)
	}
	if err := b.Finish(); err != nil {
		t.Fatal(err)
	}
}

// TestChunkTable: keys that share their index bits (the first 8 bytes)
// stay apart, lookups find every key added and none that was not, across
// index growth.
func TestChunkTable(t *testing.T) {
	var tab chunkTable
	key := func(i int, same bool) chunkKey {
		var k chunkKey
		if !same {
			binary.LittleEndian.PutUint64(k[:8], uint64(i)*0x9E3779B97F4A7C15)
		}
		binary.LittleEndian.PutUint32(k[20:], uint32(i))
		return k
	}
	const n = 5000
	for i := range n {
		k := key(i, i%2 == 0) // even keys all probe from the same slot
		if _, ok := tab.lookup(&k); ok {
			t.Fatalf("key %d found before it was added", i)
		}
		tab.add(&k, chunkLoc{uint16(i % 3), uint32(i)})
	}
	for i := range 2 * n {
		k := key(i, i%2 == 0)
		loc, ok := tab.lookup(&k)
		if ok != (i < n) || ok && (loc.blk != uint32(i) || loc.dev != uint16(i%3)) {
			t.Fatalf("key %d: %+v, %v", i, loc, ok)
		}
	}
}

// TestKnownChunk: chunks equal to a dictionary's refer to its device and
// are not written to the blob; the image reads back whole.
func TestKnownChunk(t *testing.T) {
	dict := bytes.Repeat([]byte{7}, 3*4096)
	copy(dict[4096:], "a chunk the layer below holds")
	known := dict[4096 : 2*4096]
	var blob, img memWriterAt
	opt := Options{Blob: &blob, Devices: []DeviceSlot{{Tag: "blob"}, {Tag: "dict", Blocks: 3}}}
	b, err := NewBuilder(&img, opt)
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []struct {
		data []byte
		dev  uint16
	}{{known, 1}, {known, 3}, {nil, 2}, {make([]byte, 4097), 2}} {
		if err := b.KnownChunk(bad.data, bad.dev, 1); err == nil {
			t.Errorf("KnownChunk(%d bytes, device %d) accepted", len(bad.data), bad.dev)
		}
	}
	if err := b.KnownChunk(known, 2, 1); err != nil {
		t.Fatal(err)
	}
	own := bytes.Repeat([]byte("own data "), 456)[:4096]
	data := append(append(bytes.Clone(known), own...), known...)
	if err := b.Add(Entry{Path: "f", Mode: S_IFREG | 0o644, Size: int64(len(data))}, bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	if err := b.Finish(); err != nil {
		t.Fatal(err)
	}
	if len(blob.b) != 4096 {
		t.Errorf("blob of %d bytes, want only the chunk the dictionary lacks", len(blob.b))
	}
	r := openBytes(t, img.b, WithDevice(bytes.NewReader(blob.b), int64(len(blob.b))), WithDevice(bytes.NewReader(dict), int64(len(dict))))
	checkFiles(t, "reader", r, map[string][]byte{"f": data})
	ino, _ := r.Lstat("f")
	if _, refs, _, err := r.ChunkRefs(ino); err != nil || len(refs) != 3 || refs[0] != (ChunkRef{Device: 2, Block: 1}) || refs[2] != refs[0] || refs[1].Device != 1 {
		t.Errorf("chunk refs %+v (%v)", refs, err)
	}
}

// A device of unknown size (a tar index read from a stream) is sized once
// the input is read: not smaller than its chunks reach.
func TestSetDeviceBlocks(t *testing.T) {
	var img memWriterAt
	b, err := NewBuilder(&img, Options{Devices: []DeviceSlot{{}}})
	if err != nil {
		t.Fatal(err)
	}
	e := Entry{Path: "f", Mode: S_IFREG | 0o600, Size: 2*4096 + 10}
	if err := b.AddChunks(e, 2, []ChunkRef{{Device: 1, Block: 5}}); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []struct {
		dev    int
		blocks uint64
	}{{1, 7}, {2, 100}, {0, 100}, {1, 1 << 32}} {
		if err := b.SetDeviceBlocks(bad.dev, bad.blocks); err == nil {
			t.Errorf("SetDeviceBlocks(%d, %d) accepted (the chunk ends at block 8)", bad.dev, bad.blocks)
		}
	}
	if err := b.SetDeviceBlocks(1, 8); err != nil {
		t.Fatal(err)
	}
	if err := b.Finish(); err != nil {
		t.Fatal(err)
	}
	im := openBytes(t, img.b, WithDevice(bytes.NewReader(make([]byte, 8*4096)), 8*4096))
	if d := im.Devices(); len(d) != 1 || d[0].Blocks != 8 {
		t.Errorf("device table %+v, want one device of 8 blocks", d)
	}
}

// -Eforce-inode-extended, -T and $SOURCE_DATE_EPOCH, as the Builder has them.
func TestInodeTimesAndForm(t *testing.T) {
	if err := (&Options{FixedMtime: true}).Validate(); err == nil {
		t.Error("FixedMtime without a build time accepted")
	}
	build := time.Unix(1_600_000_000, 0)
	early, late := build.Add(-time.Hour), build.Add(time.Hour+time.Millisecond)
	for _, tc := range []struct {
		opt         Options
		early, late time.Time
		compact     bool // every inode (all of one mtime) is compact
	}{
		{Options{BuildTime: build}, early, late, false},
		{Options{BuildTime: build, FixedMtime: true}, build, build, true},
		{Options{BuildTime: build, ClampMtime: true}, early, build, false},
		{Options{BuildTime: build, FixedMtime: true, ExtendedInodes: true}, build, build, false},
	} {
		var img memWriterAt
		b, err := NewBuilder(&img, tc.opt)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range []Entry{
			{Path: "early", Mode: S_IFREG | 0o644, Mtime: early},
			{Path: "late", Mode: S_IFREG | 0o644, Mtime: late},
		} {
			if err := b.Add(e, nil); err != nil {
				t.Fatal(err)
			}
		}
		if err := b.Finish(); err != nil {
			t.Fatal(err)
		}
		im := openBytes(t, img.b)
		for name, want := range map[string]time.Time{"early": tc.early, "late": tc.late} {
			fi, err := im.Lstat(name)
			if err != nil {
				t.Fatal(err)
			}
			if !fi.Mtime.Equal(want) {
				t.Errorf("%+v: %s mtime %v, want %v", tc.opt, name, fi.Mtime, want)
			}
			if tc.compact != fi.Compact && (tc.compact || tc.opt.ExtendedInodes) {
				t.Errorf("%+v: %s compact %v, want %v", tc.opt, name, fi.Compact, tc.compact)
			}
		}
		if root := im.Root(); tc.compact != root.Compact && (tc.compact || tc.opt.ExtendedInodes) {
			t.Errorf("%+v: root compact %v, want %v", tc.opt, root.Compact, tc.compact)
		}
	}
}
