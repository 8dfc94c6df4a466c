package dmverity

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

func veritysetup(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("veritysetup")
	if err != nil {
		t.Skip("no veritysetup (Debian package cryptsetup-bin), the independent writer and checker of dm-verity trees")
	}
	return bin
}

// writeData writes size random bytes to a new file and returns its path.
func writeData(t *testing.T, dir, name string, size int, seed uint64) string {
	t.Helper()
	b := make([]byte, size)
	r := rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8)})
	r.Read(b)
	// Some blocks repeat, as blocks of zeros and of equal files do.
	for i := 3 * BlockSize; i+BlockSize <= size; i += 5 * BlockSize {
		copy(b[i:i+BlockSize], b[:BlockSize])
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func formatFile(t *testing.T, p string, size int64, dbs int) Metadata {
	t.Helper()
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m, err := Format(f, size, dbs)
	if err != nil {
		t.Fatalf("Format: %v", err)
	}
	return m
}

var rootLine = regexp.MustCompile(`(?m)^Root hash:\s*([0-9a-f]+)$`)

// TestFormatVeritysetup: for sizes that make 0 to 3 levels, and a last
// block cut short, with data blocks of 4096 and of 512 bytes, Format
// writes the bytes veritysetup format writes with the same salt, UUID and
// hash offset (superblock, tree, padding), the same root hash, and
// veritysetup verify accepts the file; Verify and CheckLayout agree.
func TestFormatVeritysetup(t *testing.T) {
	bin := veritysetup(t)
	dir := t.TempDir()
	// The trees of three levels: 64 MiB of 4 KiB data blocks, or under
	// -short the same tree over 8 MiB of 512-byte ones.
	deep := 4096
	if testing.Short() {
		deep = 512
	}
	for _, c := range []struct{ size, dbs int }{
		{1, 4096}, {BlockSize, 4096}, {2 * BlockSize, 4096}, {5000, 4096},
		{hashesPerBlock * BlockSize, 4096}, {(hashesPerBlock + 1) * BlockSize, 4096},
		{hashesPerBlock * hashesPerBlock * deep, deep}, {(hashesPerBlock*hashesPerBlock + 3) * deep, deep},
		{(batch*3+7)*BlockSize + 100, 4096},
		{512, 512}, {64512, 512}, {hashesPerBlock * 512, 512}, {(hashesPerBlock + 1) * 512, 512},
		{(batch*9 + 5) * 1024, 1024}, {3 * 2048, 2048},
	} {
		size, dbs := c.size, c.dbs
		t.Run(fmt.Sprintf("%d/%d", size, dbs), func(t *testing.T) {
			ours := writeData(t, dir, fmt.Sprintf("ours-%d-%d", size, dbs), size, uint64(size))
			theirs := writeData(t, dir, fmt.Sprintf("theirs-%d-%d", size, dbs), size, uint64(size))
			// Bytes past the data are not hashed: Format drops them.
			if f, err := os.OpenFile(ours, os.O_WRONLY|os.O_APPEND, 0); err == nil {
				f.Write([]byte("not data"))
				f.Close()
			}
			m := formatFile(t, ours, int64(size), dbs)
			n := dataBlocks(int64(size), dbs)
			if m.HashOffset != uint64(hashOffset(int64(size))) || m.HashOffset%BlockSize != 0 || m.HashOffset < n*uint64(dbs) {
				t.Fatalf("hash offset %d for %d bytes", m.HashOffset, size)
			}
			got, err := os.ReadFile(ours)
			if err != nil {
				t.Fatal(err)
			}
			if want := int64(m.HashOffset) + TreeSize(int64(size), dbs); int64(len(got)) != want {
				t.Fatalf("file is %d bytes after Format, TreeSize says %d", len(got), want)
			}
			sb := got[m.HashOffset:]
			uuid := fmt.Sprintf("%x-%x-%x-%x-%x", sb[16:20], sb[20:22], sb[22:24], sb[24:26], sb[26:32])
			// veritysetup wants the data device whole: pad it as Format does.
			if err := os.Truncate(theirs, int64(m.HashOffset)); err != nil {
				t.Fatal(err)
			}
			out, err := exec.Command(bin, "format", "--salt="+strings.Repeat("00", 32), "--uuid="+uuid, fmt.Sprintf("--data-block-size=%d", dbs),
				fmt.Sprintf("--hash-offset=%d", m.HashOffset), fmt.Sprintf("--data-blocks=%d", n), theirs, theirs).CombinedOutput()
			if err != nil {
				t.Fatalf("veritysetup format: %v\n%s", err, out)
			}
			r := rootLine.FindSubmatch(out)
			if r == nil {
				t.Fatalf("no root hash in veritysetup's output:\n%s", out)
			}
			if string(r[1]) != m.RootHash {
				t.Errorf("root hash %s, veritysetup %s", m.RootHash, r[1])
			}
			want, err := os.ReadFile(theirs)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("%d bytes, veritysetup wrote %d; first difference at offset %d", len(got), len(want), firstDiff(got, want))
			}
			if out, err := exec.Command(bin, "verify", fmt.Sprintf("--hash-offset=%d", m.HashOffset), ours, ours, m.RootHash).CombinedOutput(); err != nil {
				t.Errorf("veritysetup verify: %v\n%s", err, out)
			}
			if err := Verify(bytes.NewReader(got), m); err != nil {
				t.Errorf("Verify: %v", err)
			}
			if err := CheckLayout(bytes.NewReader(got), int64(len(got)), int64(size), dbs, m); err != nil {
				t.Errorf("CheckLayout: %v", err)
			}
		})
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// TestVerifyDamage: a byte changed in the data, in a hash block of each
// level, or in the superblock, a wrong root hash or hash offset: Verify
// fails, naming where, and so does veritysetup verify.
func TestVerifyDamage(t *testing.T) {
	bin := veritysetup(t)
	dir := t.TempDir()
	size := (hashesPerBlock*hashesPerBlock + 5) * BlockSize // three levels
	p := writeData(t, dir, "data", size, 7)
	m := formatFile(t, p, int64(size), BlockSize)
	good, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := Verify(bytes.NewReader(good), m); err != nil {
		t.Fatalf("Verify of the good file: %v", err)
	}
	ls := levels(dataBlocks(int64(size), BlockSize))
	start := layout(ls)
	tree := int(m.HashOffset) + BlockSize
	for _, c := range []struct {
		name string
		off  int
		m    Metadata
		want string
	}{
		{"data block 16000", 16000*BlockSize + 17, m, "level 0: hash block 125 "},
		{"level 0", tree + int(start[0]+1)*BlockSize + 3, m, "level 0: hash block 1 "},
		{"level 1", tree + int(start[1])*BlockSize + 40, m, "level 1: hash block 0 "},
		{"top level", tree + int(start[2])*BlockSize + 1, m, "level 2: hash block 0 "},
		{"superblock", int(m.HashOffset) + 64, m, "block sizes"},
		{"root hash", -1, Metadata{RootHash: strings.Repeat("ab", 32), HashOffset: m.HashOffset}, "says"},
		{"hash offset", -1, Metadata{RootHash: m.RootHash, HashOffset: m.HashOffset - BlockSize}, "no verity signature"},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := bytes.Clone(good)
			if c.off >= 0 {
				b[c.off] ^= 0x40
			}
			err := Verify(bytes.NewReader(b), c.m)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("Verify: %v, want an error with %q", err, c.want)
			}
			q := filepath.Join(dir, "damaged")
			if err := os.WriteFile(q, b, 0o644); err != nil {
				t.Fatal(err)
			}
			if out, err := exec.Command(bin, "verify", fmt.Sprintf("--hash-offset=%d", c.m.HashOffset), q, q, c.m.RootHash).CombinedOutput(); err == nil {
				t.Errorf("veritysetup verify accepts it:\n%s", out)
			}
		})
	}
	// A sidecar that is no hex digest, an offset not on a block.
	for _, bad := range []Metadata{{RootHash: "xyz", HashOffset: m.HashOffset}, {RootHash: m.RootHash, HashOffset: m.HashOffset + 1}, {RootHash: m.RootHash}} {
		if err := Verify(bytes.NewReader(good), bad); err == nil {
			t.Errorf("Verify with %+v: no error", bad)
		}
	}
}

// TestCheckLayout: the cheap check refuses a sidecar whose root hash is
// not the tree's, a damaged top level, another size or block size, and a
// superblock without a UUID (containerd's reader refuses it).
func TestCheckLayout(t *testing.T) {
	dir := t.TempDir()
	for _, size := range []int{BlockSize, 300 * BlockSize} { // no tree; two levels
		p := writeData(t, dir, fmt.Sprint(size), size, 3)
		m := formatFile(t, p, int64(size), BlockSize)
		good, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		check := func(b []byte, data int64, dbs int, m Metadata) error {
			return CheckLayout(bytes.NewReader(b), int64(len(b)), data, dbs, m)
		}
		if err := check(good, int64(size), BlockSize, m); err != nil {
			t.Fatalf("%d bytes: %v", size, err)
		}
		top := 0 // the data block, with no tree
		if size > BlockSize {
			top = int(m.HashOffset) + BlockSize
		}
		damaged := bytes.Clone(good)
		damaged[top+9] ^= 1
		noUUID := bytes.Clone(good)
		copy(noUUID[m.HashOffset+16:m.HashOffset+32], make([]byte, 16))
		for name, err := range map[string]error{
			"wrong root hash":  check(good, int64(size), BlockSize, Metadata{RootHash: strings.Repeat("ab", 32), HashOffset: m.HashOffset}),
			"damaged top":      check(damaged, int64(size), BlockSize, m),
			"other data size":  check(good, int64(size)-BlockSize, BlockSize, m),
			"other block size": check(good, int64(size), 512, m),
			"no UUID":          check(noUUID, int64(size), BlockSize, m),
		} {
			if err == nil {
				t.Errorf("%d bytes, %s: no error", size, name)
			}
		}
	}
}

func TestSidecar(t *testing.T) {
	p := filepath.Join(t.TempDir(), "x.erofs")
	m := Metadata{RootHash: strings.Repeat("0f", 32), HashOffset: 8192}
	if err := WriteSidecar(p, m); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(p + ".dmverity")
	if err != nil {
		t.Fatal(err)
	}
	// The keys containerd's ReadMetadata reads.
	if !bytes.Contains(raw, []byte(`"roothash": "`+m.RootHash+`"`)) || !bytes.Contains(raw, []byte(`"hashoffset": 8192`)) {
		t.Errorf("sidecar:\n%s", raw)
	}
	got, err := ReadSidecar(p)
	if err != nil || got != m {
		t.Errorf("ReadSidecar: %+v, %v", got, err)
	}
	if left, _ := filepath.Glob(filepath.Join(filepath.Dir(p), ".tmp-*")); len(left) != 0 {
		t.Errorf("temp files left: %v", left)
	}
	if err := os.WriteFile(p+".dmverity", []byte(`{"hashoffset": 1}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadSidecar(p); err == nil {
		t.Error("ReadSidecar of a sidecar without a root hash: no error")
	}
}

// FuzzVerify: whatever the file and sidecar, Verify and CheckLayout return
// an error or nil, without panicking or reading without end.
func FuzzVerify(f *testing.F) {
	dir := f.TempDir()
	for _, size := range []int{BlockSize, 3 * BlockSize} {
		p := filepath.Join(dir, fmt.Sprint(size))
		if err := os.WriteFile(p, bytes.Repeat([]byte{byte(size)}, size), 0o644); err != nil {
			f.Fatal(err)
		}
		fh, err := os.OpenFile(p, os.O_RDWR, 0)
		if err != nil {
			f.Fatal(err)
		}
		m, err := Format(fh, int64(size), BlockSize)
		fh.Close()
		if err != nil {
			f.Fatal(err)
		}
		b, _ := os.ReadFile(p)
		f.Add(b, m.RootHash, m.HashOffset)
	}
	f.Fuzz(func(t *testing.T, b []byte, root string, off uint64) {
		if len(b) > 1<<20 {
			return
		}
		m := Metadata{RootHash: root, HashOffset: off}
		_ = Verify(bytes.NewReader(b), m)
		for _, dbs := range []int{512, BlockSize} {
			_ = CheckLayout(bytes.NewReader(b), int64(len(b)), int64(off), dbs, m)
		}
	})
}

// BenchmarkFormat appends the tree of 64 MiB of data (page cache to page
// cache: the cost is SHA-256's).
func BenchmarkFormat(b *testing.B) {
	const size = 64 << 20
	p := filepath.Join(b.TempDir(), "data")
	data := make([]byte, size)
	rand.NewChaCha8([32]byte{1}).Read(data)
	b.SetBytes(size)
	for b.Loop() {
		b.StopTimer()
		if err := os.WriteFile(p, data, 0o644); err != nil {
			b.Fatal(err)
		}
		f, err := os.OpenFile(p, os.O_RDWR, 0)
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		if _, err := Format(f, size, BlockSize); err != nil {
			b.Fatal(err)
		}
		f.Close()
	}
}
