package erofs

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// dedupeTree is a tree full of partial duplicates that whole-file dedupe
// does not catch: near-identical versions of a file, a long run shared at
// different offsets, a file repeating itself, repeated incompressible runs,
// and a file whose repeat crosses a compression segment.
func dedupeTree() map[string][]byte {
	rnd := rand.New(rand.NewPCG(7, 11))
	words := strings.Fields("the of and to in is that for it as was with be by on not he this are or his from at which but have an they you were her she there been one all we their has would when if so no out up into my more do can other about only its some new like")
	text := func(n int) []byte {
		var b bytes.Buffer
		for b.Len() < n {
			fmt.Fprintf(&b, "%s %s %d, ", words[rnd.IntN(len(words))], words[rnd.IntN(len(words))], rnd.IntN(1000))
			if rnd.IntN(12) == 0 {
				b.WriteString("\n")
			}
		}
		return b.Bytes()[:n]
	}
	random := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rnd.Uint32())
		}
		return b
	}
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	base := text(700 << 10)
	// v2: an insertion and an edit; v3: v2 with a deletion.
	v2 := cat(base[:100<<10], []byte("INSERTED LINE\n"), base[100<<10:400<<10], []byte("EDIT"), base[400<<10+4:])
	v3 := cat(v2[:250<<10], v2[250<<10+3000:])
	rnd1 := random(300 << 10)
	chunk := text(150 << 10)
	var self []byte
	for i := range 6 {
		self = append(self, chunk...)
		self = append(self, fmt.Sprintf("-- copy %d --\n", i)...)
	}
	big := text(2<<20 + 12345)
	files := map[string][]byte{
		"src/v1.txt":         base,
		"src/v2.txt":         v2,
		"src/v3.txt":         v3,
		"other/excerpt.txt":  cat(text(5000), base[200<<10:500<<10], text(7777)),
		"other/self.txt":     self,
		"bin/blob-a":         cat(rnd1, text(20000)),
		"bin/blob-b":         cat(random(12345), rnd1[1000:], random(999)),
		"big/twice":          cat(big, big[1234:], []byte("end")), // crosses the 4 MiB segment
		"small/one":          text(300),
		"small/two":          text(5000),
		"small/copy-of-v1":   base, // whole-file dedupe
		"small/v1-and-tail":  cat(base, []byte("and a tail\n")),
		"small/zeros-and-v1": cat(make([]byte, 70000), base[:90<<10]),
	}
	return files
}

// memFile is an in-memory output that can be read back, as dedupe needs.
type memFile struct{ memWriterAt }

func (m *memFile) ReadAt(p []byte, off int64) (int, error) {
	if off >= int64(len(m.b)) {
		return 0, io.EOF
	}
	n := copy(p, m.b[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// buildDedupe writes files into an image with the options and workers, and
// returns it with the builder's extent-dedupe figures.
func buildDedupe(t testing.TB, c Compression, files map[string][]byte, workers int) ([]byte, [3]int64) {
	t.Helper()
	var img memFile
	b, err := NewBuilder(&img, Options{Compression: &c, TempDir: t.TempDir(), Workers: workers})
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
	var st [3]int64
	st[0], st[1], st[2] = b.ExtentDedupe()
	return img.b, st
}

// checkRead reads every file back with the package's reader.
func checkRead(t *testing.T, raw []byte, files map[string][]byte) {
	t.Helper()
	img := openBytes(t, raw)
	for _, name := range sortedKeys(files) {
		want := files[name]
		got, err := img.ReadFile(name)
		if err != nil {
			t.Errorf("reader: %s: %v", name, err)
			continue
		}
		if !bytes.Equal(got, want) {
			t.Errorf("reader: %s: %d bytes, want %d, first difference at %d", name, len(got), len(want), firstDiff(got, want))
		}
	}
}

// dedupeConfigs: every codec × pcluster 4 KiB, 64 KiB × tail packing ×
// fragments, at the codec's default level (lz4 also as lz4hc); under
// -short at its fastest level, as the dedupe decisions do not depend on
// how hard a codec searches.
func dedupeConfigs() []zConfig {
	var cs []zConfig
	type al struct {
		a  Algorithm
		lv int
		n  string
	}
	algs := []al{{AlgLZ4, 0, "lz4"}, {AlgLZ4, 9, "lz4hc"}}
	for a := AlgLZMA; a <= AlgZstd; a++ {
		if k := codecs[a]; k != nil && testing.Short() {
			algs = append(algs, al{a, k.minLevel, a.String()})
		} else if k != nil {
			algs = append(algs, al{a, k.defaultLevel, a.String()})
		}
	}
	for _, x := range algs {
		for _, pc := range []int{4096, 65536} {
			for _, tail := range []bool{false, true} {
				for _, frag := range []bool{false, true} {
					name := fmt.Sprintf("%s_pc%dk", x.n, pc>>10)
					if tail {
						name += "_tail"
					}
					if frag {
						name += "_frag"
					}
					cs = append(cs, zConfig{name: name, bs: 4096, c: Compression{Algorithm: x.a, Level: x.lv, PclusterSize: pc, TailPacking: tail, Fragments: frag, Dedupe: true}})
				}
			}
		}
	}
	return cs
}

// TestExtentDedupe builds the partial-duplicates tree with and without
// extent dedupe under every configuration: the deduped image must be
// smaller, read back right with this package's reader and, as root, with
// the kernel.
func TestExtentDedupe(t *testing.T) {
	files := dedupeTree()
	why := noMount()
	mountOK := why == ""
	if !mountOK {
		t.Log("kernel mount checks skipped: " + why)
	}
	for _, cfg := range dedupeConfigs() {
		if zShortSkip(cfg.c) {
			continue
		}
		t.Run(cfg.name, func(t *testing.T) {
			raw, st := buildDedupe(t, cfg.c, files, 0)
			off := cfg.c
			off.Dedupe = false
			plain, _ := buildDedupe(t, off, files, 0)
			t.Logf("%d bytes with dedupe, %d without (%.1f%% less): %d extents share %d bytes, %d blocks saved",
				len(raw), len(plain), 100*(1-float64(len(raw))/float64(len(plain))), st[0], st[1], st[2])
			if st[0] == 0 || len(raw) >= len(plain)-8*4096 {
				t.Errorf("dedupe saved too little: %d bytes against %d", len(raw), len(plain))
			}
			img := openBytes(t, raw)
			if s := img.Super(); s.FeatureIncompat&FeatureIncompatFragments == 0 {
				t.Errorf("no DEDUPE feature bit: %v", FeatureNames(s.FeatureCompat, s.FeatureIncompat))
			}
			checkRead(t, raw, files)
			if mountOK {
				mountCompare(t, raw, files)
			}
		})
	}
}

// TestExtentDedupeWorkers: the decisions are made in input order, so the
// image does not depend on the number of workers.
func TestExtentDedupeWorkers(t *testing.T) {
	files := dedupeTree()
	for _, cfg := range dedupeConfigs() {
		if cfg.c.Algorithm != AlgLZ4 && cfg.c.Algorithm != AlgZstd || cfg.c.Level != 0 && cfg.c.Algorithm == AlgLZ4 || zShortSkip(cfg.c) {
			continue
		}
		t.Run(cfg.name, func(t *testing.T) {
			one, _ := buildDedupe(t, cfg.c, files, 1)
			for _, n := range []int{2, 3} {
				if got, _ := buildDedupe(t, cfg.c, files, n); !bytes.Equal(got, one) {
					t.Errorf("%d workers: image of %d bytes differs from one worker's (%d bytes) at %d", n, len(got), len(one), firstDiff(got, one))
				}
			}
		})
	}
}

// TestExtentDedupeKernel refuses kernels before 6.1.
func TestExtentDedupeKernel(t *testing.T) {
	o := Options{Compression: &Compression{Algorithm: AlgLZ4, Dedupe: true}, MinKernel: Kernel{5, 15}}
	err := o.Validate()
	if err == nil || !strings.Contains(err.Error(), "dedupe") || !strings.Contains(err.Error(), "6.1") {
		t.Errorf("5.15 with extent dedupe: %v", err)
	}
	o.MinKernel = Kernel{6, 1}
	if err := o.Validate(); err != nil {
		t.Errorf("6.1: %v", err)
	}
}

// TestExtentDedupeFsck runs fsck.erofs over deduped images: $FSCK_EROFS,
// or the one on $PATH. Debian's (erofs-utils 1.5) predates the DEDUPE bit
// and says so; then the test skips.
func TestExtentDedupeFsck(t *testing.T) {
	fsck := os.Getenv("FSCK_EROFS")
	if fsck == "" {
		if testing.Short() {
			t.Skip("-short: no fsck.erofs (unless FSCK_EROFS names one); make test runs it")
		}
		var err error
		if fsck, err = exec.LookPath("fsck.erofs"); err != nil {
			t.Skip("fsck.erofs is not installed")
		}
	}
	files := dedupeTree()
	for _, cfg := range dedupeConfigs() {
		if cfg.c.Level == 9 {
			continue
		}
		t.Run(cfg.name, func(t *testing.T) {
			raw, _ := buildDedupe(t, cfg.c, files, 0)
			p := filepath.Join(t.TempDir(), "d.erofs")
			if err := os.WriteFile(p, raw, 0o644); err != nil {
				t.Fatal(err)
			}
			out, err := exec.Command(fsck, "--extract", p).CombinedOutput()
			switch {
			case bytes.Contains(out, []byte("unidentified incompatible feature")), bytes.Contains(out, []byte("unknown compression")), bytes.Contains(out, []byte("not supported")):
				t.Skipf("%s does not know these images: %s", fsck, bytes.TrimSpace(out))
			case err != nil:
				t.Errorf("fsck.erofs: %v\n%s", err, out)
			}
		})
	}
}

// TestExtentDedupeManyFiles: 3,000 files of 4–16 KiB, more input than the
// compression ring holds, so that it wraps many times while each job keeps
// its input beside its output. A ring whose tail went wrong after a wrap
// once refused such a job with "no room" in an otherwise empty ring.
func TestExtentDedupeManyFiles(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	words := []string{"pcluster ", "lcluster ", "dedupe ", "anchor ", "extent ", "segment "}
	files := map[string][]byte{}
	for i := range 3000 {
		var b bytes.Buffer
		for n := 4096 + rng.IntN(12288); b.Len() < n; {
			b.WriteString(words[rng.IntN(len(words))])
		}
		files[fmt.Sprintf("d%02d/f%04d", i%23, i)] = b.Bytes()
	}
	c := Compression{Algorithm: AlgLZ4, PclusterSize: 65536, TailPacking: true, Dedupe: true}
	one, _ := buildDedupe(t, c, files, 1)
	if got, _ := buildDedupe(t, c, files, 2); !bytes.Equal(got, one) {
		t.Errorf("2 workers: image of %d bytes differs from one worker's (%d bytes) at %d", len(got), len(one), firstDiff(got, one))
	}
	if why := noMount(); why != "" {
		t.Skip(why)
	}
	mountCompare(t, one, files)
}
