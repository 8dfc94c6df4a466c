package erofs

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// Kernel tests of compressed images at sizes the in-memory round trip does
// not reach, and of images made by Debian's mkfs.erofs.

// TestCompressedLayerTail is the layer on which mkfs.erofs 1.9.3 (lz4 fast,
// 64 KiB pclusters, tail packing and fragments) writes an image whose last
// bytes the kernel reads back as zeros while its fsck passes: a 40 MiB
// highly repetitive text beside random files and duplicates. The kernel
// reads every byte of every file here, the tails included.
func TestCompressedLayerTail(t *testing.T) {
	if why := noMount(); why != "" {
		t.Skip(why)
	}
	rnd := rand.New(rand.NewPCG(40, 2))
	random := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rnd.Uint32())
		}
		return b
	}
	var rep bytes.Buffer
	for i := 0; rep.Len() < 40<<20; i++ {
		fmt.Fprintf(&rep, "INFO request served path=/api/v1/items status=200 bytes=%d\n", i%10)
	}
	dup := random(300000)
	files := map[string][]byte{
		"rep.log":       rep.Bytes()[:40<<20+1234],
		"random-a":      random(3<<20 + 77),
		"random-b":      random(65536*3 + 1),
		"dup/one":       dup,
		"dup/two":       dup,
		"dup/three":     append(bytes.Clone(dup), "tail"...),
		"small-text":    []byte("a short file that goes into the packed inode\n"),
		"rep-tiny-tail": bytes.Repeat([]byte("z"), 65536*2+5),
	}
	// The optimal parser's levels too (its chain swap, the positions it
	// does not search), on 40 MiB of repetitive text.
	for _, lv := range []int{0, 9, 10, 11, 12} {
		cfg := zConfig{name: fmt.Sprintf("lz4-%d", lv), bs: 4096, c: Compression{Algorithm: AlgLZ4, Level: lv, PclusterSize: 65536, TailPacking: true, Fragments: true}}
		t.Run(cfg.name, func(t *testing.T) {
			raw := buildZ(t, cfg, files)
			img := openBytes(t, raw)
			for name, want := range files {
				got, err := img.ReadFile(name)
				if err != nil || !bytes.Equal(got, want) {
					t.Errorf("reader: %s: %d bytes (%v), first difference at %d", name, len(got), err, firstDiff(got, want))
				}
			}
			mountCompare(t, raw, files)
			t.Logf("%d bytes of files in an image of %d bytes", sumLen(files), len(raw))
		})
	}
}

func sumLen(files map[string][]byte) int {
	n := 0
	for _, d := range files {
		n += len(d)
	}
	return n
}

// gibSource streams a deterministic GiB: text with random patches, so
// that compressed and plain pclusters alternate, without holding it.
type gibSource struct {
	n, size int64
	rnd     *rand.Rand
	line    int
	buf     []byte
}

func (g *gibSource) Read(p []byte) (int, error) {
	if g.n >= g.size {
		return 0, io.EOF
	}
	if len(g.buf) == 0 {
		var b bytes.Buffer
		for b.Len() < 1<<20 {
			fmt.Fprintf(&b, "%08d func handler%d(w http.ResponseWriter) { w.Write(buf[%d:]) }\n", g.line, g.line%113, g.line%7)
			g.line++
		}
		g.buf = b.Bytes()
		if g.line%5 == 0 { // some incompressible stretches
			for i := 0; i < 40000; i++ {
				g.buf[i] = byte(g.rnd.Uint32())
			}
		}
	}
	n := copy(p, g.buf)
	if rest := g.size - g.n; int64(n) > rest {
		n = int(rest)
	}
	g.buf = g.buf[n:]
	g.n += int64(n)
	return n, nil
}

// TestCompressedGiB writes one 1 GiB file through the streaming Builder
// with lz4, mounts the image and compares the SHA-256 of what the kernel
// reads with that of the stream.
func TestCompressedGiB(t *testing.T) {
	if why := noMount(); why != "" {
		t.Skip(why)
	}
	const size = 1 << 30
	dir := t.TempDir()
	imgPath := filepath.Join(dir, "gib.erofs")
	f, err := os.Create(imgPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b, err := NewBuilder(f, Options{Compression: &Compression{Algorithm: AlgLZ4, PclusterSize: 65536, TailPacking: true}, TempDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	src := io.TeeReader(&gibSource{size: size, rnd: rand.New(rand.NewPCG(1, 1))}, h)
	if err := b.Add(Entry{Path: "big", Mode: S_IFREG | 0o644, Size: size}, src); err != nil {
		t.Fatal(err)
	}
	if err := b.Finish(); err != nil {
		t.Fatal(err)
	}
	want := h.Sum(nil)
	fi, _ := f.Stat()
	t.Logf("1 GiB file → image of %d bytes", fi.Size())
	if fi.Size() > size/2 {
		t.Errorf("image of %d bytes: the text did not compress", fi.Size())
	}

	mnt := filepath.Join(dir, "mnt")
	os.Mkdir(mnt, 0o755)
	if out, err := exec.Command("mount", "-t", "erofs", "-o", "loop,ro", imgPath, mnt).CombinedOutput(); err != nil {
		t.Fatalf("mount: %v: %s", err, out)
	}
	defer exec.Command("umount", mnt).Run()
	k, err := os.Open(filepath.Join(mnt, "big"))
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	kh := sha256.New()
	n, err := io.Copy(kh, k)
	if err != nil || n != size || !bytes.Equal(kh.Sum(nil), want) {
		t.Errorf("kernel read %d bytes (%v) with sha256 %x, want %d bytes with %x", n, err, kh.Sum(nil), int64(size), want)
	}
}

// TestDebianLZ4Images reads images that Debian's mkfs.erofs makes with
// -zlz4 and -zlz4hc (several pcluster sizes) with the package's reader and
// compares every file with the directory they were made from.
func TestDebianLZ4Images(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: no mkfs.erofs; make test runs it")
	}
	mkfs, err := exec.LookPath("mkfs.erofs")
	if err != nil {
		t.Skip("no mkfs.erofs (Debian package erofs-utils)")
	}
	src := t.TempDir()
	files := zInputs()
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(src, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, args := range [][]string{
		{"-zlz4"},
		{"-zlz4hc"},
		{"-zlz4hc,12", "-C65536"},
		{"-zlz4", "-C16384", "-Eztailpacking"},
		{"-zlz4hc,9", "-C1048576", "-Eztailpacking"},
	} {
		t.Run(fmt.Sprint(args), func(t *testing.T) {
			img := filepath.Join(t.TempDir(), "d.erofs")
			out, err := exec.Command(mkfs, append(append([]string{"--quiet"}, args...), img, src)...).CombinedOutput()
			if err != nil {
				t.Skipf("%s %v: %v: %s", mkfs, args, err, out)
			}
			raw, err := os.ReadFile(img)
			if err != nil {
				t.Fatal(err)
			}
			r := openBytes(t, raw)
			compressed := 0
			for name, want := range files {
				ino, err := r.Lstat(name)
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				if ino.Layout == LayoutCompressedCompact || ino.Layout == LayoutCompressedFull {
					compressed++
				}
				got, err := r.ReadFile(name)
				if err != nil || !bytes.Equal(got, want) {
					t.Errorf("%s: read %d bytes (%v), want %d; first difference at %d", name, len(got), err, len(want), firstDiff(got, want))
				}
			}
			if compressed < 5 {
				t.Errorf("only %d files of mkfs.erofs' image are compressed", compressed)
			}
		})
	}
}

// TestPclusterBlockLimits: with blocks under 4 KiB, pclusters are bounded
// in blocks, not bytes. An index counts at most 2047 blocks (2048 of 512
// bytes was written as 0: fsck and the kernel refused the file), and
// Linux refuses to mount lz4 images whose record allows more than 256
// blocks (257 of 1 KiB: "too large lz4 pclusterblks"). The options past
// the limits are refused; the largest allowed ones mount and read back.
func TestPclusterBlockLimits(t *testing.T) {
	for _, tc := range []struct {
		bs, pc int
		alg    Algorithm
		ok     bool
	}{
		{512, 1 << 20, AlgZstd, false},
		{512, 2047 * 512, AlgZstd, true},
		{1024, 1 << 20, AlgDeflate, true},
		{1024, 257 << 10, AlgLZ4, false},
		{1024, 256 << 10, AlgLZ4, true},
		{512, 129 << 10, AlgLZ4, false},
		{512, 128 << 10, AlgLZ4, true},
		{4096, 1 << 20, AlgLZ4, true},
	} {
		lv, _ := DefaultLevel(tc.alg)
		o := Options{BlockSize: tc.bs, Compression: &Compression{Algorithm: tc.alg, Level: lv, PclusterSize: tc.pc, MaxExtent: 12 << 20}}
		if err := o.Validate(); (err == nil) != tc.ok {
			t.Errorf("%s, %d-byte blocks, pcluster %d: %v", tc.alg, tc.bs, tc.pc, err)
		}
	}
	var text bytes.Buffer
	rnd := rand.New(rand.NewPCG(7, 7))
	words := []string{"foo ", "bar ", "bazinga ", "\n", "qux ", "lorem ipsum ", "42 "}
	for text.Len() < 6<<20 {
		text.WriteString(words[rnd.IntN(len(words))])
		text.WriteByte(byte('a' + rnd.IntN(26)))
	}
	files := map[string][]byte{"text6M": text.Bytes(), "small": []byte("hello\n")}
	for _, cfg := range []zConfig{
		{name: "zstd_bs512_pc2047", bs: 512, c: Compression{Algorithm: AlgZstd, Level: 3, PclusterSize: 2047 * 512, MaxExtent: 12 << 20}},
		{name: "lz4_bs1024_pc256k", bs: 1024, c: Compression{Algorithm: AlgLZ4, PclusterSize: 256 << 10, MaxExtent: 12 << 20}},
		{name: "lz4_bs512_pc128k", bs: 512, c: Compression{Algorithm: AlgLZ4, PclusterSize: 128 << 10, MaxExtent: 12 << 20}},
	} {
		t.Run(cfg.name, func(t *testing.T) {
			raw := buildZ(t, cfg, files)
			img := openBytes(t, raw)
			for name, want := range files {
				if got, err := img.ReadFile(name); err != nil || !bytes.Equal(got, want) {
					t.Errorf("reader: %s: %d bytes, %v", name, len(got), err)
				}
			}
			if noMount() == "" {
				mountCompare(t, raw, files)
			}
		})
	}
}

// TestTailFillsBlocks: a file's last extent whose compressed form ends in
// a partly filled block is stored as a pcluster of whole blocks, filled
// exactly, and the rest of its input inline. Files of many sizes from 4 to
// 64 KiB, of text that compresses to between one and several blocks,
// with lz4 and lz4hc, 64 KiB pclusters and tail packing; the kernel reads
// every byte. Some files must end that way: a compressed pcluster and
// then an inline tail.
func TestTailFillsBlocks(t *testing.T) {
	if why := noMount(); why != "" {
		t.Skip(why)
	}
	rnd := rand.New(rand.NewPCG(42, 7))
	words := []string{"struct", "inode", "return", "erofs", "block", "if (", "err", "0x", "static", "int", "};\n", "\t", "unsigned", "->", "NULL"}
	files := map[string][]byte{}
	for i, size := 0, 4096; size <= 65536; i, size = i+1, size+1237+i*97%2000 {
		var b bytes.Buffer
		for b.Len() < size {
			// Words and random hex numbers of up to three digits.
			fmt.Fprintf(&b, "%s %x ", words[rnd.IntN(len(words))], rnd.IntN(1<<(4*rnd.IntN(4))))
		}
		files[fmt.Sprintf("f%03d-%d", i, size)] = b.Bytes()[:size]
	}
	for _, lv := range []int{0, 9} {
		cfg := zConfig{name: fmt.Sprintf("lz4-%d", lv), bs: 4096, c: Compression{Algorithm: AlgLZ4, Level: lv, PclusterSize: 65536, TailPacking: true}}
		t.Run(cfg.name, func(t *testing.T) {
			raw := buildZ(t, cfg, files)
			img := openBytes(t, raw)
			filled := 0
			for name, want := range files {
				got, err := img.ReadFile(name)
				if err != nil || !bytes.Equal(got, want) {
					t.Fatalf("reader: %s: %d bytes (%v), first difference at %d", name, len(got), err, firstDiff(got, want))
				}
				ino, err := img.Lstat(name)
				if err != nil {
					t.Fatal(err)
				}
				var xs []Extent
				if err := img.Extents(ino, func(x Extent) error { xs = append(xs, x); return nil }); err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				// An inline tail is not block-aligned; the pcluster
				// before it is compressed.
				if n := len(xs); n >= 2 && (xs[n-1].Physical%4096 != 0 || xs[n-1].PhysLen%4096 != 0) && xs[n-2].PhysLen%4096 == 0 && xs[n-2].Length > xs[n-2].PhysLen {
					filled++
				}
			}
			if filled < len(files)/4 {
				t.Errorf("%d of %d files end in a filled pcluster and an inline tail", filled, len(files))
			}
			mountCompare(t, raw, files)
			t.Logf("%d files, %d bytes of files in an image of %d bytes; %d end in a filled pcluster and an inline tail", len(files), sumLen(files), len(raw), filled)
		})
	}
}
