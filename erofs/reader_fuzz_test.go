package erofs

import (
	"bytes"
	"fmt"
	"hash/fnv"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/ocierofs/ocierofs/internal/fuzzcorpus"
)

// FuzzReader feeds arbitrary bytes to the reader: Open, then everything a
// caller may do to every file, reading each from the start and at offsets
// drawn from a hash of the input (so a crasher replays). Errors are fine;
// panics, hangs and runaway allocations are not.
func FuzzReader(f *testing.F) {
	for _, name := range []string{"plain.img", "chunk.img", "blob.img"} {
		b, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	// The fixtures are mkfs.erofs 1.5's, lz4 at most: compressed images of
	// every codec and layout come from the Builder.
	for _, b := range compressedSeeds(f) {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r := bytes.NewReader(data)
		size := int64(len(data))
		img, err := Open(r, size)
		if err != nil {
			return
		}
		exerciseImage(img, data)
		// The same image with its extra devices read flat, and with the
		// image itself standing in for every extra device.
		if n := img.Super().ExtraDevices; n > 0 {
			if img, err := Open(r, size, WithFlatDevices()); err == nil {
				exerciseImage(img, data)
			}
			opts := make([]OpenOption, n)
			for i := range opts {
				opts[i] = WithDevice(r, size)
			}
			if img, err := Open(r, size, opts...); err == nil {
				exerciseImage(img, data)
			}
		}
	})
}

// compressedSeeds are small images of text, text with random bytes in it
// and tiny files, for each codec with compact and full indexes, big
// pclusters, tail packing, fragments and dedupe.
func compressedSeeds(t testing.TB) [][]byte {
	line := []byte("erofs pcluster lcluster nid diffID whiteout 0123456789\n")
	text := bytes.Repeat(line, 150)
	noise := make([]byte, 3000)
	for i := range noise {
		noise[i] = byte(i*131 + i*i/7)
	}
	files := map[string][]byte{
		"text":   text,
		"mixed":  append(append(bytes.Clone(text[:4500]), noise...), text[:3000]...),
		"short":  text[:600],
		"tiny":   []byte("tiny\n"),
		"d/copy": text,
	}
	var out [][]byte
	for _, alg := range []Algorithm{AlgLZ4, AlgLZMA, AlgDeflate, AlgZstd} {
		for _, c := range []Compression{{}, {FullIndexes: true}, {PclusterSize: 16384}, {TailPacking: true}, {Fragments: true}, {Dedupe: true}} {
			c.Algorithm = alg
			c.Level, _ = DefaultLevel(alg)
			out = append(out, buildFiles(t, Options{BlockSize: 4096, Compression: &c}, files))
		}
	}
	// lclusters smaller than the 12 bits of a compact entry's offset.
	for _, full := range []bool{false, true} {
		c := Compression{Algorithm: AlgLZ4, FullIndexes: full}
		out = append(out, buildFiles(t, Options{BlockSize: 512, Compression: &c}, files))
	}
	return out
}

// exerciseImage walks the whole tree and reads everything, within a budget:
// a crafted image may hold directories that share children, whose walk grows
// exponentially without any cycle. Each inode's data is read once (through
// its first path), which keeps hard-link farms cheap, and then at offsets
// drawn from a hash of data.
func exerciseImage(img *Image, data []byte) {
	h := fnv.New64a()
	h.Write(data)
	rng := rand.New(rand.NewPCG(h.Sum64(), 0))
	budget := 2000
	seen := make(map[uint64]bool)
	_ = fs.WalkDir(img, ".", func(p string, d fs.DirEntry, err error) error {
		if budget--; budget < 0 {
			return fs.SkipAll
		}
		if err != nil {
			return nil
		}
		if _, err := d.Info(); err != nil {
			return nil
		}
		ino, err := img.Lstat(p)
		if err != nil {
			return nil
		}
		_, _ = img.Stat(p)
		if seen[ino.Nid] {
			return nil
		}
		seen[ino.Nid] = true
		_, _ = img.Xattrs(p)
		_, _, _, _ = img.ChunkRefs(ino)
		_, _, _ = img.DataAddress(ino)
		n := 0
		_ = img.Extents(ino, func(Extent) error {
			if n++; n > 1000 {
				return io.EOF
			}
			return nil
		})
		if ino.IsSymlink() {
			_, _ = img.Readlink(p)
		}
		if ino.IsDir() {
			_, _ = img.ReadDirInode(ino)
		}
		if ino.Size <= 1<<16 {
			_, _ = img.ReadFile(p)
		}
		if f, err := img.Open(p); err == nil {
			// Bounded: a sparse file may claim terabytes.
			_, _ = io.CopyN(io.Discard, f, 1<<16)
			if ra, ok := f.(io.ReaderAt); ok {
				var b [100]byte
				_, _ = ra.ReadAt(b[:], ino.Size-50)
				_, _ = ra.ReadAt(b[:], ino.Size/2)
				readAtRandom(ra, ino.Size, img.Super().BlockSize, rng)
			}
			_ = f.Close()
		}
		return nil
	})
	// Walk and NextData, within a budget of their own.
	budget = 2000
	_ = img.Walk(".", func(p string, ino *Inode) error {
		if budget--; budget < 0 {
			return fs.SkipAll
		}
		if ino.IsRegular() {
			_, _ = img.NextData(ino, 0)
			_, _ = img.NextData(ino, ino.Size/2)
		}
		if ino.IsSymlink() {
			_, _ = img.ReadlinkInode(ino)
		}
		return nil
	})
	// Inodes nobody links to, at nids near the root's.
	root := img.Super().RootNid
	for nid := root; nid < root+64; nid++ {
		if ino, err := img.InodeAt(nid); err == nil {
			_, _ = img.InodeXattrs(ino)
			if dr, err := img.DataReader(ino); err == nil {
				_, _ = io.CopyN(io.Discard, dr, 1<<16)
			}
		}
	}
}

// readAtRandom reads ra at 8 offsets of a file of size bytes drawn from
// rng, in no order: anywhere, or next to a block boundary, where extents
// and chunks begin and end; 1 byte to two blocks each.
func readAtRandom(ra io.ReaderAt, size int64, bs int, rng *rand.Rand) {
	if size <= 0 || bs == 0 {
		return
	}
	buf := make([]byte, 2*bs)
	for range 8 {
		off := rng.Int64N(size + 1)
		if rng.IntN(2) == 0 {
			off = off&^int64(bs-1) + int64(rng.IntN(3)) - 1
		}
		_, _ = ra.ReadAt(buf[:1+rng.IntN(len(buf))], off)
	}
}

// tinyImage hand-assembles a 2 KiB image with 512-byte blocks (which
// mkfs.erofs 1.5 cannot make): the checksum then covers bytes 1024..1535.
// It also makes a quick fuzz seed.
//
//	/      compact FLAT_INLINE dir
//	c      CHUNK_BASED, block map [3]: "chunk data\n"
//	f      FLAT_INLINE "hi\n", xattr user.k=v, mtime epoch+5
//	l      symlink → f
//	x      char device 1:3
func tinyImage() []byte {
	const bs = 512
	img := make([]byte, 4*bs)
	sb := superBlock{
		Magic: SuperMagic, FeatureCompat: FeatureCompatSBChksum, BlkSzBits: 9,
		RootNid: 36, Inos: 5, Epoch: 1000, Blocks: 4,
		FeatureIncompat: FeatureIncompatChunkedFile,
	}
	inode := func(nid int, layout uint8, mode uint16, size uint32, u uint32, icount uint16, mtime uint32) int {
		b := img[nid*SlotSize:]
		le.PutUint16(b[0:], uint16(layout)<<1)
		le.PutUint16(b[2:], icount)
		le.PutUint16(b[4:], mode)
		le.PutUint16(b[6:], 1)
		le.PutUint32(b[8:], size)
		le.PutUint32(b[0x0C:], mtime)
		le.PutUint32(b[0x10:], u)
		return nid*SlotSize + CompactInodeSize + xattrAreaSize(icount)
	}
	// Root: dirents for ".", "..", "c", "f", "l", "x".
	names := []string{".", "..", "c", "f", "l", "x"}
	nids := []uint64{36, 36, 40, 42, 44, 46}
	types := []uint8{FTDir, FTDir, FTRegFile, FTRegFile, FTSymlink, FTChrdev}
	var dir []byte
	nameoff := DirentSize * len(names)
	for i := range names {
		de := make([]byte, DirentSize)
		le.PutUint64(de, nids[i])
		le.PutUint16(de[8:], uint16(nameoff))
		de[10] = types[i]
		dir = append(dir, de...)
		nameoff += len(names[i])
	}
	for _, n := range names {
		dir = append(dir, n...)
	}
	copy(img[inode(36, LayoutFlatInline, S_IFDIR|0o755, uint32(len(dir)), NullAddr, 0, 0):], dir)
	// c: one chunk of one block, block 3.
	off := inode(40, LayoutChunkBased, S_IFREG|0o644, 11, 0, 0, 0)
	le.PutUint32(img[off:], 3)
	copy(img[3*bs:], "chunk data\n")
	// f: inline xattr area (header + "user.k"="v"), then inline data.
	off = inode(42, LayoutFlatInline, S_IFREG|0o600, 3, NullAddr, 3, 5)
	copy(img[off-8:], []byte{1, XattrIndexUser, 1, 0, 'k', 'v', 0, 0})
	copy(img[off:], "hi\n")
	off = inode(44, LayoutFlatInline, S_IFLNK|0o777, 1, NullAddr, 0, 0)
	img[off] = 'f'
	inode(46, LayoutFlatPlain, S_IFCHR|0o644, 0, encodeDev(1, 3), 0, 0)
	sb.marshal(img[SuperOffset:])
	sb.Checksum = superChecksum(img, bs)
	sb.marshal(img[SuperOffset:])
	return img
}

// tinyVariants returns tinyImage and two broken versions: a directory that
// contains the root, and a symlink to itself.
func tinyVariants() map[string][]byte {
	cycle := tinyImage()
	le.PutUint64(cycle[1184+2*DirentSize:], 36) // "c" → the root
	cycle[1184+2*DirentSize+10] = FTDir
	loop := tinyImage()
	loop[44*SlotSize+CompactInodeSize] = 'l' // "l" → "l"
	return map[string][]byte{"tiny": tinyImage(), "tiny-cycle": cycle, "tiny-linkloop": loop}
}

func TestReaderTiny(t *testing.T) {
	v := tinyVariants()
	if _, err := openBytes(t, v["tiny-cycle"]).ReadDir("c"); err == nil || !strings.Contains(err.Error(), "ancestor") {
		t.Errorf("tiny-cycle: ReadDir(c) = %v", err)
	}
	if _, err := openBytes(t, v["tiny-linkloop"]).Stat("l"); err == nil || !strings.Contains(err.Error(), "too many levels") {
		t.Errorf("tiny-linkloop: Stat(l) = %v", err)
	}

	img := openBytes(t, tinyImage())
	if sb := img.Super(); !sb.ChecksumOK || sb.BlockSize != 512 {
		t.Errorf("Super = %+v", sb)
	}
	for name, want := range map[string]string{"c": "chunk data\n", "f": "hi\n", "l": "hi\n"} {
		if got, err := img.ReadFile(name); err != nil || string(got) != want {
			t.Errorf("ReadFile(%s) = %q, %v", name, got, err)
		}
	}
	if f, err := img.Lstat("f"); err != nil || !f.Mtime.Equal(time.Unix(1005, 0)) || f.Mode != S_IFREG|0o600 {
		t.Errorf("Lstat(f) = %+v, %v", f, err)
	}
	if xs, err := img.Xattrs("f"); err != nil || len(xs) != 1 || xs[0].Name != "user.k" || string(xs[0].Value) != "v" {
		t.Errorf("Xattrs(f) = %q, %v", xs, err)
	}
	if x, err := img.Lstat("x"); err != nil || x.Devmajor != 1 || x.Devminor != 3 {
		t.Errorf("Lstat(x) = %+v, %v", x, err)
	}
	if err := fstest.TestFS(img, "c", "f", "l", "x"); err != nil {
		t.Error(err)
	}
}

// TestReaderWriteSeeds regenerates the committed fuzz seeds when
// EROFS_WRITE_SEEDS=1.
func TestReaderWriteSeeds(t *testing.T) {
	if os.Getenv("EROFS_WRITE_SEEDS") != "1" {
		t.Skip("set EROFS_WRITE_SEEDS=1 to rewrite testdata/fuzz/FuzzReader seeds")
	}
	seeds := tinyVariants()
	seeds["plain-block0"] = readFixture(t, "plain.img")[:4096]
	seeds["chunk-block01"] = readFixture(t, "chunk.img")[:8192]
	// Extent dedupe: FULL indexes, PARTIAL_REF, shared pclusters.
	text := bytes.Repeat([]byte("the quick brown fox jumps over the lazy dog 0123456789\n"), 300)
	near := append(append(bytes.Clone(text[:7000]), "an insertion\n"...), text[7000:]...)
	seeds["zdedupe"] = buildFiles(t, Options{Compression: &Compression{Algorithm: AlgLZ4, PclusterSize: 4096, Dedupe: true}}, map[string][]byte{
		"a": text, "b": near, "c": text[:9000],
	})
	seeds["compact-clusterofs"] = compactClusterOfsImage(t)
	// A metadata-only image: device table, 8-byte chunk indexes.
	var blob memWriterAt
	seeds["blob-meta"] = buildFiles(t, Options{BlockSize: 512, Blob: &blob, Devices: []DeviceSlot{{Tag: "b"}}}, map[string][]byte{
		"a": bytes.Repeat([]byte("ab"), 700), "b": bytes.Repeat([]byte("ab"), 700), "z": make([]byte, 1500), "s": []byte("s"),
	})
	dir := filepath.Join("testdata", "fuzz", "FuzzReader")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, b := range seeds {
		data := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", b)
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestReaderCorruptOffsets reads FuzzReader's crashers at every block
// boundary of file b and one byte either side, from its end down: its
// first extent (bytes 0..4095) reads, and each offset after fails with an
// error naming its inode, never a panic. In these two, b's lookback from
// lcluster 2 passes the HEAD at lcluster 1, and lcluster 1's extent is
// longer than its block.
func TestReaderCorruptOffsets(t *testing.T) {
	for _, name := range []string{"FuzzReader_7abe3a1c4c058695", "FuzzReader_8a8a20cad216875c"} {
		vals, err := fuzzcorpus.Values(filepath.Join("testdata", "fuzz", "FuzzReader", name))
		if err != nil {
			t.Fatal(err)
		}
		img := openBytes(t, vals[0])
		ino, err := img.Lstat("b")
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		f, err := img.Open("b")
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		ra := f.(io.ReaderAt)
		for blk := ino.Size &^ 4095; blk >= 0; blk -= 4096 {
			for _, off := range []int64{blk + 1, blk, blk - 1} {
				var b [1]byte
				n, err := ra.ReadAt(b[:], off)
				var want string
				switch {
				case off < 0:
					continue
				case off < 4096:
					if n != 1 || err != nil {
						t.Errorf("%s: ReadAt(b, %d) = %d, %v; the first extent reads", name, off, n, err)
					}
					continue
				case off < 8192:
					want = fmt.Sprintf("nid %d: lcluster 1: plain extent", ino.Nid)
				default:
					want = fmt.Sprintf("nid %d: lcluster 0: extent 0..4096 ends before offset %d", ino.Nid, off)
				}
				if n != 0 || err == nil || !strings.Contains(err.Error(), want) {
					t.Errorf("%s: ReadAt(b, %d) = %d, %v; want %q", name, off, n, err, want)
				}
			}
		}
		// And every file of the image, read through and at random.
		exerciseImage(img, vals[0])
	}
}

// compactClusterOfsImage is a 512-byte-block image with one lz4 file, f,
// whose compact index says: lcluster 0 is a PLAIN HEAD at cluster offset
// 4000 (the 12 bits of a compact entry hold it; a 512-byte lcluster
// cannot), lclusters 1-7 look back to it, 8 is a HEAD at 100, the rest
// look back to 8. A read at 600 maps to an extent 4000..4196.
func compactClusterOfsImage(t testing.TB) []byte {
	text := bytes.Repeat([]byte("erofs pcluster lcluster nid diffID whiteout 0123456789\n"), 150)
	b := buildFiles(t, Options{BlockSize: 512, Compression: &Compression{Algorithm: AlgLZ4, FullIndexes: true}}, map[string][]byte{"f": text})
	img := openBytes(t, b)
	ino, err := img.Lstat("f")
	if err != nil {
		t.Fatal(err)
	}
	// The same map header, with a compact index of 4-byte entries (two a
	// pack, then the pack's block address) where the full one was.
	iloc := img.meta + int64(ino.Nid)*SlotSize
	le.PutUint16(b[iloc:], le.Uint16(b[iloc:])&^(7<<1)|LayoutCompressedCompact<<1)
	ebase := (ino.tailOff()+7)&^7 + 8
	total := (ino.Size + 511) / 512
	for lcn := range total {
		pos := ebase + 4*lcn
		lo, typ := uint16(lcn-8), uint16(lclusterNonhead)
		switch {
		case lcn == 0:
			lo, typ = 4000, lclusterPlain
		case lcn == 8:
			lo, typ = 100, lclusterHead1
		case lcn < 8:
			lo = uint16(lcn)
		}
		le.PutUint16(b[pos&^7+(pos&7)/2:], lo|typ<<12)
	}
	return b
}

// TestReaderCompactClusterOfs: a compact index entry's cluster offset past
// its lcluster is refused, as a full index's is; it started an extent
// after the offset read, which ReadAt then sliced at a negative index.
func TestReaderCompactClusterOfs(t *testing.T) {
	b := compactClusterOfsImage(t)
	img := openBytes(t, b)
	f, err := img.Open("f")
	if err != nil {
		t.Fatal(err)
	}
	for _, off := range []int64{600, 0, 4100} {
		var x [1]byte
		n, err := f.(io.ReaderAt).ReadAt(x[:], off)
		if want := "lcluster 0: cluster offset 4000"; n != 0 || err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ReadAt(f, %d) = %d, %v; want %q", off, n, err, want)
		}
	}
	exerciseImage(img, b)
}
