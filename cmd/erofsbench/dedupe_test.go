package main

import (
	"bytes"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// syntheticBase is a small source tree: n files of 20 to 200 lines.
func syntheticBase(n int) []verFile {
	rng := rand.New(rand.NewPCG(1, 2))
	var base []verFile
	for i := range n {
		var b []byte
		for j := range 20 + rng.IntN(180) {
			b = fmt.Appendf(b, "int f%d_%d(void) { return %d; }\n", i, j, rng.IntN(1000))
		}
		base = append(base, verFile{fmt.Sprintf("d%d/f%03d.c", i%7, i), b})
	}
	return base
}

// readTree maps every regular file under dir (relative, slash-separated)
// to its content.
func readTree(t *testing.T, dir string) map[string]string {
	t.Helper()
	m := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		b, err := os.ReadFile(p)
		rel, _ := filepath.Rel(dir, p)
		m[filepath.ToSlash(rel)] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestVersionsDeterministic writes the versions tree twice from one seed
// and expects the same tar bytes, and a different tree from another seed.
func TestVersionsDeterministic(t *testing.T) {
	base := syntheticBase(300)
	tmp := t.TempDir()
	mt := timeFixed()
	var sums []string
	for i, seed := range []uint64{7, 7, 8} {
		dir := filepath.Join(tmp, strconv.Itoa(i))
		if err := writeVersions(dir, base, 5, seed, defaultVersionParams); err != nil {
			t.Fatal(err)
		}
		st, err := writeTarMtime(dir, filepath.Join(tmp, strconv.Itoa(i)+".tar"), &mt)
		if err != nil {
			t.Fatal(err)
		}
		sums = append(sums, st.TarSHA256)
		if i == 0 && st.Files != 5*len(base) {
			t.Errorf("%d files, want %d", st.Files, 5*len(base))
		}
	}
	if sums[0] != sums[1] {
		t.Errorf("same seed, different trees: %s vs %s", sums[0], sums[1])
	}
	if sums[0] == sums[2] {
		t.Errorf("seeds 7 and 8 give the same tree")
	}
	// The first release is the base itself.
	v1 := readTree(t, filepath.Join(tmp, "0", "v01"))
	for _, f := range base {
		if v1[f.path] != string(f.data) {
			t.Fatalf("v01/%s is not the base file", f.path)
		}
	}
}

// TestNextVersion checks what one release changes: a few files edited in
// the middle (prefix and suffix kept, length changed, so that the rest of
// the file shifts), a few renamed with their content, the rest shared.
func TestNextVersion(t *testing.T) {
	base := syntheticBase(400)
	rng := rand.New(rand.NewChaCha8(seedBytes(3)))
	next := nextVersion(rng, base, 2, defaultVersionParams)
	if len(next) != len(base) {
		t.Fatalf("%d files, want %d", len(next), len(base))
	}
	var edited, renamedN, same, shifted int
	for i := range base {
		a, b := base[i], next[i]
		switch {
		case a.path != b.path:
			renamedN++
			if !bytes.Equal(a.data, b.data) {
				t.Errorf("%s renamed to %s and changed", a.path, b.path)
			}
			if want := strings.TrimSuffix(a.path, ".c") + ".r02.c"; b.path != want {
				t.Errorf("renamed to %q, want %q", b.path, want)
			}
		case !bytes.Equal(a.data, b.data):
			edited++
			pre := commonPrefix(a.data, b.data)
			suf := commonSuffix(a.data[pre:], b.data[pre:])
			if pre < len(a.data)/8 || suf < len(a.data)/8 {
				t.Errorf("%s: edit not in the middle: prefix %d, suffix %d of %d bytes", a.path, pre, suf, len(a.data))
			}
			if len(a.data) != len(b.data) {
				shifted++
			}
		default:
			same++
			if &a.data[0] != &b.data[0] {
				t.Errorf("%s: unchanged file not shared", a.path)
			}
		}
	}
	if wantEdit := 16; edited != wantEdit { // 4% of 400
		t.Errorf("%d files edited, want %d", edited, wantEdit)
	}
	if renamedN != 2 { // 0.5% of 400
		t.Errorf("%d files renamed, want 2", renamedN)
	}
	if shifted < edited*3/4 {
		t.Errorf("only %d of %d edits shift the rest of their file", shifted, edited)
	}
	if same != len(base)-edited-renamedN {
		t.Errorf("%d files unchanged", same)
	}
	if renamed("a/b/x.r03.c", 7) != "a/b/x.r07.c" || renamed("Makefile", 2) != "Makefile.r02" {
		t.Errorf("renamed: %q %q", renamed("a/b/x.r03.c", 7), renamed("Makefile", 2))
	}
}

func commonPrefix(a, b []byte) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

func commonSuffix(a, b []byte) int {
	n := 0
	for n < len(a) && n < len(b) && a[len(a)-1-n] == b[len(b)-1-n] {
		n++
	}
	return n
}

// TestDedupeModes checks the mode table: every mode measured against a
// no-dedupe mode of its codec, the baselines really without dedupe in both
// builders, and each builder given the same chunk size and the flags the
// mode is about.
func TestDedupeModes(t *testing.T) {
	oci := &tool{kind: kindOcierofs, WorkersFlag: true}
	mk := &tool{kind: kindMkfsErofs, WorkersFlag: true, modern: true}
	seen := map[string]bool{}
	for _, m := range dedupeModes {
		if seen[m.Name] {
			t.Errorf("mode %s twice", m.Name)
		}
		seen[m.Name] = true
		base, ok := findMode(m.Base)
		if !ok || base.Base != base.Name || base.Codec != m.Codec {
			t.Errorf("%s: base %q is not a baseline of codec %s", m.Name, m.Base, m.Codec)
		}
		if _, ok := codecs[m.Codec]; !ok {
			t.Errorf("%s: unknown codec %s", m.Name, m.Codec)
		}
		o := strings.Join(oci.dedupeArgs(m, "in.tar", "out.img"), " ")
		for _, w := range []string{"--workers=1", "--pcluster-size=4K", "--tail-packing=false", "--compress=" + codecs[m.Codec].ocierofs, "out.img in.tar"} {
			if !strings.Contains(o, w) {
				t.Errorf("%s: ocierofs args %q lack %q", m.Name, o, w)
			}
		}
		if m.Name == m.Base && !strings.Contains(o, "--no-file-dedupe") {
			t.Errorf("baseline %s: ocierofs dedupes files: %q", m.Name, o)
		}
		if m.NoMkfs != "" {
			if mk.hasMode(m) {
				t.Errorf("%s: mkfs.erofs has a cell though it has no such mode", m.Name)
			}
			continue
		}
		a := mk.dedupeArgs(m, "in.tar", "out.img")
		s := strings.Join(a, " ")
		for _, w := range []string{"--workers=1", "-C4096", "^ztailpacking", "--tar=" + m.MkfsTar + " out.img in.tar"} {
			if !strings.Contains(s, w) {
				t.Errorf("%s: mkfs.erofs args %q lack %q", m.Name, s, w)
			}
		}
		if m.Name == m.Base && !strings.Contains(s, ",^dedupe") {
			t.Errorf("baseline %s: mkfs.erofs may dedupe: %q", m.Name, s)
		}
		// Chunk sizes agree; mkfs.erofs dedupes chunks only when dedupe
		// is not forced off.
		for _, f := range m.Ocierofs {
			if v, ok := strings.CutPrefix(f, "--chunk-size="); ok {
				n, err := parseSize(v)
				if err != nil || !slices.Contains(a, "--chunksize="+strconv.FormatInt(n, 10)) {
					t.Errorf("%s: ocierofs %s, mkfs.erofs %q", m.Name, f, s)
				}
				if strings.Contains(s, "^dedupe") {
					t.Errorf("%s: ^dedupe turns mkfs.erofs' chunk dedupe off: %q", m.Name, s)
				}
			}
			if f == "--dedupe" && !strings.Contains(s, ",dedupe") {
				t.Errorf("%s: ocierofs --dedupe but mkfs.erofs %q", m.Name, s)
			}
			if f == "--tar-index" && m.MkfsTar != "i" {
				t.Errorf("%s: ocierofs --tar-index but mkfs.erofs --tar=%s", m.Name, m.MkfsTar)
			}
		}
	}
	for _, w := range []string{"none", "file", "chunk-4k", "chunk-64k", "chunk-1m", "lz4", "lz4-dedupe", "zstd", "zstd-dedupe", "tar-index"} {
		if !seen[w] {
			t.Errorf("no mode %s", w)
		}
	}
	if !flagRejected([]byte("Incorrect Usage: flag provided but not defined: -chunk-size")) ||
		!flagRejected([]byte("mkfs.erofs: unrecognized option '--chunksize=4096'")) ||
		flagRejected([]byte("ocierofs: write image: no space left on device")) {
		t.Error("flagRejected misclassifies")
	}
}

// parseSize reads 4K, 64K, 1M or a plain byte count.
func parseSize(s string) (int64, error) {
	mult := int64(1)
	if v, ok := strings.CutSuffix(s, "K"); ok {
		mult, s = 1<<10, v
	} else if v, ok := strings.CutSuffix(s, "M"); ok {
		mult, s = 1<<20, v
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n * mult, err
}

// TestDedupeReport renders made-up runs: the saving and the time cost
// against the baseline, an unsupported mode, and mkfs.erofs' missing one.
func TestDedupeReport(t *testing.T) {
	b := &bench{
		opts: &options{suite: "dedupe", modes: []string{"none", "file", "chunk-4k"}, runs: 3, pinCPU: 1},
		tools: []*tool{
			{Name: "ocierofs", kind: kindOcierofs, Unsupported: map[string]string{"chunk-4k": unsupportedPrefix + "flag provided but not defined: -chunk-size"}},
			{Name: "mkfs.erofs", kind: kindMkfsErofs, Version: "1.9.3", Unsupported: map[string]string{}},
		},
		manif: &manifest{Datasets: map[string]*datasetInfo{}},
	}
	add := func(tool, mode string, wall float64, size int64) {
		b.runs = append(b.runs, &runResult{Suite: "dedupe", Mode: mode, Dataset: "versions", Tool: tool, Codec: "none", Workers: 1,
			WallS: wall, UserS: wall, MaxRSSKiB: 2048, ImageBytes: size})
	}
	for _, w := range []float64{2, 2.1, 1.9} {
		add("ocierofs", "none", w, 1000000)
		add("ocierofs", "file", w*1.5, 600000)
		add("mkfs.erofs", "none", w*2, 1100000)
		add("mkfs.erofs", "chunk-4k", w*3, 440000)
	}
	md := b.dedupeMarkdown()
	for _, w := range []string{
		"| none | 2.000 / 2.000 / 2.0 | 1,000,000 | (baseline) | (baseline) | 4.000 / 4.000 / 2.0 | 1,100,000 | (baseline) | (baseline) | 0.909 |",
		"| file | 3.000 / 3.000 / 2.0 | 600,000 | 400,000 (40.0%) | 1.50× wall, 1.50× CPU | no such mode | – | – | – | – |",
		"| chunk-4k | unsupported | – | – | – | 6.000 / 6.000 / 2.0 | 440,000 | 660,000 (60.0%) | 1.50× wall, 1.50× CPU | – |",
		"ocierofs chunk-4k: unsupported: flag provided but not defined: -chunk-size",
	} {
		if !strings.Contains(md, w) {
			t.Errorf("report lacks %q:\n%s", w, md)
		}
	}
	if thousands(-1234567) != "-1,234,567" || thousands(999) != "999" {
		t.Errorf("thousands: %s %s", thousands(-1234567), thousands(999))
	}
}

// TestDevNumbers round-trips glibc's dev_t encoding, which the tar of the
// debian rootfs uses for its /dev nodes.
func TestDevNumbers(t *testing.T) {
	mkdev := func(maj, min uint64) uint64 {
		return (maj&0xfff)<<8 | (maj&^0xfff)<<32 | min&0xff | (min&^0xff)<<12
	}
	for _, c := range [][2]uint64{{1, 3}, {5, 1}, {259, 300000}, {4095, 255}, {4096, 1 << 19}} {
		d := mkdev(c[0], c[1])
		if devMajor(d) != int64(c[0]) || devMinor(d) != int64(c[1]) {
			t.Errorf("%d:%d -> %#x -> %d:%d", c[0], c[1], d, devMajor(d), devMinor(d))
		}
	}
	if devMajor(0x103) != 1 || devMinor(0x103) != 3 { // /dev/null
		t.Error("/dev/null is not 1:3")
	}
}
