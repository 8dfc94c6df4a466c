package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"
	"golang.org/x/sys/unix"

	"github.com/ocierofs/ocierofs/convert"
	"github.com/ocierofs/ocierofs/convert/fstree"
)

// built is the directory of the programs the tests run, built once per
// test binary and removed by TestMain.
var built struct {
	once sync.Once
	dir  string
	err  error
}

// programs builds ocierofs and ocierofs-mirror, once, into one directory,
// as they are installed (serve and sync find the mirror beside ocierofs),
// and returns it. Tests copy a program elsewhere to run it differently.
func programs(t *testing.T) string {
	t.Helper()
	built.once.Do(func() {
		built.dir, built.err = os.MkdirTemp("", "ocierofs-bin-")
		for pkg, name := range map[string]string{".": "ocierofs", "../ocierofs-mirror": "ocierofs-mirror"} {
			if built.err != nil {
				return
			}
			if out, err := exec.Command("go", "build", "-o", filepath.Join(built.dir, name), pkg).CombinedOutput(); err != nil {
				built.err = fmt.Errorf("go build %s: %v\n%s", pkg, err, out)
			}
		}
	})
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.dir
}

// bin is the ocierofs the tests run (programs).
func bin(t *testing.T) string {
	t.Helper()
	return filepath.Join(programs(t), "ocierofs")
}

func run(t *testing.T, b string, args ...string) (string, string, int) {
	t.Helper()
	return runStdin(t, nil, b, args...)
}

// runStdin is run with stdin.
func runStdin(t *testing.T, stdin io.Reader, b string, args ...string) (string, string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	cmd := exec.Command(b, args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), errb.String(), code
}

func TestCLI(t *testing.T) {
	b := bin(t)
	dir := t.TempDir()
	img := filepath.Join(dir, "demo.erofs")
	layer := "../../testdata/demo-layer.tar.gz"
	if _, e, code := run(t, b, "mkfs", "-q", img, layer); code != 0 {
		t.Fatalf("mkfs: exit %d: %s", code, e)
	}
	if out, e, code := run(t, b, "verify", img, layer); code != 0 || !strings.Contains(out, "matches") {
		t.Errorf("verify of its own source: exit %d: %s%s", code, out, e)
	}
	// Without -U the UUID derives from a fast hash of the tar, and mkfs
	// prints no diffID; with --diff-id it derives from the diffID, which
	// mkfs prints, as containerd's; with -U there is nothing to hash. The
	// images differ only in the UUID.
	uuidOf := func(img string) string {
		t.Helper()
		out, _, _ := run(t, b, "inspect", img)
		uuid := regexp.MustCompile(`uuid:\s+(\S+)`).FindStringSubmatch(out)
		if uuid == nil {
			t.Fatalf("inspect prints no uuid:\n%s", out)
		}
		return uuid[1]
	}
	if _, e, code := run(t, b, "mkfs", img+".2", layer); code != 0 || strings.Contains(e, "diffID") {
		t.Errorf("mkfs: exit %d, and it should print no diffID: %q", code, e)
	}
	tarBytes := gunzipFile(t, layer)
	if got, want := uuidOf(img), formatUUID(convert.ContentUUID(xxhash.Sum64(tarBytes))); got != want {
		t.Errorf("mkfs: UUID %s, want %s (from the tar's xxhash64)", got, want)
	}
	_, e, _ := run(t, b, "mkfs", "--diff-id", img+".2", layer)
	diffID := regexp.MustCompile(`diffID (sha256:[0-9a-f]{64})`).FindStringSubmatch(e)
	if diffID == nil {
		t.Fatalf("mkfs --diff-id prints no diffID: %q", e)
	}
	if got, want := uuidOf(img+".2"), formatUUID(convert.LayerUUID(diffID[1])); got != want {
		t.Errorf("mkfs --diff-id: UUID %s, want containerd's %s", got, want)
	}
	uuid := []string{"", uuidOf(img)} // uuid[1] is img's, as checked below
	for _, im := range []string{img, img + ".2"} {
		u := uuidOf(im)
		if _, e, code := run(t, b, "mkfs", "-U", u, img+".3", layer); code != 0 || strings.Contains(e, "diffID") {
			t.Errorf("mkfs -U: exit %d, and it should print no diffID: %q", code, e)
		}
		a, _ := os.ReadFile(im)
		c, _ := os.ReadFile(img + ".3")
		if !bytes.Equal(a, c) {
			t.Errorf("mkfs -U with the derived UUID %s differs from %s", u, im)
		}
	}
	// A different source: verify must list differences and exit 1.
	other := filepath.Join(dir, "other.erofs")
	if _, e, code := run(t, b, "mkfs", "-q", other, "../../testdata"); code != 0 {
		t.Fatalf("mkfs of a directory: exit %d: %s", code, e)
	}
	out, e, code := run(t, b, "verify", other, layer)
	if code != 1 || !strings.Contains(out, "only in source: etc/hostname") || !strings.Contains(out, "only in image: mkdemo.sh") || !strings.Contains(e, "differences") {
		t.Errorf("verify of another tree: exit %d, stdout %q, stderr %q", code, out, e)
	}
	if out, _, code := run(t, b, "cat", img, "/etc/hostname"); code != 0 || out != "demo\n" {
		t.Errorf("cat: %q exit %d", out, code)
	}
	// Several files, one after another; errors name the image and the
	// path; what is no regular file is an error, not nothing.
	if out, _, code := run(t, b, "cat", img, "/etc/hostname", "etc/hostname"); code != 0 || out != "demo\ndemo\n" {
		t.Errorf("cat of two paths: %q exit %d", out, code)
	}
	// As GNU cat, the paths after a missing one are still written.
	if out, e, code := run(t, b, "cat", img, "/nope", "/etc/hostname", "/etc"); code != 1 || out != "demo\n" ||
		e != "ocierofs: "+img+": /nope: no such file or directory\nocierofs: "+img+": /etc: is a directory\n" {
		t.Errorf("cat past a missing path: exit %d, %q, %q", code, out, e)
	}
	for _, tc := range []struct{ cmd, path, want string }{
		{"cat", "/nope", img + ": /nope: no such file or directory"},
		{"ls", "nope/x", img + ": /nope/x: no such file or directory"},
		{"cat", "/etc", img + ": /etc: is a directory"},
		{"cat", "/etc/null", img + ": /etc/null: not a regular file: a character device"},
	} {
		if out, e, code := run(t, b, tc.cmd, img, tc.path); code != 1 || out != "" || e != "ocierofs: "+tc.want+"\n" {
			t.Errorf("%s %s: exit %d, %q %q, want %q", tc.cmd, tc.path, code, out, e, tc.want)
		}
	}
	if out, _, code := run(t, b, "ls", "-l", img, "usr/bin"); code != 0 || !strings.Contains(out, "-rwsr-xr-x") || !strings.Contains(out, "hi -> hello") {
		t.Errorf("ls -l: exit %d:\n%s", code, out)
	}
	if out, _, code := run(t, b, "inspect", img); code != 0 || !regexp.MustCompile(`minimum kernel:\s+Linux 5.4`).MatchString(out) {
		t.Errorf("inspect: exit %d:\n%s", code, out)
	}
	// -o json: the same facts, for a script.
	if out, e, code := run(t, b, "inspect", "-o", "json", img); code != 0 {
		t.Errorf("inspect -o json: exit %d: %s", code, e)
	} else {
		var rep struct {
			Size, Blocks      int64
			BlockSize, Inodes int
			UUID, MinKernel   string
			Checksum          string
			ByType            map[string]int
		}
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatalf("inspect -o json printed %q: %v", out, err)
		}
		sum := 0
		for _, n := range rep.ByType {
			sum += n
		}
		if rep.UUID != uuid[1] || rep.MinKernel != "5.4" || rep.Checksum != "ok" || rep.Blocks*int64(rep.BlockSize) != rep.Size || sum != rep.Inodes || rep.Inodes == 0 {
			t.Errorf("inspect -o json: %+v", rep)
		}
	}
	// Cut short (a download that stopped): the superblock, what is
	// wrong, and the error (review 20-b: the error alone).
	cut := filepath.Join(dir, "cut.erofs")
	if err := os.WriteFile(cut, readFile(t, img)[:5000], 0o644); err != nil {
		t.Fatal(err)
	}
	if out, e, code := run(t, b, "inspect", cut); code != 1 || !regexp.MustCompile(`uuid:\s+`+uuid[1]).MatchString(out) ||
		!regexp.MustCompile(`TRUNCATED:\s+the superblock gives \d+ bytes, the file has 5000\n`).MatchString(out) || !strings.Contains(e, "beyond the image end") {
		t.Errorf("inspect of a cut image: exit %d:\n%s%s", code, out, e)
	}

	// Compressed: the same tree, read back through every command.
	zimg := filepath.Join(dir, "z.erofs")
	if _, e, code := run(t, b, "mkfs", "-q", "-z", "lz4hc,level=6", "--pcluster-size", "16K", zimg, layer); code != 0 {
		t.Fatalf("mkfs -z lz4hc: exit %d: %s", code, e)
	}
	if out, e, code := run(t, b, "verify", zimg, layer); code != 0 {
		t.Errorf("verify of the compressed image: exit %d: %s %s", code, out, e)
	}
	if out, _, code := run(t, b, "inspect", zimg); code != 0 || !strings.Contains(out, "compressed_") ||
		!regexp.MustCompile(`minimum kernel:\s+Linux 5.17`).MatchString(out) || !strings.Contains(out, "compression ratio:") {
		t.Errorf("inspect of the compressed image: exit %d:\n%s", code, out)
	}
	for _, tc := range []struct{ args, want []string }{
		{[]string{"--min-kernel", "5.10", "--pcluster-size", "64K"}, []string{"pcluster size 65536", "5.13", "5.10"}},
		{[]string{"--min-kernel", "5.15", "--tail-packing"}, []string{"tail packing", "5.17"}},
		{[]string{"--min-kernel", "5.15", "--fragments"}, []string{"fragments", "6.1"}},
		{[]string{"--min-kernel", "5.4", "-b", "1024"}, []string{"block size 1024", "6.4"}},
		{[]string{"-z", "lz5"}, []string{"--compress", "lz5"}},
		{[]string{"--pcluster-size", "6K"}, []string{"pcluster size 6144"}},
		{[]string{"--workers", "2147483647"}, []string{"2147483647 workers", "1024"}},
	} {
		out := filepath.Join(dir, "refused.erofs")
		args := append([]string{"mkfs", "-z", "lz4"}, tc.args...)
		_, e, code := run(t, b, append(args, out, layer)...)
		if code != 1 {
			t.Errorf("mkfs %v: exit %d, want 1", tc.args, code)
		}
		for _, w := range tc.want {
			if !strings.Contains(e, w) {
				t.Errorf("mkfs %v: error %q does not say %q", tc.args, e, w)
			}
		}
		if _, err := os.Stat(out); err == nil {
			t.Errorf("mkfs %v left %s behind", tc.args, out)
		}
	}
	// Defaults give way to an old --min-kernel: 4K pclusters, no tail packing.
	if _, e, code := run(t, b, "mkfs", "-q", "-z", "lz4", "--min-kernel", "5.4", zimg, layer); code != 0 {
		t.Fatalf("mkfs -z lz4 --min-kernel 5.4: exit %d: %s", code, e)
	}
	if out, _, _ := run(t, b, "inspect", zimg); !regexp.MustCompile(`minimum kernel:\s+Linux 5.4`).MatchString(out) || strings.Contains(out, "ztailpacking") {
		t.Errorf("inspect of a --min-kernel 5.4 image:\n%s", out)
	}

	// Bad input: one line on stderr, exit 1, no output left behind.
	bad := filepath.Join(dir, "bad.tar")
	data, err := os.ReadFile("../../testdata/demo-layer.tar.gz")
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(bad, data[:len(data)/2], 0o644)
	outImg := filepath.Join(dir, "bad.erofs")
	_, e, code = run(t, b, "mkfs", outImg, bad)
	if code != 1 || strings.Count(strings.TrimSpace(e), "\n") != 0 || !strings.HasPrefix(e, "ocierofs: ") {
		t.Errorf("mkfs of a truncated layer: exit %d, stderr %q", code, e)
	}
	if ents, _ := filepath.Glob(filepath.Join(dir, "*bad.erofs*")); len(ents) != 0 {
		t.Errorf("left behind: %q", ents)
	}
	for _, cmd := range []string{"mkfs", "convert", "inspect", "ls", "cat", "extract", "verify"} {
		if out, _, code := run(t, b, cmd, "--help"); code != 0 || !strings.Contains(out, "USAGE") {
			t.Errorf("%s --help: exit %d", cmd, code)
		}
	}

	if testing.Short() {
		t.Skip("-short: extract as root (owners, devices); make test runs it")
	}
	if os.Geteuid() != 0 {
		t.Skip("extract restores owners and devices only as root")
	}
	x := filepath.Join(dir, "x")
	if _, e, code := run(t, b, "extract", img, x); code != 0 {
		t.Fatalf("extract: exit %d: %s", code, e)
	}
	got, err := fstree.FromDir(x)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(layer)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rc, _, err := convert.Decompress(f)
	if err != nil {
		t.Fatal(err)
	}
	want, err := fstree.FromTar(rc, fstree.TarOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range fstree.Diff(want, got, fstree.DiffOptions{IgnoreImpliedMtime: true, IgnoreRootMeta: true}) {
		t.Errorf("extract vs tar: %s", d)
	}
}

// TestCLIDedupe: files with the same content share their data, inspect
// says how much, and --no-file-dedupe stores every copy.
func TestCLIDedupe(t *testing.T) {
	b := bin(t)
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	// Words in random order: compressible, into pclusters and an inline
	// tail (each copy has its own, and is a copy all the same).
	rnd := rand.New(rand.NewPCG(1, 2))
	words := strings.Fields("alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho sigma tau upsilon phi chi psi omega")
	var sb strings.Builder
	for sb.Len() < 200000 {
		fmt.Fprintf(&sb, "%s %s %d\n", words[rnd.IntN(len(words))], words[rnd.IntN(len(words))], rnd.IntN(1000))
	}
	data := sb.String()
	for _, d := range []string{"a", "b", "c"} {
		os.MkdirAll(filepath.Join(src, d), 0o755)
		os.WriteFile(filepath.Join(src, d, "file"), []byte(data), 0o644)
	}
	os.WriteFile(filepath.Join(src, "other"), []byte(data+"!"), 0o644)
	for _, z := range []string{"none", "lz4"} {
		img := filepath.Join(dir, z+".erofs")
		if _, e, code := run(t, b, "mkfs", "-q", "-z", z, img, src); code != 0 {
			t.Fatalf("mkfs -z %s: exit %d: %s", z, code, e)
		}
		out, _, code := run(t, b, "inspect", img)
		if code != 0 || !regexp.MustCompile(fmt.Sprintf(`deduplicated:\s+2 files share an earlier file's data \(%d bytes`, 2*len(data))).MatchString(out) {
			t.Errorf("inspect -z %s: exit %d:\n%s", z, code, out)
		}
		if out, e, code := run(t, b, "verify", img, src); code != 0 {
			t.Errorf("verify -z %s: exit %d: %s%s", z, code, out, e)
		}
		full := filepath.Join(dir, z+"-full.erofs")
		run(t, b, "mkfs", "-q", "-z", z, "--no-file-dedupe", full, src)
		out, _, _ = run(t, b, "inspect", full)
		fi, _ := os.Stat(img)
		fullFi, err := os.Stat(full)
		if err != nil || strings.Contains(out, "deduplicated") || fullFi.Size() <= fi.Size() || z == "lz4" && !strings.Contains(out, "compressed_") {
			t.Errorf("--no-file-dedupe -z %s: %d bytes against %d deduplicated (%v):\n%s", z, fullFi.Size(), fi.Size(), err, out)
		}
	}
}

// TestCLIExtentDedupe: --dedupe shares the runs that near-identical files
// have in common (a smaller image that verify accepts), and is refused
// without compression and for kernels before 6.1.
func TestCLIExtentDedupe(t *testing.T) {
	b := bin(t)
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	os.MkdirAll(src, 0o755)
	rnd := rand.New(rand.NewPCG(3, 4))
	words := strings.Fields("alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho sigma tau upsilon phi chi psi omega")
	var sb strings.Builder
	for sb.Len() < 400000 {
		fmt.Fprintf(&sb, "%s %s %d\n", words[rnd.IntN(len(words))], words[rnd.IntN(len(words))], rnd.IntN(1000))
	}
	v1 := sb.String()
	// Versions that differ by a line each: whole-file dedupe shares none.
	for i := range 4 {
		at := 50000 * (i + 1)
		os.WriteFile(filepath.Join(src, fmt.Sprintf("v%d", i)), []byte(v1[:at]+fmt.Sprintf("change %d\n", i)+v1[at:]), 0o644)
	}
	sizes := map[string]int64{}
	for _, dd := range []string{"", "--dedupe"} {
		img := filepath.Join(dir, "img"+dd+".erofs")
		args := []string{"mkfs", "-q", "-z", "lz4", "--pcluster-size", "4K"}
		if dd != "" {
			args = append(args, dd)
		}
		if _, e, code := run(t, b, append(args, img, src)...); code != 0 {
			t.Fatalf("mkfs %s: exit %d: %s", dd, code, e)
		}
		if out, e, code := run(t, b, "verify", img, src); code != 0 {
			t.Errorf("verify %s: exit %d: %s%s", dd, code, out, e)
		}
		fi, err := os.Stat(img)
		if err != nil {
			t.Fatal(err)
		}
		sizes[dd] = fi.Size()
		o, _, _ := run(t, b, "inspect", img)
		if strings.Contains(o, "shared extents:") != (dd != "") {
			t.Errorf("inspect %s: shared extents reported wrongly:\n%s", dd, o)
		}
	}
	if sizes["--dedupe"] > sizes[""]/2 {
		t.Errorf("--dedupe: %d bytes, without %d: four near-copies should take little more than one", sizes["--dedupe"], sizes[""])
	}
	for _, c := range []struct{ args, want string }{
		{"--dedupe", "needs --compress"},
		{"--dedupe -z lz4 --min-kernel 5.15", "needs Linux 6.1"},
	} {
		args := append(append([]string{"mkfs", "-q"}, strings.Fields(c.args)...), filepath.Join(dir, "bad.erofs"), src)
		if _, e, code := run(t, b, args...); code == 0 || !strings.Contains(e, c.want) {
			t.Errorf("mkfs %s: exit %d, stderr %q, want %q", c.args, code, e, c.want)
		}
	}
}

// TestProfiles runs mkfs with the three profiling flags and checks that each
// file is what its tool reads: pprof's gzip-compressed protobuf, and an
// execution trace that go tool trace turns into a profile of waits.
func TestProfiles(t *testing.T) {
	b := bin(t)
	dir := t.TempDir()
	cpu, mem, tr := filepath.Join(dir, "cpu.pprof"), filepath.Join(dir, "mem.pprof"), filepath.Join(dir, "run.trace")
	_, e, code := run(t, b, "--cpuprofile", cpu, "--memprofile", mem, "--trace", tr,
		"mkfs", "-q", "--compress", "lz4", filepath.Join(dir, "demo.erofs"), "../../testdata/demo-layer.tar.gz")
	if code != 0 {
		t.Fatalf("mkfs: exit %d: %s", code, e)
	}
	for _, name := range []string{cpu, mem} {
		p, err := os.ReadFile(name)
		if err != nil || len(p) < 2 || p[0] != 0x1f || p[1] != 0x8b {
			t.Errorf("%s is not a gzip-compressed profile (%d bytes, %v)", name, len(p), err)
		}
	}
	p, err := os.ReadFile(tr)
	if err != nil || !bytes.HasPrefix(p, []byte("go 1.")) {
		t.Fatalf("%s is not an execution trace (%d bytes, %v)", tr, len(p), err)
	}
	if out, err := exec.Command("go", "tool", "trace", "-pprof=sync", tr).CombinedOutput(); err != nil {
		t.Errorf("go tool trace -pprof=sync: %v\n%.500s", err, out)
	}
	// An unwritable trace file is one error, exit 1, and no image.
	img := filepath.Join(dir, "none.erofs")
	_, e, code = run(t, b, "--trace", filepath.Join(dir, "missing", "t"), "mkfs", "-q", img, "../../testdata/demo-layer.tar.gz")
	if code != 1 || !strings.Contains(e, "--trace") {
		t.Errorf("unwritable --trace: exit %d: %q", code, e)
	}
	if _, err := os.Stat(img); err == nil {
		t.Errorf("an image was written although --trace failed")
	}
}

// TestVersion: --version, -v and the version command print one line, the
// same; a plain go build names itself "devel" or by its commit.
func TestVersion(t *testing.T) {
	b := bin(t)
	out, e, code := run(t, b, "--version")
	if code != 0 || !regexp.MustCompile(`^ocierofs version \S+ \(go\S+ \w+/\w+\)\n$`).MatchString(out) {
		t.Fatalf("--version: exit %d: %q %s", code, out, e)
	}
	for _, args := range [][]string{{"-v"}, {"version"}} {
		if o, e, code := run(t, b, args...); code != 0 || o != out {
			t.Errorf("%v: exit %d: %q %s, want %q", args, code, o, e, out)
		}
	}
	// Not before a command, which it would keep from running (exit 0).
	if o, e, code := run(t, b, "-v", "inspect", "x"); code != 1 || o != "" || !strings.Contains(e, `-v prints the version and runs no command: drop it before "inspect"`) {
		t.Errorf("-v inspect: exit %d: %q %q", code, o, e)
	}
	if _, e, code := run(t, b, "version", "extra"); code != 1 || !strings.Contains(e, "no arguments") {
		t.Errorf("version extra: exit %d: %s", code, e)
	}
	// A command that does not exist is a bad argument like any other.
	if _, e, code := run(t, b, "bogus"); code != 1 || !strings.Contains(e, `no command "bogus"`) {
		t.Errorf("bogus: exit %d: %s", code, e)
	}
}

// TestKilledLeavesNothing: mkfs killed while it writes (SIGINT, SIGTERM,
// SIGKILL), its output and blob unnamed files, leaves nothing beside them
// (a named temp file as large as the image was left behind at each
// Ctrl-C), and an output that was there stays as it was.
func TestKilledLeavesNothing(t *testing.T) {
	b := bin(t)
	// The tar comes through a pipe the test holds open: mkfs is still
	// writing when it is killed.
	var tarHead bytes.Buffer
	tw := tar.NewWriter(&tarHead)
	data := bytes.Repeat([]byte("erofs "), 200000)
	for i := range 20 {
		tw.WriteHeader(&tar.Header{Name: fmt.Sprintf("f%d", i), Mode: 0o644, Size: int64(len(data)), Typeflag: tar.TypeReg})
		tw.Write(data)
	}
	if fd, err := unix.Open(t.TempDir(), unix.O_TMPFILE|unix.O_RDWR, 0o600); err != nil {
		t.Skipf("no unnamed files (O_TMPFILE) in $TMPDIR: %v", err)
	} else {
		unix.Close(fd)
	}
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGKILL} {
		for _, existing := range []bool{false, true} {
			dir := t.TempDir()
			out := filepath.Join(dir, "out.erofs")
			if existing {
				os.WriteFile(out, []byte("old"), 0o600)
			}
			cmd := exec.Command(b, "mkfs", "-q", "--blobdev", filepath.Join(dir, "out.blob"), out, "-")
			pw, err := cmd.StdinPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			if _, err := pw.Write(tarHead.Bytes()); err != nil {
				t.Fatal(err)
			}
			// Wait until both files are open (named or not).
			fds := filepath.Join("/proc", fmt.Sprint(cmd.Process.Pid), "fd")
			for deadline := time.Now().Add(30 * time.Second); ; {
				n := 0
				ents, _ := os.ReadDir(fds)
				for _, e := range ents {
					if to, err := os.Readlink(filepath.Join(fds, e.Name())); err == nil && strings.HasPrefix(to, dir+"/") {
						n++
					}
				}
				if n >= 2 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("mkfs has %d files open in its output directory after 30s", n)
				}
				time.Sleep(10 * time.Millisecond)
			}
			cmd.Process.Signal(sig)
			err = cmd.Wait()
			pw.Close()
			if err == nil {
				t.Errorf("%v: mkfs exited 0", sig)
			}
			ents, _ := os.ReadDir(dir)
			var names []string
			for _, e := range ents {
				names = append(names, e.Name())
			}
			want := []string{}
			if existing {
				want = []string{"out.erofs"}
				if got, _ := os.ReadFile(out); string(got) != "old" {
					t.Errorf("%v: the existing output changed to %d bytes", sig, len(got))
				}
			}
			if strings.Join(names, " ") != strings.Join(want, " ") {
				t.Errorf("%v (output there before: %v): left %q", sig, existing, names)
			}
		}
	}
}

// TestExtractInterrupted: extract stopped by SIGINT or SIGTERM removes what
// it extracted (a new DIR goes, an empty one stays empty), says so and
// then dies of the signal, as a shell script that runs it expects.
func TestExtractInterrupted(t *testing.T) {
	b := bin(t)
	dir := t.TempDir()
	var tb bytes.Buffer
	tw := tar.NewWriter(&tb)
	for i := range 30000 {
		tw.WriteHeader(&tar.Header{Name: fmt.Sprintf("d%d/f%d", i%100, i), Mode: 0o644, Size: 5, Typeflag: tar.TypeReg})
		tw.Write([]byte("data\n"))
	}
	tw.Close()
	img := filepath.Join(dir, "many.erofs")
	if _, e, code := runStdin(t, &tb, b, "mkfs", "-q", img, "-"); code != 0 {
		t.Fatalf("mkfs: %s", e)
	}
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		for _, existing := range []bool{false, true} {
			out := filepath.Join(t.TempDir(), "out")
			if existing {
				os.Mkdir(out, 0o755)
			}
			var errb bytes.Buffer
			cmd := exec.Command(b, "extract", img, out)
			cmd.Stderr = &errb
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(time.Millisecond) {
				if ents, _ := os.ReadDir(out); len(ents) > 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("extract made nothing in 30s")
				}
			}
			cmd.Process.Signal(sig)
			cmd.Wait()
			if cmd.ProcessState.ExitCode() == 0 {
				// 30,000 files take seconds; the signal came
				// after the first.
				t.Errorf("%v: extract went on to the end", sig)
				continue
			}
			// It dies of the signal once it has cleaned up, so that
			// a calling script stops too.
			ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
			if !ws.Signaled() || ws.Signal() != sig || !strings.Contains(errb.String(), "interrupted by SIG") {
				t.Errorf("%v: %v, %q", sig, cmd.ProcessState, errb.String())
			}
			ents, err := os.ReadDir(out)
			switch {
			case existing && (err != nil || len(ents) > 0):
				t.Errorf("%v: the existing DIR holds %d entries (%v)", sig, len(ents), err)
			case !existing && !os.IsNotExist(err):
				t.Errorf("%v: the new DIR is left (%d entries, %v)", sig, len(ents), err)
			}
		}
	}
}

// TestMkfsWithoutProc: without /proc (and without CAP_DAC_READ_SEARCH,
// which linkat of an unnamed file by its descriptor needs before Linux
// 6.10) mkfs gives the same image and blob, and leaves nothing else. It
// makes named temp files there; on this kernel an unnamed file could be
// linked too, so the test shows the result, not which way was taken.
func TestMkfsWithoutProc(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: no mount namespaces; make test runs it")
	}
	if os.Geteuid() != 0 {
		t.Skip("hiding /proc needs root (a mount namespace)")
	}
	for _, tool := range []string{"unshare", "setpriv"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("no %s: %v", tool, err)
		}
	}
	b := bin(t)
	dir := t.TempDir()
	in := filepath.Join(dir, "in.tar")
	writeTestTar(t, in,
		tarEntry{name: "a", mode: 0o644, typ: tar.TypeReg, data: bytes.Repeat([]byte("proc "), 5000)},
		tarEntry{name: "d/", mode: 0o755, typ: tar.TypeDir})
	args := func(out string) []string {
		return []string{"mkfs", "-q", "-T", "0", "--blobdev", out + ".blob", out, in}
	}
	ref := filepath.Join(dir, "ref", "img")
	os.Mkdir(filepath.Dir(ref), 0o755)
	if _, stderr, code := run(t, b, args(ref)...); code != 0 {
		t.Fatalf("mkfs: exit %d: %s", code, stderr)
	}
	got := filepath.Join(dir, "noproc", "img")
	os.Mkdir(filepath.Dir(got), 0o755)
	// A mount namespace whose /proc is an empty tmpfs, and no
	// CAP_DAC_READ_SEARCH (which linkat of an unnamed file by its
	// descriptor needs).
	script := `mount -t tmpfs none /proc && exec setpriv --inh-caps=-dac_read_search --bounding-set=-dac_read_search "$@"`
	cmdArgs := append([]string{"--mount", "--propagation", "private", "sh", "-c", script, "sh", b}, args(got)...)
	if _, stderr, code := run(t, "unshare", cmdArgs...); code != 0 {
		t.Fatalf("mkfs without /proc: exit %d: %s", code, stderr)
	}
	for _, suffix := range []string{"", ".blob"} {
		want, err := os.ReadFile(ref + suffix)
		if err != nil {
			t.Fatal(err)
		}
		have, err := os.ReadFile(got + suffix)
		if err != nil {
			t.Fatalf("without /proc: %v", err)
		}
		if !bytes.Equal(want, have) {
			t.Errorf("img%s without /proc differs from the one with it", suffix)
		}
	}
	ents, _ := os.ReadDir(filepath.Dir(got))
	if len(ents) != 2 {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Errorf("left in the output directory: %q, want img and img.blob", names)
	}
}

// TestCommandLine: flags after a command's arguments count, as with docker,
// crane and skopeo (urfave/cli took them for arguments: `convert SRC
// --help` converted SRC and pushed it to docker.io/library/--help);
// combined short flags work; a mistyped flag is one line on stderr.
func TestCommandLine(t *testing.T) {
	b := bin(t)
	dir := t.TempDir()
	layer := "../../testdata/demo-layer.tar.gz"
	img := filepath.Join(dir, "a.erofs")
	if _, e, code := run(t, b, "mkfs", img, layer, "-q", "--compress", "lz4", "--pcluster-size=16K"); code != 0 || e != "" {
		t.Fatalf("mkfs with flags last: exit %d: %q", code, e)
	}
	first := filepath.Join(dir, "first.erofs")
	if _, e, code := run(t, b, "mkfs", "-q", "--compress", "lz4", "--pcluster-size=16K", first, layer); code != 0 {
		t.Fatalf("mkfs with flags first: exit %d: %q", code, e)
	}
	if a, c := readFile(t, img), readFile(t, first); !bytes.Equal(a, c) || !bytes.Contains(a, []byte{0xe2, 0xe1, 0xf5, 0xe0}) {
		t.Errorf("flags after the arguments give another image than before them")
	}
	if out, _, _ := run(t, b, "inspect", img); !strings.Contains(out, "big_pcluster") {
		t.Errorf("flags after the arguments were not taken:\n%s", out)
	}
	// stdin ("-") stays an argument.
	f, err := os.Open(layer)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, e, code := runStdin(t, f, b, "mkfs", filepath.Join(dir, "b.erofs"), "-", "-q"); code != 0 {
		t.Errorf("mkfs OUT - -q: exit %d: %s", code, e)
	}
	// Short flags together, the last taking the value: -qz lz4 last.
	qz := filepath.Join(dir, "qz.erofs")
	if _, e, code := run(t, b, "mkfs", qz, layer, "-qz", "lz4", "--pcluster-size=16K"); code != 0 || e != "" || !bytes.Equal(readFile(t, qz), readFile(t, img)) {
		t.Errorf("mkfs OUT IN -qz lz4: exit %d: %q, or another image than with the flags first", code, e)
	}
	// A flag that wants a value, last without one: an error, not the
	// first argument taken for its value (merge OUT A -L wrote over A).
	before := readFile(t, img)
	if _, e, code := run(t, b, "merge", filepath.Join(dir, "m.erofs"), img, "-L"); code != 1 || !strings.Contains(e, "flag -L needs a value") {
		t.Errorf("merge OUT A -L: exit %d: %q", code, e)
	}
	if !bytes.Equal(readFile(t, img), before) {
		t.Error("merge OUT A -L changed A")
	}
	// "--" after an argument ends the flags too, and is no argument.
	if out, e, code := run(t, b, "cat", img, "--", "/etc/hostname"); code != 0 || out != "demo\n" {
		t.Errorf("cat IMG -- PATH: exit %d: %q %q", code, out, e)
	}
	if _, e, code := run(t, b, "cat", img, "--", "-nope"); code != 1 || !strings.Contains(e, img+": /-nope: no such file or directory") {
		t.Errorf("cat IMG -- -nope: exit %d: %q, want -nope taken for a path", code, e)
	}
	// An image whose name starts with a dash, after "--": an argument.
	if err := os.WriteFile(filepath.Join(dir, "-dash.erofs"), readFile(t, img), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(b, "cat", "--", "-dash.erofs", "/etc/hostname")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil || string(out) != "demo\n" {
		t.Errorf("cat -- -dash.erofs PATH: %v: %q", err, out)
	}
	// --help anywhere shows the help and runs nothing.
	src := "oci:" + copyBusyboxLayout(t) + ":latest"
	out, e, code := run(t, b, "convert", src, "--help")
	if code != 0 || !strings.Contains(out, "ocierofs convert [command options]") || e != "" {
		t.Errorf("convert SRC --help: exit %d: %q %q", code, out, e)
	}
	// After --, a flag is an argument.
	if _, e, code := run(t, b, "mkfs", "-q", "--", filepath.Join(dir, "c.erofs"), "--compress"); code != 1 || !strings.Contains(e, "--compress: no such file") {
		t.Errorf("mkfs -- OUT --compress: exit %d: %q", code, e)
	}
	// Combined short flags: ls -lR is ls -l -R.
	lR, _, code1 := run(t, b, "ls", "-lR", img)
	l_R, _, code2 := run(t, b, "ls", "-l", "-R", img)
	if code1 != 0 || code2 != 0 || lR != l_R || !strings.Contains(lR, "-rwsr-xr-x") {
		t.Errorf("ls -lR (exit %d) differs from ls -l -R (exit %d):\n%s\n%s", code1, code2, lR, l_R)
	}
	// A mistyped flag: one line naming it as typed, no help on stdout.
	out, e, code = run(t, b, "convert", "--plain-htpp", src)
	if code != 1 || out != "" || e != "ocierofs: unknown flag --plain-htpp (ocierofs convert --help)\n" {
		t.Errorf("a mistyped flag: exit %d: stdout %q, stderr %q", code, out, e)
	}
}

func readFile(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestMkfsSwapped: OUTPUT and INPUT in tar's or cp's order (input first)
// replaced the layer with an empty image, exit 0: an EROFS image's zero
// first block reads as a tar's end. Now neither side of the mistake runs.
func TestMkfsSwapped(t *testing.T) {
	b := bin(t)
	dir := t.TempDir()
	img := filepath.Join(dir, "a.erofs")
	if _, e, code := run(t, b, "mkfs", "-q", img, "../../testdata/demo-layer.tar.gz"); code != 0 {
		t.Fatalf("mkfs: exit %d: %s", code, e)
	}
	gz := readFile(t, "../../testdata/demo-layer.tar.gz")
	plain := filepath.Join(dir, "plain.tar")
	writeTestTar(t, plain, tarEntry{name: "f", mode: 0o644, typ: tar.TypeReg, data: []byte("x")})
	for _, tc := range []struct {
		name, layer, want string
		data              []byte
	}{
		{"gzip", "layer.tar.gz", "OUTPUT " + filepath.Join(dir, "layer.tar.gz") + " is a gzip file", gz},
		{"tar", "layer.tar", "OUTPUT " + filepath.Join(dir, "layer.tar") + " is a tar archive", readFile(t, plain)},
	} {
		layer := filepath.Join(dir, tc.layer)
		if err := os.WriteFile(layer, tc.data, 0o644); err != nil {
			t.Fatal(err)
		}
		if _, e, code := run(t, b, "mkfs", layer, img); code != 1 || !strings.Contains(e, tc.want) {
			t.Errorf("%s: mkfs LAYER IMAGE: exit %d: %q", tc.name, code, e)
		}
		if !bytes.Equal(readFile(t, layer), tc.data) {
			t.Errorf("%s: the layer was changed", tc.name)
		}
	}
	// What the check must not get in the way of: a FIFO as OUTPUT (it is
	// never read), and OUTPUT that is INPUT (Mkfs's error says so).
	fifo := filepath.Join(dir, "fifo")
	if err := unix.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	got := make(chan int, 1)
	go func() {
		f, err := os.Open(fifo)
		if err != nil {
			got <- -1
			return
		}
		defer f.Close()
		n, _ := io.Copy(io.Discard, f)
		got <- int(n)
	}()
	if _, e, code := run(t, b, "mkfs", "-q", fifo, "../../testdata/demo-layer.tar.gz"); code != 0 {
		t.Errorf("mkfs FIFO LAYER: exit %d: %s", code, e)
	}
	if n := <-got; n != len(readFile(t, img)) {
		t.Errorf("the FIFO gave %d bytes, want the image's %d", n, len(readFile(t, img)))
	}
	same := filepath.Join(dir, "layer.tar.gz")
	if _, e, code := run(t, b, "mkfs", same, same); code != 1 || !strings.Contains(e, "are the same file") {
		t.Errorf("mkfs LAYER LAYER: exit %d: %q", code, e)
	}
	// An image as INPUT, whatever OUTPUT is.
	out := filepath.Join(dir, "new.erofs")
	if _, e, code := run(t, b, "mkfs", out, img); code != 1 || !strings.Contains(e, img+" is an EROFS image, not a tar") {
		t.Errorf("mkfs NEW IMAGE: exit %d: %q", code, e)
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("an output was made: %v", err)
	}
}

// gunzipFile is the uncompressed content of a gzip file.
func gunzipFile(t *testing.T, name string) []byte {
	t.Helper()
	f, err := os.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	p, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// formatUUID is a UUID as inspect prints it.
func formatUUID(u [16]byte) string {
	return fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
}

// TestMkfsExtendedInodes: --extended-inodes writes every inode in the
// 64-byte form, as mkfs.erofs -Eforce-inode-extended; without it the demo
// layer's inodes are compact where they fit.
func TestMkfsExtendedInodes(t *testing.T) {
	b := bin(t)
	dir := t.TempDir()
	layer := "../../testdata/demo-layer.tar.gz"
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, `inodes:\s+24 .*; [1-9][0-9]* compact,`},
		{[]string{"--extended-inodes"}, `inodes:\s+24 .*; 0 compact, 24 extended`},
	} {
		img := filepath.Join(dir, fmt.Sprint(len(tc.args))+".erofs")
		if _, e, code := run(t, b, slices.Concat([]string{"mkfs", "-q"}, tc.args, []string{img, layer})...); code != 0 {
			t.Fatalf("mkfs %v: exit %d: %s", tc.args, code, e)
		}
		out, _, _ := run(t, b, "inspect", img)
		if !regexp.MustCompile(tc.want).MatchString(out) {
			t.Errorf("mkfs %v: inspect says\n%s\nwant %s", tc.args, out, tc.want)
		}
	}
}
