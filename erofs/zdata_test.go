package erofs

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// zInputs are the file contents the compression tests store: sizes around
// block and pcluster boundaries, incompressible, zeros, repetitive, text.
func zInputs() map[string][]byte {
	rnd := rand.New(rand.NewPCG(1, 2))
	random := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rnd.Uint32())
		}
		return b
	}
	text := func(n int) []byte {
		var b bytes.Buffer
		for i := 0; b.Len() < n; i++ {
			fmt.Fprintf(&b, "func f%d(x int) int { return x*%d + %d } // line %d\n", i%97, i%13, i*7%1000, i)
		}
		return b.Bytes()[:n]
	}
	in := map[string][]byte{
		"empty":     nil,
		"one":       []byte("x"),
		"zeros-1M":  make([]byte, 1<<20),
		"zeros-5M3": make([]byte, 5<<20+3),
		"random-1M": random(1<<20 + 17),
		"rep-3M":    bytes.Repeat([]byte("abcabcabd"), 3<<20/9),
	}
	for _, n := range []int{100, 4095, 4096, 4097, 8191, 8192, 12000, 65535, 65536, 65537, 1<<20 - 1, 1 << 20, 1<<20 + 1, 3<<20 + 5} {
		in[fmt.Sprintf("text-%d", n)] = text(n)
	}
	// Text with random holes: compressed and plain pclusters alternate.
	mixed := text(2 << 20)
	for off := 0; off+9000 < len(mixed); off += 70000 {
		copy(mixed[off:], random(9000))
	}
	in["mixed-2M"] = mixed
	// Several compression segments, cut mid-extent, with random patches.
	seg := text(9<<20 + 7)
	for off := 100000; off+9000 < len(seg); off += 1 << 20 {
		copy(seg[off:], random(9000))
	}
	in["segments-9M"] = seg
	return in
}

// zSmall is the inputs up to 1 MiB and a bit, and those named: enough for
// every path of the extent cutting, at a cost the slow levels of the dense
// codecs bear.
func zSmall(all map[string][]byte, names ...string) map[string][]byte {
	small := map[string][]byte{}
	for name, d := range all {
		if len(d) <= 1<<20+1 || slices.Contains(names, name) {
			small[name] = d
		}
	}
	return small
}

type zConfig struct {
	name string
	c    Compression
	bs   int
}

// zLevels are the levels each algorithm's round trip covers; a codec
// without an entry is tested at its default and maximum level.
var zLevels = map[Algorithm][]int{AlgLZ4: {0, 9}}

// zConfigs is the matrix the compressed round trip covers: every codec
// registered in this package × levels × pcluster 4 KiB, 64 KiB, 1 MiB ×
// tail packing × fragments, plus index and extent corner cases.
func zConfigs(t testing.TB) []zConfig {
	var cs []zConfig
	for alg := AlgLZ4; alg <= AlgZstd; alg++ {
		k := codecs[alg]
		if k == nil {
			continue
		}
		levels := zLevels[alg]
		if levels == nil {
			levels = []int{k.defaultLevel, k.maxLevel}
		}
		for _, lv := range levels {
			for _, pc := range []int{4096, 65536, 1 << 20} {
				for _, tail := range []bool{false, true} {
					for _, frag := range []bool{false, true} {
						name := fmt.Sprintf("%s-%d_pc%dk", alg, lv, pc>>10)
						if tail {
							name += "_tail"
						}
						if frag {
							name += "_frag"
						}
						cs = append(cs, zConfig{name: name, bs: 4096, c: Compression{Algorithm: alg, Level: lv, PclusterSize: pc, TailPacking: tail, Fragments: frag}})
					}
				}
			}
		}
	}
	cs = append(cs,
		zConfig{name: "lz4_full-index", bs: 4096, c: Compression{Algorithm: AlgLZ4, FullIndexes: true}},
		zConfig{name: "lz4_full-index_pc64k_tail", bs: 4096, c: Compression{Algorithm: AlgLZ4, PclusterSize: 65536, TailPacking: true, FullIndexes: true}},
		zConfig{name: "lz4_maxextent16k", bs: 4096, c: Compression{Algorithm: AlgLZ4, PclusterSize: 8192, MaxExtent: 16384, TailPacking: true}},
	)
	return cs
}

// zShortSkip reports whether go test -short leaves configuration c out:
// lz4 at its fast default level runs every configuration; the other
// codecs and levels run the two that TestWorkersSameImage picks (64 KiB
// pclusters with tail packing, 4 KiB with fragments), and leave the
// extent cutting's other paths to lz4; a codec's maximum level is left
// to its package's tests (erofs/compress/...).
func zShortSkip(c Compression) bool {
	if !testing.Short() || c.Algorithm == AlgLZ4 && c.Level == codecs[AlgLZ4].defaultLevel {
		return false
	}
	if k := codecs[c.Algorithm]; c.Level == k.maxLevel && k.maxLevel != k.defaultLevel {
		return true
	}
	return !(c.PclusterSize == 65536 && c.TailPacking && !c.Fragments || c.PclusterSize == 4096 && !c.TailPacking && c.Fragments)
}

func buildZ(t testing.TB, cfg zConfig, files map[string][]byte) []byte {
	return buildZWorkers(t, cfg, files, 0)
}

func buildZWorkers(t testing.TB, cfg zConfig, files map[string][]byte, workers int) []byte {
	t.Helper()
	c := cfg.c
	return buildFiles(t, Options{BlockSize: cfg.bs, Compression: &c, Workers: workers}, files)
}

type memWriterAt struct{ b []byte }

func (m *memWriterAt) Truncate(n int64) error {
	if int(n) < len(m.b) {
		m.b = m.b[:n]
	}
	return nil
}

// ReadAt reads back what was written: whole-file dedupe compares a copy
// with the file it would share.
func (m *memWriterAt) ReadAt(p []byte, off int64) (int, error) {
	if off >= int64(len(m.b)) {
		return 0, io.EOF
	}
	n := copy(p, m.b[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (m *memWriterAt) WriteAt(p []byte, off int64) (int, error) {
	if end := int(off) + len(p); end > len(m.b) {
		m.b = append(m.b, make([]byte, end-len(m.b))...)
	}
	return copy(m.b[off:], p), nil
}

func sortedKeys(m map[string][]byte) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// TestCompressedRoundTrip writes every input under every configuration,
// reads each file back with the package's reader, and — as root on a
// kernel with EROFS — mounts the image and compares what the kernel reads.
func TestCompressedRoundTrip(t *testing.T) {
	all := zInputs()
	small := zSmall(all)
	why := noMount()
	mountOK := why == ""
	if !mountOK {
		t.Log("kernel mount checks skipped: " + why)
	}
	for _, cfg := range zConfigs(t) {
		// lz4 gets every input everywhere; the slower codecs get them at
		// their default level with 64 KiB pclusters and tail packing (not
		// under -short: the small inputs, in fewer configurations).
		c := cfg.c
		if zShortSkip(c) {
			continue
		}
		files := all
		if c.Algorithm != AlgLZ4 && (testing.Short() || !(c.Level == codecs[c.Algorithm].defaultLevel && c.PclusterSize == 65536 && c.TailPacking && !c.Fragments)) {
			files = small
		}
		var plainSize int
		for _, d := range files {
			plainSize += (len(d) + 4095) / 4096 * 4096
		}
		t.Run(cfg.name, func(t *testing.T) {
			raw := buildZ(t, cfg, files)
			if d := os.Getenv("ZKEEP"); d != "" {
				os.WriteFile(filepath.Join(d, cfg.name+".erofs"), raw, 0o644)
			}
			img := openBytes(t, raw)
			compressed := 0
			for name, want := range files {
				ino, err := img.Lstat(name)
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				if ino.Layout == LayoutCompressedCompact || ino.Layout == LayoutCompressedFull {
					compressed++
				}
				got, err := img.ReadFile(name)
				if err != nil {
					t.Errorf("%s: read: %v", name, err)
					continue
				}
				if !bytes.Equal(got, want) {
					t.Errorf("%s: read %d bytes that differ from the %d written (first difference at %d)", name, len(got), len(want), firstDiff(got, want))
				}
			}
			if compressed < 5 {
				t.Errorf("only %d files compressed", compressed)
			}
			t.Logf("image %d bytes (files %d bytes in blocks), features %v", len(raw), plainSize,
				FeatureNames(img.Super().FeatureCompat, img.Super().FeatureIncompat))
			if mountOK {
				mountCompare(t, raw, files)
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

// noMount says why the kernel checks cannot mount images here, "" if they
// can: under -short they never do (the fast tier needs no root and no
// kernel module), else they need root and erofs in the kernel.
func noMount() string {
	if testing.Short() {
		return "-short: no kernel mounts; make test runs them"
	}
	if os.Geteuid() != 0 {
		return "cannot mount EROFS images: not root"
	}
	fs, err := os.ReadFile("/proc/filesystems")
	if err != nil || !strings.Contains(string(fs), "erofs") {
		exec.Command("modprobe", "erofs").Run()
		fs, _ = os.ReadFile("/proc/filesystems")
	}
	if !strings.Contains(string(fs), "erofs") {
		return "cannot mount EROFS images: no erofs in /proc/filesystems, even after modprobe erofs"
	}
	return ""
}

// mountCompare mounts the image and compares every file's content with
// what was written, byte for byte, as the kernel reads it; where it cannot
// mount (noMount) it says so and returns.
func mountCompare(t *testing.T, raw []byte, files map[string][]byte) {
	t.Helper()
	if why := noMount(); why != "" {
		t.Log("kernel read skipped: " + why)
		return
	}
	dir := t.TempDir()
	img := filepath.Join(dir, "z.erofs")
	if err := os.WriteFile(img, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	mnt := filepath.Join(dir, "mnt")
	os.Mkdir(mnt, 0o755)
	if out, err := exec.Command("mount", "-t", "erofs", "-o", "loop,ro", img, mnt).CombinedOutput(); err != nil {
		dmesg, _ := exec.Command("sh", "-c", "dmesg | tail -5").Output()
		t.Fatalf("mount: %v: %s\n%s", err, out, dmesg)
	}
	defer exec.Command("umount", mnt).Run()
	for name, want := range files {
		got, err := os.ReadFile(filepath.Join(mnt, name))
		if err != nil {
			dmesg, _ := exec.Command("sh", "-c", "dmesg | tail -5").Output()
			t.Errorf("kernel: %s: %v\n%s", name, err, dmesg)
			continue
		}
		if !bytes.Equal(got, want) {
			t.Errorf("kernel: %s: read %d bytes that differ from the %d written (first difference at %d)", name, len(got), len(want), firstDiff(got, want))
		}
	}
}

// TestWorkersSameImage: the image does not depend on the number of
// compression workers.
func TestWorkersSameImage(t *testing.T) {
	all := zInputs()
	// The slower codecs get the small inputs and, to span several
	// compression segments, the zeros; lz4 gets all.
	some := zSmall(all, "zeros-5M3")
	for _, cfg := range zConfigs(t) {
		// Every codec at its default level, with tail packing at 64 KiB
		// and with fragments at 4 KiB: the other configurations take the
		// same paths.
		c := cfg.c
		files := all
		if c.Algorithm != AlgLZ4 {
			files = some
		}
		if c.Level != codecs[c.Algorithm].defaultLevel ||
			!(c.PclusterSize == 65536 && c.TailPacking && !c.Fragments || c.PclusterSize == 4096 && !c.TailPacking && c.Fragments) {
			continue
		}
		workers := []int{2, 3, 8}
		if testing.Short() {
			workers = []int{3}
		}
		t.Run(cfg.name, func(t *testing.T) {
			one := buildZWorkers(t, cfg, files, 1)
			for _, n := range workers {
				if got := buildZWorkers(t, cfg, files, n); !bytes.Equal(got, one) {
					t.Errorf("%d workers: image of %d bytes differs from one worker's (%d bytes) at %d", n, len(got), len(one), firstDiff(got, one))
				}
			}
		})
	}
}
