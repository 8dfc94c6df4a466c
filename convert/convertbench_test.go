package convert_test

// The end-to-end comparison of docs/performance.md ("Registry to
// registry"): ocierofs convert against containerd's own converter (ctr
// images convert --erofs raw, running mkfs.erofs) plus ctr images push, on
// a registry and a containerd of the test's own. It runs only when asked
// (make bench-convert), and prints a Markdown table of medians.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/ocierofs/ocierofs/convert"
	"github.com/ocierofs/ocierofs/convert/internal/convtest"
	"github.com/ocierofs/ocierofs/internal/testregistry"
	"github.com/ocierofs/ocierofs/oci"
)

// The settings of TestConvertFigures, from the environment (the Makefile's
// bench-convert target sets them):
//
//	OCIEROFS_CONVERT_BENCH=1    run at all
//	OCIEROFS_BENCH_BIN          the ocierofs to measure, relative to the repository (default: built here)
//	OCIEROFS_BENCH_MKFS         the mkfs.erofs ctr runs (default: the one on PATH; 1.7 or later)
//	OCIEROFS_BENCH_DATA         erofsbench's data directory: DATA/tar/linux.tar, or DATA/linux tarred
//	OCIEROFS_BENCH_WORK         where the Linux tar is made if DATA has none (default DATA/convert)
//	OCIEROFS_BENCH_RUNS         runs of each measurement (default 3)
//	OCIEROFS_BENCH_IMAGES       e2e, debian4, linux (default all three, comma-separated)
//	OCIEROFS_BENCH_OUT          also write the report there
//	OCIEROFS_BENCH_TOOLS        ctr, ocierofs, upload (default all; comma-separated): upload
//	                            times the push of ocierofs's converted image alone, in this process
//	OCIEROFS_BENCH_BEFORE       another ocierofs (absolute path), its convert and push runs taking turns with the first's
//	OCIEROFS_BENCH_PROFILE      a directory: each pushing run of ocierofs writes a CPU profile and a trace there
const convertBenchEnv = "OCIEROFS_CONVERT_BENCH"

// benchImage is one source image of the comparison.
type benchImage struct {
	name string // debian4, linux
	what string // for the report
	ref  string // in the source registry
}

// benchRun is one timed command (or two, for ctr's convert and push).
type benchRun struct {
	wall, cpu time.Duration // cpu: the tool's user+sys (ctr's includes containerd's and mkfs.erofs's)
	regCPU    time.Duration // both registries' user+sys over the run
	// ocierofs's own account of a pushed layer (its --output json):
	// seconds converting and uploading, summed over the layers.
	convertS, uploadS float64
}

func TestConvertFigures(t *testing.T) {
	if os.Getenv(convertBenchEnv) == "" {
		t.Skip("the registry-to-registry comparison runs only with " + convertBenchEnv + "=1 (make bench-convert)")
	}
	requireContainerdHost(t)
	runs := 3
	if s := os.Getenv("OCIEROFS_BENCH_RUNS"); s != "" {
		n, err := strconv.Atoi(s)
		must(t, err)
		runs = n
	}
	bin := os.Getenv("OCIEROFS_BENCH_BIN")
	switch {
	case bin == "":
		bin = ocierofsCLI(t)
	case !filepath.IsAbs(bin):
		bin = filepath.Join("..", bin) // relative to the repository, as make passes it
	}
	bin, err := filepath.Abs(bin)
	must(t, err)
	// before, if set, is another ocierofs measured alike, taking turns.
	before := os.Getenv("OCIEROFS_BENCH_BEFORE")
	mkfs := os.Getenv("OCIEROFS_BENCH_MKFS")
	if mkfs == "" {
		mkfs = "mkfs.erofs"
	}
	if mkfs, err = exec.LookPath(mkfs); err != nil {
		t.Fatalf("mkfs.erofs for ctr images convert: %v (set OCIEROFS_BENCH_MKFS)", err)
	}
	mkfs, err = filepath.Abs(mkfs)
	must(t, err)
	mkfsVersion, _ := exec.Command(mkfs, "--version").CombinedOutput()
	mkfsVersion, _, _ = bytes.Cut(mkfsVersion, []byte("\n"))
	wanted := map[string]bool{"e2e": true, "debian4": true, "linux": true}
	if s := os.Getenv("OCIEROFS_BENCH_IMAGES"); s != "" {
		wanted = map[string]bool{}
		for _, n := range strings.Split(s, ",") {
			wanted[n] = true
		}
	}

	regBin := testregistry.Binary(t)
	src := testregistry.New(t, testregistry.Config{})
	var images []benchImage
	if wanted["e2e"] {
		r := ref(t, src.Host, "bench/e2e:src")
		pushImage(t, r, convtest.Image(t, "amd64", convtest.TestImageLayers(t)...))
		images = append(images, benchImage{"e2e", "the end-to-end tests' image (convtest.TestImageLayers: 4 small gzip layers)", r.String()})
	}
	if wanted["debian4"] {
		var ls []v1.Layer
		var tarSize, gzSize int64
		for i, dirs := range debianLayers {
			l := hostLayer(t, fmt.Sprintf("debian4-%d", i), dirs)
			ls = append(ls, l)
			tarSize += l.tarSize
			gzSize += l.size
		}
		r := ref(t, src.Host, "bench/debian4:src")
		pushImage(t, r, benchImageOf(t, ls...))
		images = append(images, benchImage{"debian4", fmt.Sprintf("this Debian host's files in 4 gzip layers (tar %d MiB, gzip %d MiB): %q", tarSize>>20, gzSize>>20, debianLayers), r.String()})
	}
	if wanted["linux"] {
		tarPath := linuxTar(t)
		l, err := fileLayerOf(tarPath, "")
		must(t, err)
		r := ref(t, src.Host, "bench/linux:src")
		pushImage(t, r, benchImageOf(t, l))
		images = append(images, benchImage{"linux", fmt.Sprintf("the Linux source tree as one uncompressed tar layer (%d MiB)", l.size>>20), r.String()})
	}

	// containerd with the EROFS snapshotter and differ, as the end-to-end
	// tests start it; ctr converts on the client, so the mkfs.erofs that
	// counts is the one on ctr's PATH (and containerd's, for what it may
	// run itself).
	c := startContainerd(t, ctrdOptions{})
	c.ctrPath = t.TempDir()
	must(t, os.Symlink(mkfs, filepath.Join(c.ctrPath, "mkfs.erofs")))
	work := t.TempDir()
	home := t.TempDir() // ocierofs's twin records stay out of the user's cache
	ctrCmd := func(args ...string) []string {
		return append([]string{filepath.Join(c.bin, "ctr"), "--address", c.addr, "--namespace", "bench"}, args...)
	}
	ctrEnv := []string{"PATH=" + c.ctrPath, "HOME=" + home}

	// fresh is an empty target registry: every run uploads every blob.
	fresh := func() (*testregistry.Registry, func()) {
		dir, err := os.MkdirTemp(work, "dst-")
		must(t, err)
		r, err := testregistry.Start(regBin, dir, testregistry.Config{})
		must(t, err)
		return r, func() { r.Stop(); os.RemoveAll(dir) }
	}
	regCPU := func(regs ...*testregistry.Registry) time.Duration {
		var d time.Duration
		for _, r := range regs {
			d += procCPU(t, r.PID())
		}
		return d
	}
	ctrdCPU := func() time.Duration { return procCPU(t, c.cmd.Process.Pid) }
	ocEnv := []string{"PATH=/usr/bin:/bin", "HOME=" + home, "TMPDIR=" + work}

	tools := map[string]bool{"ctr": true, "ocierofs": true, "upload": true}
	if s := os.Getenv("OCIEROFS_BENCH_TOOLS"); s != "" {
		tools = map[string]bool{}
		for _, n := range strings.Split(s, ",") {
			tools[n] = true
		}
	}
	// key: image, tool, phase ("convert" or "push": convert+push).
	results := map[string][]benchRun{}
	add := func(im, tool, phase string, r benchRun) {
		k := im + "/" + tool + "/" + phase
		results[k] = append(results[k], r)
		t.Logf("%s: wall %.2fs, cpu %.2fs, registry cpu %.2fs%s", k, r.wall.Seconds(), r.cpu.Seconds(), r.regCPU.Seconds(),
			map[bool]string{true: fmt.Sprintf(" (ocierofs: converting %.2fs, uploading %.2fs)", r.convertS, r.uploadS)}[r.convertS > 0])
	}
	runCtr := func(im benchImage, round int) {
		local := fmt.Sprintf("bench.local/%s:erofs-%d", im.name, round)
		dst, stop := fresh()
		defer stop()
		syncDisks()
		r0, d0 := regCPU(src, dst), ctrdCPU()
		conv := timed(t, ctrEnv, ctrCmd("image", "convert", "--oci", "--erofs", "raw", im.ref, local)...)
		r1, d1 := regCPU(src, dst), ctrdCPU()
		push := timed(t, ctrEnv, ctrCmd("image", "push", "--plain-http", dst.Host+"/bench/"+im.name+":erofs", local)...)
		r2, d2 := regCPU(src, dst), ctrdCPU()
		conv.cpu += d1 - d0
		conv.regCPU = r1 - r0
		push.cpu += d2 - d1
		push.regCPU = r2 - r1
		add(im.name, "ctr", "convert", conv)
		add(im.name, "ctr", "push", benchRun{wall: conv.wall + push.wall, cpu: conv.cpu + push.cpu, regCPU: conv.regCPU + push.regCPU})
		c.ctr(t, "bench", "image", "rm", "--sync", local)
	}
	runOcierofs := func(im benchImage, round int, tool, bin string) {
		layout := filepath.Join(work, "layout")
		syncDisks()
		r0 := regCPU(src)
		conv := timed(t, ocEnv, bin, "convert", "--plain-http", "-q", im.ref, "oci:"+layout+":erofs")
		conv.regCPU = regCPU(src) - r0
		add(im.name, tool, "convert", conv)
		if tools["upload"] && tool == "ocierofs" {
			add(im.name, "ocierofs", "upload", uploadLayout(t, layout, fresh))
		}
		os.RemoveAll(layout)

		dst, stop := fresh()
		defer stop()
		syncDisks()
		r0 = regCPU(src, dst)
		var out bytes.Buffer
		argv := []string{bin}
		if dir := os.Getenv("OCIEROFS_BENCH_PROFILE"); dir != "" {
			p := filepath.Join(dir, fmt.Sprintf("%s-%s-%d", tool, im.name, round))
			argv = append(argv, "--cpuprofile", p+".pprof", "--trace", p+".trace")
		}
		push := timedOut(t, ocEnv, &out, append(argv, "convert", "--plain-http", "-o", "json", "--force", im.ref, dst.Host+"/bench/"+im.name+":erofs")...)
		push.regCPU = regCPU(src, dst) - r0
		var rep struct {
			Images []convert.ImageReport `json:"images"`
		}
		must(t, json.Unmarshal(out.Bytes(), &rep))
		for _, ir := range rep.Images {
			for _, l := range ir.Layers {
				push.convertS += l.ConvertSeconds
				push.uploadS += l.UploadSeconds
			}
		}
		add(im.name, tool, "push", push)
	}
	for _, im := range images {
		// Not timed: containerd's converter reads the image from its
		// content store.
		if tools["ctr"] {
			timed(t, ctrEnv, ctrCmd("image", "pull", "--plain-http", im.ref)...)
		}
	}
	for round := 0; round < runs; round++ {
		for _, im := range images {
			// The tools take turns going first, so that a load that
			// comes and goes falls on both.
			order := []string{"ctr", "ocierofs", "before"}
			if round%2 == 1 {
				slices.Reverse(order)
			}
			for _, tool := range order {
				switch {
				case tool == "before":
					if before != "" {
						runOcierofs(im, round, tool, before)
					}
				case !tools[tool]:
				case tool == "ctr":
					runCtr(im, round)
				default:
					runOcierofs(im, round, tool, bin)
				}
			}
		}
	}

	var rep strings.Builder
	host, _ := os.Hostname()
	load, _ := os.ReadFile("/proc/loadavg")
	fmt.Fprintf(&rep, "%s, %d CPUs, %s; load average at the end: %s\n", time.Now().UTC().Format("2006-01-02 15:04 MST"), runtime.NumCPU(), host, strings.Join(strings.Fields(string(load))[:3], " "))
	fmt.Fprintf(&rep, "ocierofs %s; containerd %s, ctr images convert --oci --erofs raw with %s; docker-registry; median of %d, taking turns\n\n",
		bin, containerdVersion, strings.TrimSpace(string(mkfsVersion)), runs)
	rep.WriteString("| Image | Step | ctr: wall / CPU | ocierofs: wall / CPU | Speedup, wall / CPU | Registry CPU, ctr / ocierofs |\n|---|---|---|---|---|---|\n")
	ratio := func(a, b time.Duration) string {
		if a == 0 || b == 0 {
			return "–"
		}
		return fmt.Sprintf("%.1f×", a.Seconds()/b.Seconds())
	}
	for _, im := range images {
		for _, phase := range []string{"convert", "push"} {
			a, b := median(results[im.name+"/ctr/"+phase]), median(results[im.name+"/ocierofs/"+phase])
			step := map[string]string{"convert": "convert", "push": "convert + push"}[phase]
			fmt.Fprintf(&rep, "| %s | %s | %.2f / %.2f s | %.2f / %.2f s | %s / %s | %.2f / %.2f s |\n", im.name, step,
				a.wall.Seconds(), a.cpu.Seconds(), b.wall.Seconds(), b.cpu.Seconds(), ratio(a.wall, b.wall), ratio(a.cpu, b.cpu), a.regCPU.Seconds(), b.regCPU.Seconds())
		}
	}
	rep.WriteString("\n")
	for _, im := range images {
		if u := results[im.name+"/ocierofs/upload"]; len(u) > 0 {
			m := median(u)
			fmt.Fprintf(&rep, "* %s: pushing ocierofs's converted image alone (its digests known): %.2f s wall, %.2f s CPU, registry %.2f s CPU\n",
				im.name, m.wall.Seconds(), m.cpu.Seconds(), m.regCPU.Seconds())
		}
	}
	for _, im := range images {
		for _, phase := range []string{"convert", "push"} {
			if rs := results[im.name+"/before/"+phase]; len(rs) > 0 {
				a, b := median(rs), median(results[im.name+"/ocierofs/"+phase])
				fmt.Fprintf(&rep, "* %s, %s: %s %.2f s wall, %.2f s CPU (registries %.2f s); this ocierofs %.2f s wall, %.2f s CPU (registries %.2f s)\n",
					im.name, phase, before, a.wall.Seconds(), a.cpu.Seconds(), a.regCPU.Seconds(), b.wall.Seconds(), b.cpu.Seconds(), b.regCPU.Seconds())
			}
		}
	}
	for _, im := range images {
		b := median(results[im.name+"/ocierofs/push"])
		fmt.Fprintf(&rep, "* %s: %s; ocierofs's own account of its push run (median): converting %.2f s, uploading %.2f s\n", im.name, im.what, b.convertS, b.uploadS)
	}
	t.Logf("report:\n%s", rep.String())
	if out := os.Getenv("OCIEROFS_BENCH_OUT"); out != "" {
		must(t, os.WriteFile(out, []byte(rep.String()), 0o644))
	}
}

// uploadLayout pushes the image of an OCI layout (tag erofs) to a fresh
// registry, in this process, as ocierofs would push it once converted:
// the floor of its upload.
func uploadLayout(t testing.TB, layout string, fresh func() (*testregistry.Registry, func())) benchRun {
	t.Helper()
	src, err := oci.ParseRef("oci:"+layout+":erofs", false)
	must(t, err)
	art, err := oci.Get(context.Background(), src, oci.Remote{})
	must(t, err)
	dst, stop := fresh()
	defer stop()
	to, err := oci.ParseRef(dst.Host+"/bench/upload:erofs", true)
	must(t, err)
	syncDisks()
	r0, c0 := procCPU(t, dst.PID()), selfCPU()
	start := time.Now()
	must(t, oci.Write(context.Background(), to, art.Image, art.Index, oci.Remote{}))
	return benchRun{wall: time.Since(start), cpu: selfCPU() - c0, regCPU: procCPU(t, dst.PID()) - r0}
}

// selfCPU is this process's user+sys time so far.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// median is the run of median wall time (its CPU and registry CPU the
// medians of their own).
func median(rs []benchRun) benchRun {
	if len(rs) == 0 {
		return benchRun{}
	}
	pick := func(f func(benchRun) time.Duration) time.Duration {
		v := make([]time.Duration, len(rs))
		for i, r := range rs {
			v[i] = f(r)
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	pickF := func(f func(benchRun) float64) float64 {
		v := make([]float64, len(rs))
		for i, r := range rs {
			v[i] = f(r)
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	return benchRun{
		wall:     pick(func(r benchRun) time.Duration { return r.wall }),
		cpu:      pick(func(r benchRun) time.Duration { return r.cpu }),
		regCPU:   pick(func(r benchRun) time.Duration { return r.regCPU }),
		convertS: pickF(func(r benchRun) float64 { return r.convertS }),
		uploadS:  pickF(func(r benchRun) float64 { return r.uploadS }),
	}
}

// timed runs argv with env and returns its wall time and its CPU time
// (user+sys, its waited-for children's included).
func timed(t testing.TB, env []string, argv ...string) benchRun {
	t.Helper()
	return timedOut(t, env, io.Discard, argv...)
}

func timedOut(t testing.TB, env []string, stdout io.Writer, argv ...string) benchRun {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	var stderr bytes.Buffer
	cmd.Env, cmd.Stdout, cmd.Stderr = env, stdout, &stderr
	start := time.Now()
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(argv, " "), err, lastLines(stderr.String(), 20))
	}
	wall := time.Since(start)
	ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	return benchRun{wall: wall, cpu: time.Duration(ru.Utime.Nano() + ru.Stime.Nano())}
}

// procCPU is a running process's user+sys time so far (/proc/PID/stat).
func procCPU(t testing.TB, pid int) time.Duration {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	must(t, err)
	// The fields after the command name, which is in parentheses and
	// may hold spaces: utime and stime are the 14th and 15th of all.
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	ut, err := strconv.ParseInt(f[11], 10, 64)
	must(t, err)
	st, err := strconv.ParseInt(f[12], 10, 64)
	must(t, err)
	return time.Duration(ut+st) * time.Second / 100 // USER_HZ
}

// syncDisks writes out what the run before left dirty, so that its
// writeback does not fall on the next run.
func syncDisks() { syscall.Sync() }

// linuxTar is the Linux tree's tar: erofsbench's DATA/tar/linux.tar if
// there, else DATA/linux tarred once into the work directory.
func linuxTar(t testing.TB) string {
	t.Helper()
	data := os.Getenv("OCIEROFS_BENCH_DATA")
	if data == "" {
		data = "/var/tmp/ocierofs-bench"
	}
	if p := filepath.Join(data, "tar", "linux.tar"); fileExists(p) {
		return p
	}
	tree := filepath.Join(data, "linux")
	if !fileExists(tree) {
		t.Fatalf("no Linux tree: neither %s/tar/linux.tar nor %s (make bench-mkfs makes them; or set OCIEROFS_BENCH_DATA)", data, tree)
	}
	p := filepath.Join(benchWork(t), "linux.tar")
	if fileExists(p) {
		return p
	}
	// Sorted, owner 0:0 and one mtime, like erofsbench's tars.
	cmd := exec.Command("tar", "--sort=name", "--owner=0", "--group=0", "--numeric-owner", "--mtime=@1700000000",
		"-C", tree, "-cf", p+".tmp", ".")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("tar of %s: %v\n%s", tree, err, out)
	}
	must(t, os.Rename(p+".tmp", p))
	return p
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// debianLayers are the directories of this Debian host that make the
// layers of the debian4 image, bottom first: a system's configuration and
// package database, perl, python, helpers.
var debianLayers = [][]string{
	{"etc", "usr/sbin", "var/lib/dpkg", "usr/lib/apt", "usr/lib/dpkg", "usr/lib/systemd", "usr/share/zoneinfo"},
	{"usr/share/perl", "usr/share/perl5", "usr/lib/x86_64-linux-gnu/perl", "usr/lib/x86_64-linux-gnu/perl-base"},
	{"usr/lib/python3", "usr/lib/python3.11"},
	{"usr/libexec"},
}

// benchImageOf is a linux/amd64 image of layers.
func benchImageOf(t testing.TB, ls ...v1.Layer) v1.Image {
	t.Helper()
	img, err := mutate.AppendLayers(mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON), ls...)
	must(t, err)
	cf, err := img.ConfigFile()
	must(t, err)
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", "amd64"
	img, err = mutate.ConfigFile(img, cf)
	must(t, err)
	return img
}

// hostLayer is a gzip layer of this host's dirs (those that exist), made
// once into the work directory.
func hostLayer(t testing.TB, name string, dirs []string) *tarFileLayer {
	t.Helper()
	work := benchWork(t)
	tarPath := filepath.Join(work, name+".tar")
	if !fileExists(tarPath + ".gz") {
		var have []string
		for _, d := range dirs {
			if fileExists(filepath.Join("/", d)) {
				have = append(have, d)
			}
		}
		args := append([]string{"--sort=name", "--numeric-owner", "--xattrs", "--mtime=@1700000000", "-C", "/", "-cf", tarPath}, have...)
		if out, err := exec.Command("tar", args...).CombinedOutput(); err != nil && !strings.Contains(string(out), "socket ignored") {
			t.Fatalf("tar %v: %v\n%s", have, err, out)
		}
		if out, err := exec.Command("gzip", "-n", "-f", "-k", tarPath).CombinedOutput(); err != nil {
			t.Fatalf("gzip %s: %v\n%s", tarPath, err, out)
		}
	}
	l, err := fileLayerOf(tarPath+".gz", tarPath)
	must(t, err)
	return l
}

// benchWork is where the benchmark's tars are made and kept.
func benchWork(t testing.TB) string {
	t.Helper()
	work := os.Getenv("OCIEROFS_BENCH_WORK")
	if work == "" {
		data := os.Getenv("OCIEROFS_BENCH_DATA")
		if data == "" {
			data = "/var/tmp/ocierofs-bench"
		}
		work = filepath.Join(data, "convert")
	}
	must(t, os.MkdirAll(work, 0o755))
	return work
}

// tarFileLayer is a tar layer read from a file: uncompressed (digest and
// diffID the same), or gzip with its tar beside it.
type tarFileLayer struct {
	path           string
	digest, diffID v1.Hash
	size, tarSize  int64
	mediaType      types.MediaType
}

// sha256File is the digest and size of the file at path.
func sha256File(path string) (v1.Hash, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return v1.Hash{}, 0, err
	}
	defer f.Close()
	return v1.SHA256(f)
}

// fileLayerOf is the layer of blob path; tarPath is its tar if it is gzip
// ("": path is the tar).
func fileLayerOf(path, tarPath string) (*tarFileLayer, error) {
	l := &tarFileLayer{path: path, mediaType: types.OCIUncompressedLayer}
	var err error
	if l.digest, l.size, err = sha256File(path); err != nil {
		return nil, err
	}
	l.diffID, l.tarSize = l.digest, l.size
	if tarPath != "" {
		l.mediaType = types.OCILayer
		if l.diffID, l.tarSize, err = sha256File(tarPath); err != nil {
			return nil, err
		}
	}
	return l, nil
}

func (l *tarFileLayer) Digest() (v1.Hash, error)            { return l.digest, nil }
func (l *tarFileLayer) DiffID() (v1.Hash, error)            { return l.diffID, nil }
func (l *tarFileLayer) Size() (int64, error)                { return l.size, nil }
func (l *tarFileLayer) MediaType() (types.MediaType, error) { return l.mediaType, nil }
func (l *tarFileLayer) Compressed() (io.ReadCloser, error)  { return os.Open(l.path) }
func (l *tarFileLayer) Uncompressed() (io.ReadCloser, error) {
	return nil, fmt.Errorf("%s: the benchmark's layers are only pushed", l.path)
}
