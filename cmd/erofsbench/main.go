// Command erofsbench measures EROFS image builders side by side: ocierofs
// mkfs and, where present, erofs-utils' mkfs.erofs, on the datasets of the
// project's seed 003 with its settings (4 KiB blocks and pclusters, 64 KiB
// largest extent, no tail packing, no fragments, no dedupe, extended inodes,
// compact indexes).
//
// It first makes the datasets in a directory, deterministically (fixed
// seed, fixed mtimes, sorted tar members, owner 0:0), and reuses them on
// later runs:
//
//	src256     one 256 MiB file: the Linux .c/.h files concatenated in path order
//	rand256    one 256 MiB file of ChaCha8 bytes
//	small100k  100 directories of 1,000 files, 128 B to 8 KiB, ~75% text
//	linux      the tree of Debian's linux-source package (/usr/src/linux-source-*.tar.xz)
//
// each also as DIR/tar/NAME.tar. Then for every dataset × codec (none, lz4,
// lz4hc, deflate level 6, lzma level 1, zstd level 1, those a builder
// cannot do are skipped) × workers (1, pinned to one CPU; and all CPUs
// where the builder has a --workers flag) it runs each builder N times and
// takes the median wall time, CPU time (user+sys of the child) and peak RSS.
// It prints a Markdown report with the speedups and writes every run to a
// JSON file.
//
// With -copies it also runs, per cell, one single-worker build on every
// CPU at once, each pinned to its own. They share nothing but the machine,
// so how much slower each is than a build alone (other guests, caches,
// memory bandwidth, unequal CPUs) bounds what all workers of one build can
// gain over one: the report gives that bound beside the speedup measured.
//
// Usage:
//
//	go build -o /tmp/erofsbench ./cmd/erofsbench
//	make build   # bin/ocierofs, static, as a release is (see the Makefile)
//	/tmp/erofsbench -data /var/tmp/erofsbench -ocierofs bin/ocierofs \
//	        -mkfs-erofs /usr/local/bin/mkfs.erofs -out results.md
//	/tmp/erofsbench -data /var/tmp/erofsbench -datasets small100k -codecs lz4,lz4hc \
//	        -input dir -mkfs-erofs /usr/bin/mkfs.erofs   # directory input, e.g. erofs-utils 1.5
//	/tmp/erofsbench -report a.json,b.json                # the tables again, runs merged
//
// The dedupe suite (-suite dedupe) measures image size and build cost of
// each way of sharing data (none, whole-file, 4 KiB / 64 KiB / 1 MiB chunks,
// lz4 and zstd with and without extent dedupe, tar index) on three more
// datasets: small100k, debian (a debootstrap --variant=minbase bookworm
// rootfs, made once; skipped with a reason when the mirror is unreachable)
// and versions (16 releases of a ~20 MiB source tree, each editing a few
// files in the middle and renaming a few). Every build is single-worker and
// pinned; a mode whose flag the binary rejects shows as unsupported:
//
//	/tmp/erofsbench -suite dedupe -data /var/tmp/erofsbench -ocierofs /tmp/ocierofs \
//	        -mkfs-erofs /usr/local/bin/mkfs.erofs -img-dir /dev/shm/erofsbench-img
//	/tmp/erofsbench -suite dedupe -data /var/tmp/erofsbench -datasets versions -modes none,file,chunk-4k
//
// Flags are listed by -help. The machine should be otherwise idle; ratios
// measured in one run are the figures to compare.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

// options are the command-line settings.
type options struct {
	data      string
	datasets  []string
	codecs    []string
	workers   []string
	input     string
	runs      int
	ocierofs  string
	mkfsErofs string
	pinCPU    int
	genOnly   bool
	force     bool
	seed      uint64
	linuxSrc  string
	jsonOut   string
	mdOut     string
	keep      bool
	imgDir    string
	verify    bool
	reports   string
	suite     string   // "mkfs" (seed 003) or "dedupe"
	modes     []string // dedupe suite: the dedupeModes to run
	mirror    string   // Debian mirror for the debian dataset
	copies    bool     // also run one single-worker build per CPU at once
}

func main() {
	if os.Getenv(cpuSpeedsEnv) != "" {
		cpuSpeedsMain()
		return
	}
	var o options
	var datasets, codecs, workers, modes string
	flag.StringVar(&o.suite, "suite", "mkfs", "mkfs: the seed-003 codec comparison; dedupe: image size and cost of each dedupe mode")
	flag.StringVar(&o.data, "data", "", "directory for the datasets, images and results (required)")
	flag.StringVar(&datasets, "datasets", "", "datasets to measure (default mkfs suite: "+strings.Join(datasetNames, ",")+"; dedupe suite: "+strings.Join(dedupeDatasetNames, ",")+")")
	flag.StringVar(&modes, "modes", strings.Join(dedupeModeNames(), ","), "dedupe suite: modes to measure")
	flag.StringVar(&o.mirror, "debian-mirror", "http://deb.debian.org/debian", "Debian mirror for the debian dataset (dedupe suite)")
	flag.StringVar(&codecs, "codecs", strings.Join(codecNames, ","), "codecs to measure")
	flag.StringVar(&workers, "workers", "1,all", "worker settings: 1 (pinned to -pin-cpu) and/or all (every CPU, not pinned)")
	flag.StringVar(&o.input, "input", "tar", "what the builders read: tar (DATA/tar/NAME.tar) or dir (DATA/NAME)")
	flag.IntVar(&o.runs, "runs", 3, "runs per cell (the median is reported)")
	flag.StringVar(&o.ocierofs, "ocierofs", "ocierofs", "ocierofs binary (\"\" to leave it out)")
	flag.StringVar(&o.mkfsErofs, "mkfs-erofs", "mkfs.erofs", "mkfs.erofs binary (\"\" to leave it out; skipped when not found)")
	flag.IntVar(&o.pinCPU, "pin-cpu", runtime.NumCPU()-1, "CPU for single-worker runs (taskset -c); -1: no pinning")
	flag.BoolVar(&o.genOnly, "gen-only", false, "make the datasets and stop")
	flag.BoolVar(&o.force, "force", false, "remake the datasets even if they exist")
	flag.Uint64Var(&o.seed, "seed", 20240601, "seed of the generated datasets")
	flag.StringVar(&o.linuxSrc, "linux-src", "", "linux-source tarball (default: newest /usr/src/linux-source-*.tar.*)")
	flag.StringVar(&o.jsonOut, "json", "", "raw runs as JSON (default DATA/results/erofsbench-TIME.json)")
	flag.StringVar(&o.mdOut, "out", "", "also write the Markdown report to this file")
	flag.StringVar(&o.imgDir, "img-dir", "", "where images are written (default DATA/img; a tmpfs such as /dev/shm keeps disk writeback out of the figures)")
	flag.BoolVar(&o.keep, "keep-images", false, "keep the image of the last run of each cell under DATA/img")
	flag.BoolVar(&o.copies, "copies", false, "also run as many single-worker builds at once as there are CPUs, each pinned to its own: how much all CPUs give work that needs no coordination, the bound on the all-worker speedup")
	flag.BoolVar(&o.verify, "verify", false, "check each ocierofs image once with `ocierofs verify` against its tar")
	flag.StringVar(&o.reports, "report", "", "print the report of earlier runs from their JSON files (comma-separated, merged) and stop")
	flag.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: erofsbench -data DIR [flags]\n\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if datasets == "" {
		datasets = strings.Join(datasetNames, ",")
		if o.suite == "dedupe" {
			datasets = strings.Join(dedupeDatasetNames, ",")
		}
	}
	o.datasets = splitList(datasets)
	o.modes = splitList(modes)
	o.codecs = splitList(codecs)
	o.workers = splitList(workers)
	if err := run(&o); err != nil {
		fmt.Fprintln(os.Stderr, "erofsbench:", err)
		os.Exit(1)
	}
}

// run makes the datasets, finds the builders and runs the suite o asks
// for, or with -report only prints the report of earlier runs.
func run(o *options) error {
	if o.reports != "" {
		return reprint(o)
	}
	if err := checkOptions(o); err != nil {
		return err
	}
	if err := dataDirs(o); err != nil {
		return err
	}
	logf := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "[erofsbench %s] %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
	}
	g, ready, err := makeDatasets(o, logf)
	if err != nil {
		return err
	}
	if o.genOnly {
		logf("datasets ready in %s (MANIFEST.txt)", o.data)
		return nil
	}
	tools, err := findTools(o, logf)
	if err != nil {
		return err
	}
	b := &bench{opts: o, tools: tools, logf: logf, manif: g.manif, skipped: g.skipped}
	if o.suite == "dedupe" {
		if err := b.probeDedupe(); err != nil {
			return err
		}
		if err := b.measureDedupe(ready); err != nil {
			return err
		}
		return b.report()
	}
	if err := b.probe(); err != nil {
		return err
	}
	if err := b.measure(ready); err != nil {
		return err
	}
	return b.report()
}

// reprint prints the report of the runs in the JSON files of -report,
// merged, and writes it to -out too.
func reprint(o *options) error {
	b, err := loadResults(splitList(o.reports))
	if err != nil {
		return err
	}
	md := b.render()
	fmt.Print(md)
	if o.mdOut != "" {
		return os.WriteFile(o.mdOut, []byte(md), 0o644)
	}
	return nil
}

// checkOptions rejects flags with values the suites do not know, before
// any dataset is made.
func checkOptions(o *options) error {
	if o.data == "" {
		flag.Usage()
		return fmt.Errorf("-data is required")
	}
	if o.input != "tar" && o.input != "dir" {
		return fmt.Errorf("-input %q: want tar or dir", o.input)
	}
	switch o.suite {
	case "mkfs":
	case "dedupe":
		if o.input != "tar" {
			return fmt.Errorf("-suite dedupe reads tars only")
		}
		for _, m := range o.modes {
			if _, ok := findMode(m); !ok {
				return fmt.Errorf("unknown mode %q (have %s)", m, strings.Join(dedupeModeNames(), ", "))
			}
		}
	default:
		return fmt.Errorf("-suite %q: want mkfs or dedupe", o.suite)
	}
	for _, c := range o.codecs {
		if _, ok := codecs[c]; !ok {
			return fmt.Errorf("unknown codec %q (have %s)", c, strings.Join(codecNames, ", "))
		}
	}
	for _, w := range o.workers {
		if w != "1" && w != "all" {
			return fmt.Errorf("-workers %q: want 1 and/or all", w)
		}
	}
	return nil
}

// dataDirs makes the data directory and makes o.data and o.imgDir
// absolute paths in it, as the builders run in other directories.
func dataDirs(o *options) error {
	if err := os.MkdirAll(o.data, 0o755); err != nil {
		return err
	}
	data, err := filepath.Abs(o.data)
	if err != nil {
		return err
	}
	o.data = data
	if o.imgDir == "" {
		o.imgDir = filepath.Join(data, "img")
	}
	return nil
}

// makeDatasets makes the datasets o asks for and those they are made
// from (src256 needs the Linux tree and small100k needs src256), writes
// the manifest, and returns the asked-for ones that could be made. A
// dataset this machine cannot make is skipped with its reason.
func makeDatasets(o *options, logf func(string, ...any)) (*generator, []string, error) {
	g := &generator{root: o.data, seed: o.seed, force: o.force, logf: logf, mirror: o.mirror,
		manif: &manifest{Seed: o.seed, Datasets: map[string]*datasetInfo{}}}
	g.ksrc = o.linuxSrc
	if g.ksrc == "" {
		g.ksrc = findKernelSource()
	}
	want := map[string]bool{}
	for _, d := range o.datasets {
		if _, ok := datasetTitle[d]; !ok {
			return nil, nil, fmt.Errorf("unknown dataset %q (have %s)", d, strings.Join(buildOrder, ", "))
		}
		want[d] = true
	}
	if want["small100k"] {
		want["src256"] = true
	}
	if (want["src256"] || want["versions"]) && g.ksrc != "" {
		want["linux"] = true
	}
	for _, name := range buildOrder {
		if !want[name] {
			continue
		}
		if err := g.ensure(name); err != nil {
			if name == "linux" && g.ksrc == "" {
				logf("skipping linux: %v", errNoKernelSource)
				continue
			}
			var skip *skipError
			if errors.As(err, &skip) {
				logf("skipping %s: %v", name, skip)
				g.skipped = append(g.skipped, name+": "+skip.reason)
				continue
			}
			return nil, nil, err
		}
	}
	var ready []string
	for _, name := range o.datasets {
		if _, ok := g.manif.Datasets[name]; ok {
			ready = append(ready, name)
		}
	}
	return g, ready, writeManifest(o.data, g.manif)
}

// findTools returns the builders to measure: ocierofs, and mkfs.erofs
// when it is installed.
func findTools(o *options, logf func(string, ...any)) ([]*tool, error) {
	var tools []*tool
	if o.ocierofs != "" {
		t, err := newOcierofs(o.ocierofs)
		if err != nil {
			return nil, err
		}
		tools = append(tools, t)
	}
	if o.mkfsErofs != "" {
		if p, err := exec.LookPath(o.mkfsErofs); err != nil {
			logf("no mkfs.erofs (%v): measuring without it", err)
		} else {
			t, err := newMkfsErofs(p)
			if err != nil {
				return nil, err
			}
			tools = append(tools, t)
		}
	}
	if len(tools) == 0 {
		return nil, fmt.Errorf("no builder to measure")
	}
	return tools, nil
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}
