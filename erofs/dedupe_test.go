package erofs

import (
	"bytes"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// dupFiles holds contents repeated under several names: short files (inline
// tails), a file of whole blocks, a big one spanning compression segments,
// and near-duplicates that must not be shared.
func dupFiles() map[string][]byte {
	rnd := rand.New(rand.NewPCG(7, 7))
	random := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rnd.Uint32())
		}
		return b
	}
	var text bytes.Buffer
	for i := 0; text.Len() < 9<<20; i++ {
		fmt.Fprintf(&text, "line %d: the quick brown fox %d jumps\n", i, i%17)
	}
	big := text.Bytes()[:9<<20+5]
	small := []byte("a small config file\n")
	blocks := random(3 * 4096)
	mixed := append(random(70000), bytes.Repeat([]byte("ab"), 40000)...)
	files := map[string][]byte{
		"big/a": big, "big/b": big, "big/c": append(bytes.Clone(big[:len(big)-1]), 'X'),
		"blocks/a": blocks, "blocks/b": blocks,
		"mixed/a": mixed, "mixed/b": mixed,
		"near/a": append(bytes.Clone(mixed), 0), "near/b": mixed[:len(mixed)-1],
	}
	for i := range 20 {
		files[fmt.Sprintf("small/%02d", i)] = small
	}
	// Enough copies of a file under a block that one block costs less
	// than a tail in every inode: the copies move to a shared block.
	tail := random(1500)
	for i := range 6 {
		files[fmt.Sprintf("tails/%d", i)] = tail
	}
	// The same for a file with full blocks before its tail: its copies
	// become chunk-based, the tail in a block of its own.
	mid := random(2*4096 + 1900)
	for i := range 5 {
		files[fmt.Sprintf("mid/%d", i)] = mid
	}
	files["mid/0x"] = random(5000) // written between the first copies

	return files
}

// TestDedupe builds the same files with and without whole-file dedupe,
// uncompressed and compressed, and checks that the deduplicated image is
// smaller by about the duplicates, reads back the same (reader and
// kernel), and does not depend on the worker count.
func TestDedupe(t *testing.T) {
	files := dupFiles()
	dupBytes := 0
	seen := map[string]bool{}
	for _, name := range sortedKeys(files) {
		k := string(files[name])
		if seen[k] {
			dupBytes += len(files[name])
		}
		seen[k] = true
	}
	for _, c := range []*Compression{
		nil,
		{Algorithm: AlgLZ4, PclusterSize: 65536, TailPacking: true},
		{Algorithm: AlgLZ4, PclusterSize: 16384, Fragments: true},
		{Algorithm: AlgLZ4, Level: 1, PclusterSize: 4096},
	} {
		name := "plain"
		if c != nil {
			name = fmt.Sprintf("%s-%d_pc%dk_tail%v_frag%v", c.Algorithm, c.Level, c.PclusterSize>>10, c.TailPacking, c.Fragments)
		}
		t.Run(name, func(t *testing.T) {
			// at: the files come as DataAt, read (and hashed) by the
			// workers rather than the caller.
			build := func(noDedupe bool, workers int, at bool) ([]byte, int64) {
				var img memWriterAt
				o := Options{Compression: c, NoDedupe: noDedupe, Workers: workers, TempDir: t.TempDir()}
				b, err := NewBuilder(&img, o)
				if err != nil {
					t.Fatal(err)
				}
				defer b.Close()
				for _, name := range sortedKeys(files) {
					e := Entry{Path: name, Mode: S_IFREG | 0o644, Size: int64(len(files[name]))}
					if strings.HasPrefix(name, "small/1") {
						// Less inline room than the first copy: not shared
						// when the first copy's tail went inline.
						e.Xattrs = []Xattr{{Name: "user.pad", Value: bytes.Repeat([]byte("x"), 3000)}}
					}
					var r io.Reader = bytes.NewReader(files[name])
					if at {
						r = DataAt(bytes.NewReader(files[name]), 0, e.Size)
					}
					if err := b.Add(e, r); err != nil {
						t.Fatal(err)
					}
				}
				if err := b.Finish(); err != nil {
					t.Fatal(err)
				}
				return img.b, b.DedupedBytes()
			}
			full, none := build(true, 0, false)
			deduped, saved := build(false, 1, false)
			if none != 0 {
				t.Errorf("NoDedupe, yet %d bytes deduplicated", none)
			}
			// The small files with big xattrs are stored again (when
			// inline); everything else duplicated is shared.
			if saved < int64(dupBytes)-10*int64(len(files["small/00"])) || saved > int64(dupBytes) {
				t.Errorf("deduplicated %d bytes, the duplicates are %d", saved, dupBytes)
			}
			if len(deduped) >= len(full) {
				t.Errorf("image with dedupe %d bytes, without %d", len(deduped), len(full))
			}
			t.Logf("%d bytes of files, %d duplicated: image %d bytes without dedupe, %d with (%d bytes shared)",
				sumLen(files), dupBytes, len(full), len(deduped), saved)
			for _, n := range []int{1, 2, 5} {
				for _, at := range []bool{false, true} {
					if n == 1 && !at {
						continue
					}
					if got, _ := build(false, n, at); !bytes.Equal(got, deduped) {
						t.Errorf("%d workers, DataAt %v: image differs from one worker's at %d", n, at, firstDiff(got, deduped))
					}
				}
			}
			if c == nil {
				img := openBytes(t, deduped)
				var blk []uint64
				for i := range 6 {
					ino, err := img.Lstat(fmt.Sprintf("tails/%d", i))
					if err != nil || ino.Layout != LayoutFlatPlain {
						t.Fatalf("tails/%d: %v, layout %v: want its inline tail moved to a shared block", i, err, ino)
					}
					blk = append(blk, ino.StartBlock())
				}
				if slices.Min(blk) != slices.Max(blk) {
					t.Errorf("copies of tails/0 in blocks %v, want one block", blk)
				}
				var refs [][]ChunkRef
				for i := range 5 {
					ino, err := img.Lstat(fmt.Sprintf("mid/%d", i))
					if err != nil || ino.Layout != LayoutChunkBased {
						t.Fatalf("mid/%d: %v, layout %v: want chunk-based with its tail in a shared block", i, err, ino)
					}
					_, r, _, err := img.ChunkRefs(ino)
					if err != nil {
						t.Fatal(err)
					}
					refs = append(refs, r)
				}
				for _, r := range refs[1:] {
					if !slices.Equal(r, refs[0]) {
						t.Errorf("copies of mid/0 have chunks %v and %v", refs[0], r)
					}
				}
			}
			for _, raw := range [][]byte{full, deduped} {
				img := openBytes(t, raw)
				for name, want := range files {
					got, err := img.ReadFile(name)
					if err != nil || !bytes.Equal(got, want) {
						t.Errorf("reader: %s: %d bytes (%v), want %d, first difference at %d", name, len(got), err, len(want), firstDiff(got, want))
					}
				}
			}
			if noMount() == "" {
				mountCompare(t, deduped, files)
			}
		})
	}
}

// TestPlainHashedByWorkers: with dedupe and several workers, uncompressed
// files go through the pipeline, whose workers take their hashes (the
// caller only small files', while it waits), and a duplicate is shared as
// by one worker, which hashes as it copies, without a pipeline.
func TestPlainHashedByWorkers(t *testing.T) {
	big := make([]byte, 3*plainSegment+100)
	for k := range big {
		big[k] = byte(k / 3 % 253)
	}
	small := bytes.Repeat([]byte("small "), 900)
	for _, workers := range []int{1, 2, 3} {
		var img memWriterAt
		b, err := NewBuilder(&img, Options{Workers: workers})
		if err != nil {
			t.Fatal(err)
		}
		if (b.zp != nil) != (workers > 1) {
			t.Fatalf("%d workers: pipeline %v", workers, b.zp != nil)
		}
		for i := range 2 {
			for _, data := range [][]byte{small, big} {
				e := Entry{Path: fmt.Sprintf("f%d-%d", i, len(data)), Mode: S_IFREG | 0o644, Size: int64(len(data))}
				if err := b.Add(e, bytes.NewReader(data)); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := b.Finish(); err != nil {
			t.Fatal(err)
		}
		if got, want := b.DedupedBytes(), int64(len(big)+len(small)); got != want {
			t.Errorf("%d workers: %d bytes deduplicated, want %d", workers, got, want)
		}
		// The caller takes small jobs only: the small files, and the
		// last, short segment of a big one (a flake: 10,900 bytes once).
		if limit := 2 * int64(len(small)+len(big)%plainSegment); workers > 1 && b.zp.self.bytes > limit {
			t.Errorf("%d workers: the caller hashed %d bytes, more than the small files' and the big ones' tails' %d", workers, b.zp.self.bytes, limit)
		}
		r := openBytes(t, img.b)
		for _, name := range []string{"f1-5400", fmt.Sprintf("f1-%d", len(big))} {
			got, err := r.ReadFile(name)
			if want := map[bool][]byte{true: small, false: big}[name == "f1-5400"]; err != nil || !bytes.Equal(got, want) {
				t.Errorf("%d workers: %s: %v, first difference at %d", workers, name, err, firstDiff(got, want))
			}
		}
	}
}

// TestDedupeCollisions gives every file the same dedupe key, so that only
// the byte comparison tells copies from files that merely collide: files
// of the same size that differ in one byte (in a later segment of a big
// file, in a tail, in the middle) are never shared, and the image is the
// one built with real keys, for every layout a candidate can have.
func TestDedupeCollisions(t *testing.T) {
	rnd := rand.New(rand.NewPCG(3, 9))
	random := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rnd.Uint32())
		}
		return b
	}
	flip := func(p []byte, at int) []byte {
		q := bytes.Clone(p)
		q[at] ^= 1
		return q
	}
	var text bytes.Buffer
	for i := 0; text.Len() < 9<<20; i++ {
		fmt.Fprintf(&text, "line %d: %d\n", i, i%31)
	}
	big := text.Bytes()[:9<<20+5]
	mixed := append(random(70000), bytes.Repeat([]byte("ab"), 40000)...)
	small := []byte("a small config file\n")
	tail := random(1500)
	// Seven contents: fewer than maxDupCandidates, so every one stays a
	// candidate and the image matches the one built with real keys.
	files := map[string][]byte{
		"a/big": big, "b/big": flip(big, len(big)-1), "c/big": big, "d/big": flip(big, len(big)-1),
		"a/mixed": mixed, "b/mixed": flip(mixed, 100), "c/mixed": flip(mixed, 100), "d/mixed": mixed,
		"a/small": small, "b/small": flip(small, 3), "c/small": small, "d/small": flip(small, 3),
	}
	for i := range 6 {
		files[fmt.Sprintf("tails/%d", i)] = tail
	}
	dupBytes := int64(2*len(big) + 2*len(mixed) + 2*len(small) + 5*len(tail))
	// More contents than candidates under one key: some copies are
	// stored again, and every file still reads back as it was.
	many := maps.Clone(files)
	for i := range 2 * maxDupCandidates {
		p := flip(small, i%len(small))
		many[fmt.Sprintf("many/%02d", i)] = p
		many[fmt.Sprintf("many/%02d-copy", i)] = p
	}
	for _, c := range []*Compression{
		nil,
		{Algorithm: AlgLZ4, PclusterSize: 65536, TailPacking: true},
		{Algorithm: AlgLZ4, PclusterSize: 16384, Fragments: true},
		{Algorithm: AlgLZ4, Level: 1, PclusterSize: 4096},
		{Algorithm: AlgLZ4, PclusterSize: 16384, Dedupe: true},
		{Algorithm: AlgZstd, Level: 3, PclusterSize: 16384, TailPacking: true},
	} {
		name := "plain"
		if c != nil {
			name = fmt.Sprintf("%s-%d_pc%dk_tail%v_frag%v_dedupe%v", c.Algorithm, c.Level, c.PclusterSize>>10, c.TailPacking, c.Fragments, c.Dedupe)
		}
		t.Run(name, func(t *testing.T) {
			build := func(files map[string][]byte, collide bool, workers int) ([]byte, int64) {
				forceDupCollisions = collide
				defer func() { forceDupCollisions = false }()
				var img memWriterAt
				b, err := NewBuilder(&img, Options{Compression: c, Workers: workers, TempDir: t.TempDir()})
				if err != nil {
					t.Fatal(err)
				}
				defer b.Close()
				for _, name := range sortedKeys(files) {
					e := Entry{Path: name, Mode: S_IFREG | 0o644, Size: int64(len(files[name]))}
					if err := b.Add(e, bytes.NewReader(files[name])); err != nil {
						t.Fatal(err)
					}
				}
				if err := b.Finish(); err != nil {
					t.Fatal(err)
				}
				return img.b, b.DedupedBytes()
			}
			check := func(raw []byte, files map[string][]byte) {
				t.Helper()
				img := openBytes(t, raw)
				for name, want := range files {
					got, err := img.ReadFile(name)
					if err != nil || !bytes.Equal(got, want) {
						t.Errorf("%s: %d bytes (%v), want %d, first difference at %d", name, len(got), err, len(want), firstDiff(got, want))
					}
				}
			}
			want, wantSaved := build(files, false, 1)
			if wantSaved != dupBytes {
				t.Errorf("real keys: %d bytes deduplicated, the copies are %d", wantSaved, dupBytes)
			}
			for _, workers := range []int{1, 2} {
				got, saved := build(files, true, workers)
				if !bytes.Equal(got, want) || saved != wantSaved {
					t.Errorf("%d workers, colliding keys: image differs at %d, %d bytes deduplicated, want %d", workers, firstDiff(got, want), saved, wantSaved)
				}
				check(got, files)
			}
			got, saved := build(many, true, 1)
			if saved <= 0 || saved > dupBytes+int64(2*maxDupCandidates*len(small)) {
				t.Errorf("more contents than candidates: %d bytes deduplicated, the copies are %d", saved, dupBytes+int64(2*maxDupCandidates*len(small)))
			}
			check(got, many)
			if noMount() == "" {
				mountCompare(t, got, many)
			}
		})
	}
}
