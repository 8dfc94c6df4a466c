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

func formatFile(t *testing.T, p string, size int64) Metadata {
	t.Helper()
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m, err := Format(f, size)
	if err != nil {
		t.Fatalf("Format: %v", err)
	}
	return m
}

var rootLine = regexp.MustCompile(`(?m)^Root hash:\s*([0-9a-f]+)$`)

// TestFormatVeritysetup: for sizes that make 0 to 3 levels, and a last
// block cut short, Format writes the bytes veritysetup format writes with
// the same salt, UUID and hash offset (superblock, tree, padding), the
// same root hash, and veritysetup verify accepts the file; Verify agrees.
func TestFormatVeritysetup(t *testing.T) {
	bin := veritysetup(t)
	dir := t.TempDir()
	for _, size := range []int{
		1, BlockSize, 2 * BlockSize, 5000,
		hashesPerBlock * BlockSize, (hashesPerBlock + 1) * BlockSize,
		hashesPerBlock * hashesPerBlock * BlockSize, (hashesPerBlock*hashesPerBlock + 3) * BlockSize,
		(batch*3+7)*BlockSize + 100,
	} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			ours := writeData(t, dir, fmt.Sprintf("ours-%d", size), size, uint64(size))
			theirs := writeData(t, dir, fmt.Sprintf("theirs-%d", size), size, uint64(size))
			m := formatFile(t, ours, int64(size))
			n := dataBlocks(int64(size))
			if m.HashOffset != n*BlockSize {
				t.Fatalf("hash offset %d for %d bytes", m.HashOffset, size)
			}
			got, err := os.ReadFile(ours)
			if err != nil {
				t.Fatal(err)
			}
			if want := int64(m.HashOffset) + TreeSize(int64(size)); int64(len(got)) != want {
				t.Fatalf("file is %d bytes after Format, TreeSize says %d", len(got), want)
			}
			sb := got[m.HashOffset:]
			uuid := fmt.Sprintf("%x-%x-%x-%x-%x", sb[16:20], sb[20:22], sb[22:24], sb[24:26], sb[26:32])
			// veritysetup wants the data device whole: pad it as Format does.
			if err := os.Truncate(theirs, int64(m.HashOffset)); err != nil {
				t.Fatal(err)
			}
			out, err := exec.Command(bin, "format", "--salt="+strings.Repeat("00", 32), "--uuid="+uuid,
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
	m := formatFile(t, p, int64(size))
	good, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := Verify(bytes.NewReader(good), m); err != nil {
		t.Fatalf("Verify of the good file: %v", err)
	}
	ls := levels(dataBlocks(int64(size)))
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
		{"root hash", -1, Metadata{RootHash: strings.Repeat("ab", 32), HashOffset: m.HashOffset}, "the sidecar says"},
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

// FuzzVerify: whatever the file and sidecar, Verify returns (no panic, no
// allocation beyond its buffers), and accepts only what Format wrote.
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
		m, err := Format(fh, int64(size))
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
		_ = Verify(bytes.NewReader(b), Metadata{RootHash: root, HashOffset: off})
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
		if _, err := Format(f, size); err != nil {
			b.Fatal(err)
		}
		f.Close()
	}
}
