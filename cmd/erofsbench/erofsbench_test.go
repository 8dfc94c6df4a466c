package main

import (
	"archive/tar"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestWriteTar checks that the dataset tar is an OCI-layer-like PAX tar:
// sorted names relative to the root, owner 0:0, whole-second mtimes,
// symlinks and hard links as links, and the same bytes when written twice.
func TestWriteTar(t *testing.T) {
	dir := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(dir, "b", "c"), 0o755))
	must(os.WriteFile(filepath.Join(dir, "b", "c", "z"), []byte("zzz"), 0o600))
	must(os.WriteFile(filepath.Join(dir, "a"), []byte("hello"), 0o644))
	must(os.Link(filepath.Join(dir, "a"), filepath.Join(dir, "b", "hard")))
	must(os.Symlink("../a", filepath.Join(dir, "b", "sym")))
	odd := time.Unix(1600000000, 123456789)
	must(os.Chtimes(filepath.Join(dir, "a"), odd, odd))

	out := t.TempDir()
	st1, err := writeTar(dir, filepath.Join(out, "1.tar"))
	must(err)
	st2, err := writeTar(dir, filepath.Join(out, "2.tar"))
	must(err)
	if st1.TarSHA256 != st2.TarSHA256 || st1.TarBytes != st2.TarBytes {
		t.Fatalf("two tars of one tree differ: %+v vs %+v", st1, st2)
	}
	if st1.Files != 2 || st1.Dirs != 2 || st1.Symlinks != 1 || st1.Hardlinks != 1 || st1.Bytes != 8 {
		t.Fatalf("counts: %+v", st1)
	}

	f, err := os.Open(filepath.Join(out, "1.tar"))
	must(err)
	defer f.Close()
	tr := tar.NewReader(f)
	var names []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		must(err)
		names = append(names, h.Name)
		if h.Uid != 0 || h.Gid != 0 || h.Uname != "" || h.Gname != "" {
			t.Errorf("%s: owner %d:%d %q:%q", h.Name, h.Uid, h.Gid, h.Uname, h.Gname)
		}
		if h.ModTime.Nanosecond() != 0 || !h.AccessTime.IsZero() || !h.ChangeTime.IsZero() {
			t.Errorf("%s: times %v %v %v", h.Name, h.ModTime, h.AccessTime, h.ChangeTime)
		}
		switch h.Name {
		case "a":
			if h.Typeflag != tar.TypeReg || h.ModTime.Unix() != 1600000000 || h.Mode != 0o644 {
				t.Errorf("a: %+v", h)
			}
		case "b/hard":
			if h.Typeflag != tar.TypeLink || h.Linkname != "a" {
				t.Errorf("b/hard: type %c link %q", h.Typeflag, h.Linkname)
			}
		case "b/sym":
			if h.Typeflag != tar.TypeSymlink || h.Linkname != "../a" {
				t.Errorf("b/sym: type %c link %q", h.Typeflag, h.Linkname)
			}
		}
	}
	want := []string{"a", "b/", "b/c/", "b/c/z", "b/hard", "b/sym"}
	if !slices.Equal(names, want) {
		t.Fatalf("members %q, want %q", names, want)
	}
}

// TestRandomStream pins the generator of rand256 and small100k: ChaCha8 is
// specified by the Go project, so these bytes (the start of random.bin)
// must not change between Go releases or machines; if they do, datasets
// made on two machines are no longer the same.
func TestRandomStream(t *testing.T) {
	rng := rand.NewChaCha8(seedBytes(20240601 + 1))
	b := make([]byte, 16)
	rng.Read(b)
	if got, want := hex.EncodeToString(b), "fd971b4a9fa0d5daf3743e548f40109b"; got != want {
		t.Fatalf("rand256 starts %s, want %s", got, want)
	}
	if seedBytes(1) == seedBytes(2) {
		t.Fatal("seeds 1 and 2 give one key")
	}
}

func TestVersionLess(t *testing.T) {
	in := []string{"/usr/src/linux-source-6.12.tar.xz", "/usr/src/linux-source-6.9.tar.xz", "/usr/src/linux-source-5.10.tar.xz", "/usr/src/linux-source-6.1.tar.xz"}
	slices.SortFunc(in, func(a, b string) int {
		if versionLess(a, b) {
			return -1
		}
		if versionLess(b, a) {
			return 1
		}
		return 0
	})
	want := []string{"/usr/src/linux-source-5.10.tar.xz", "/usr/src/linux-source-6.1.tar.xz", "/usr/src/linux-source-6.9.tar.xz", "/usr/src/linux-source-6.12.tar.xz"}
	if !slices.Equal(in, want) {
		t.Fatalf("got %q", in)
	}
}

func TestArgs(t *testing.T) {
	o := &tool{kind: kindOcierofs, WorkersFlag: true, ExtendedFlag: true}
	got := strings.Join(o.args("zstd", 2, "in.tar", "out.img", true), " ")
	for _, w := range []string{"--compress=zstd,level=1", "--pcluster-size=4K", "--max-extent=64K", "--tail-packing=false", "--fragments=false", "--extended-inodes", "--workers=2", "out.img in.tar"} {
		if !strings.Contains(got, w) {
			t.Errorf("ocierofs args %q lack %q", got, w)
		}
	}
	// ocierofs runs at its defaults otherwise: whole-file dedupe on, the
	// UUID its own.
	for _, nw := range []string{"--no-file-dedupe", "--uuid"} {
		if strings.Contains(got, nw) {
			t.Errorf("ocierofs args %q have %q", got, nw)
		}
	}
	if got := strings.Join((&tool{kind: kindOcierofs}).args("none", 1, "in.tar", "out.img", true), " "); strings.Contains(got, "--extended-inodes") {
		t.Errorf("ocierofs without the flag: args %q", got)
	}
	mk := &tool{Name: "mkfs.erofs", ExtendedFlag: true}
	if got := inodesSetting([]*tool{{Name: "ocierofs", ExtendedFlag: true}, mk}); !strings.HasPrefix(got, "extended inodes (") {
		t.Errorf("both with extended inodes: %q", got)
	}
	if got := inodesSetting([]*tool{{Name: "ocierofs"}, mk}); !strings.Contains(got, "except ocierofs") {
		t.Errorf("ocierofs without the flag: %q", got)
	}
	m := &tool{kind: kindMkfsErofs, WorkersFlag: true, modern: true}
	got = strings.Join(m.args("deflate", 1, "in.tar", "out.img", true), " ")
	for _, w := range []string{"-zdeflate,level=6", "-C4096", "--max-extent-bytes=65536", "^ztailpacking", "--workers=1", "--tar=f out.img in.tar"} {
		if !strings.Contains(got, w) {
			t.Errorf("mkfs.erofs args %q lack %q", got, w)
		}
	}
	old := &tool{kind: kindMkfsErofs}
	got = strings.Join(old.args("none", 1, "dir", "out.img", false), " ")
	if strings.Contains(got, "-z") || strings.Contains(got, "^") || strings.Contains(got, "--workers") || strings.Contains(got, "--tar") || strings.Contains(got, "-b4096") {
		t.Errorf("mkfs.erofs 1.5 args %q carry options it lacks", got)
	}
}

// TestReport checks medians, the ratio columns and the size deltas on
// made-up runs.
func TestReport(t *testing.T) {
	b := &bench{
		opts:  &options{codecs: []string{"lz4"}, workers: []string{"1"}, runs: 3, input: "tar"},
		tools: []*tool{{Name: "ocierofs", kind: kindOcierofs}, {Name: "mkfs.erofs", kind: kindMkfsErofs, Version: "1.9.3"}},
		manif: &manifest{Datasets: map[string]*datasetInfo{}},
	}
	add := func(tool string, wall float64, rss int64, size int64) {
		b.runs = append(b.runs, &runResult{Dataset: "src256", Tool: tool, Codec: "lz4", Workers: 1,
			Args:  []string{tool, "-z" + strconv.Itoa(len(b.runs))},
			WallS: wall, UserS: wall / 2, SysS: wall / 2, MaxRSSKiB: rss, ImageBytes: size})
	}
	add("ocierofs", 1.0, 10240, 99<<20)
	add("ocierofs", 9.0, 10240, 99<<20) // an outlier the median drops
	add("ocierofs", 1.2, 10240, 99<<20)
	add("mkfs.erofs", 2.4, 40960, 100<<20)
	add("mkfs.erofs", 2.2, 40960, 100<<20)
	add("mkfs.erofs", 2.3, 40960, 100<<20)
	for i, f := range []float64{1, 1, 1, 0.2, 1, 1} {
		b.runs[i].InputCached = &f
	}
	c := b.cell(cellKey{"src256", "ocierofs", "lz4", 1})
	if c.wall != 1.2 || c.rss != 10 {
		t.Fatalf("median cell %+v", c)
	}
	md := b.markdown()
	for _, w := range []string{"| lz4 | 1.200 / 1.200 / 10.0 | 2.300 / 2.300 / 40.0 | 1.92×, 1.92×, 4.0× |", "99.00 / 100.00 (-1.00%)",
		"5 of 6 builds found all of it in the page cache, the least 20.0% (src256, mkfs.erofs, lz4)",
		"```sh\nocierofs -z0\nmkfs.erofs -z3\n```"} {
		if !strings.Contains(md, w) {
			t.Errorf("report lacks %q:\n%s", w, md)
		}
	}
}

// TestCPUSpeeds: every CPU this process may use is timed, and the bound
// of all workers over one pinned worker follows from the speeds.
func TestCPUSpeeds(t *testing.T) {
	s, err := measureCPUSpeeds()
	if err != nil {
		t.Fatal(err)
	}
	if len(s) != runtime.NumCPU() {
		t.Errorf("%d CPUs timed, want %d", len(s), runtime.NumCPU())
	}
	for _, c := range s {
		if c.MBps <= 0 {
			t.Errorf("CPU %d: %.1f MB/s", c.CPU, c.MBps)
		}
	}
	speeds := []cpuSpeed{{0, 40}, {1, 60}, {2, 60}}
	if b := scalingBound(speeds, 1); b < 2.666 || b > 2.667 {
		t.Errorf("bound over the fast CPU = %.3f, want 160/60", b)
	}
	if b := scalingBound(speeds, 7); b != 0 {
		t.Errorf("bound over a CPU not measured = %.3f, want 0", b)
	}
	if l := cpuSpeedLine(speeds, 0); !strings.Contains(l, "at most 4.00× as fast as one worker pinned to CPU 0") {
		t.Errorf("report line %q", l)
	}
}

// TestPeakRSSNotInherited: a build started from erofsbench (os/exec, that
// is vfork) inherits erofsbench's peak RSS at exec; run under GNU time, its
// own peak is reported.
func TestPeakRSSNotInherited(t *testing.T) {
	ballast := make([]byte, 96<<20)
	for i := range ballast {
		ballast[i] = 1
	}
	b := &bench{opts: &options{pinCPU: -1, suite: "dedupe", imgDir: t.TempDir()}, logf: t.Logf}
	if err := b.startMeasure(); err != nil {
		t.Fatal(err)
	}
	img := filepath.Join(b.opts.imgDir, "x.img")
	sh := &tool{Name: "sh", Path: "/bin/sh", kind: kindMkfsErofs}
	run := func() int64 {
		res := &runResult{Workers: 1, Run: 1}
		b.execRun(sh, res, []string{"-c", "echo > " + img}, "", img, false)
		if res.Err != "" {
			t.Fatal(res.Err)
		}
		return res.MaxRSSKiB
	}
	if b.gnuTime == "" {
		t.Skip("no GNU time (apt-get install time)")
	}
	gnuTime := b.gnuTime
	b.gnuTime = ""
	t.Logf("a shell started by erofsbench itself: peak %d KiB", run())
	b.gnuTime = gnuTime
	if got := run(); got > 32<<10 {
		t.Errorf("under GNU time a shell's peak is %d KiB while erofsbench holds %d MiB: still inherited", got, len(ballast)>>20)
	}
	ballast[0] = 2 // live until here
}

// TestReportCopies: builds run by -copies stay out of the single-worker
// cells, and their table gives the bound on the all-worker speedup.
func TestReportCopies(t *testing.T) {
	b := &bench{
		opts:  &options{codecs: []string{"lz4"}, workers: []string{"1", "all"}, runs: 1, input: "tar"},
		tools: []*tool{{Name: "ocierofs", kind: kindOcierofs}},
		manif: &manifest{Datasets: map[string]*datasetInfo{}},
	}
	add := func(workers, copies int, wall float64) {
		b.runs = append(b.runs, &runResult{Dataset: "src256", Tool: "ocierofs", Codec: "lz4", Workers: workers, Copies: copies,
			WallS: wall, UserS: wall, MaxRSSKiB: 10240, ImageBytes: 1 << 20})
	}
	n := cpus()
	if n < 2 {
		t.Skip("one CPU: nothing runs at once")
	}
	add(1, 0, 1.0)
	add(n, 0, 0.8)
	for range n {
		add(1, n, 1.25)
	}
	// Only some runs measured by GNU time (the first one failed, say):
	// the report still says where its RSS figures come from.
	b.runs[len(b.runs)-1].RSSBy = "GNU time"
	if c := b.cell(cellKey{"src256", "ocierofs", "lz4", 1}); c.wall != 1.0 || c.n != 1 {
		t.Fatalf("the single-worker cell took in the copies: %+v", c)
	}
	md := b.markdown()
	want := fmt.Sprintf("| lz4 | ocierofs | 1.000 / 1.000 / 10.0 | 1.250 / 1.250 / 10.0 | %.2f× | 1.25× |", float64(n)/1.25)
	for _, w := range []string{want, "Peak RSS as GNU time reports it"} {
		if !strings.Contains(md, w) {
			t.Errorf("report lacks %q:\n%s", w, md)
		}
	}
}

// TestMeasureOrder: run by run, the single-worker and all-worker builds
// take turns (then the copies), so that a CPU slow for a while weighs on
// both sides of the speedup; the copies are pinned to every CPU.
func TestMeasureOrder(t *testing.T) {
	if cpus() < 2 {
		t.Skip("one CPU: no all-worker runs")
	}
	if _, err := exec.LookPath("taskset"); err != nil {
		t.Skip("no taskset: nothing is pinned")
	}
	dir := t.TempDir()
	log := filepath.Join(dir, "log")
	fake := filepath.Join(dir, "fake-ocierofs")
	// The builder records its command line and writes the image (the
	// argument before the input).
	script := "#!/bin/sh\nfor a; do prev=$out; out=$a; done\necho \"$*\" >> " + log + "\necho image > \"$prev\"\n"
	if err := os.WriteFile(fake, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "tar"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tar", "src256.tar"), make([]byte, 1024), 0o644); err != nil {
		t.Fatal(err)
	}
	b := &bench{
		opts: &options{data: dir, imgDir: filepath.Join(dir, "img"), codecs: []string{"lz4"}, workers: []string{"1", "all"},
			runs: 2, input: "tar", pinCPU: 1, copies: true},
		tools:  []*tool{{Name: "ocierofs", Path: fake, kind: kindOcierofs, WorkersFlag: true, TarInput: true, Unsupported: map[string]string{}}},
		manif:  &manifest{Datasets: map[string]*datasetInfo{}},
		logf:   t.Logf,
		noCPUs: true,
	}
	if err := b.measure([]string{"src256"}); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range b.runs {
		if r.Err != "" {
			t.Fatalf("run failed: %s", r.Err)
		}
		k := fmt.Sprintf("w%d run %d", r.Workers, r.Run)
		if r.Copies > 0 {
			k = fmt.Sprintf("copy on %s run %d", r.Pinned, r.Run)
		}
		got = append(got, k)
	}
	var want []string
	for r := 1; r <= 2; r++ {
		want = append(want, fmt.Sprintf("w1 run %d", r), fmt.Sprintf("w%d run %d", cpus(), r))
		for i := range cpus() {
			want = append(want, fmt.Sprintf("copy on %d run %d", i, r))
		}
	}
	if strings.Join(got, ", ") != strings.Join(want, ", ") {
		t.Errorf("builds in the order\n%s\nwant\n%s", strings.Join(got, ", "), strings.Join(want, ", "))
	}
	lines, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(lines), "\n"); n != len(want) {
		t.Errorf("the builder ran %d times, want %d", n, len(want))
	}
}

// TestOcierofsVersion: the report names ocierofs as its --version does.
func TestOcierofsVersion(t *testing.T) {
	b := filepath.Join(t.TempDir(), "ocierofs")
	cmd := exec.Command("go", "build", "-o", b, "-ldflags", "-X github.com/ocierofs/ocierofs/cmd/internal/version.Version=v9.8.7-test", "../ocierofs")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	tl, err := newOcierofs(b)
	if err != nil {
		t.Fatal(err)
	}
	if want := "v9.8.7-test (" + runtime.Version() + ")"; tl.Version != want || !tl.WorkersFlag {
		t.Errorf("version %q, workers flag %v; want %q, true", tl.Version, tl.WorkersFlag, want)
	}
}
