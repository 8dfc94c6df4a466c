package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// runTimeout bounds one build; a build that takes longer is recorded as
// failed.
const runTimeout = 15 * time.Minute

// bench holds what a measurement needs and collects its runs.
type bench struct {
	opts     *options
	tools    []*tool
	logf     func(format string, args ...any)
	manif    *manifest
	runs     []*runResult
	start    time.Time
	finished time.Time // end of the measurements (zero while they run)
	load     [2]string // /proc/loadavg at the start and the end: how busy the rest of the machine was
	taskset  string    // path of taskset, "" when single-worker runs are not pinned
	// gnuTime is GNU time, if there: each build runs under it and its
	// peak RSS is the one it reports. A process started from erofsbench
	// with vfork (os/exec) inherits erofsbench's own peak RSS at exec;
	// GNU time forks, and its child starts from time's small one.
	gnuTime string
	skipped []string // datasets left out, with the reason
	// cpuSpeeds, measured before each dataset's builds, bound what all
	// workers can gain over one pinned worker. Other guests can slow a
	// CPU for a while, so they are measured again and again.
	cpuSpeeds map[string][]cpuSpeed
	selfRSS   int64 // KiB, from the JSON of earlier runs (-report)
	noCPUs    bool  // do not time the CPUs (tests: the child is the test binary)
}

// runResult is one build, as kept in the JSON file.
type runResult struct {
	Suite      string   `json:"suite,omitempty"` // "dedupe"; "" for the mkfs suite
	Mode       string   `json:"mode,omitempty"`  // dedupe suite: the dedupeMode
	Dataset    string   `json:"dataset"`
	Input      string   `json:"input"`
	Tool       string   `json:"tool"`
	Codec      string   `json:"codec"`
	Workers    int      `json:"workers"`
	Pinned     string   `json:"pinned,omitempty"` // CPU list of taskset, if pinned
	Copies     int      `json:"copies,omitempty"` // -copies: builds run at once, one per CPU (0: alone)
	Run        int      `json:"run"`
	Args       []string `json:"args"`
	WallS      float64  `json:"wall_s"`
	UserS      float64  `json:"user_s"`
	SysS       float64  `json:"sys_s"`
	MaxRSSKiB  int64    `json:"max_rss_kib"`
	ImageBytes int64    `json:"image_bytes"`
	SHA256     string   `json:"sha256,omitempty"`   // ocierofs images, first run
	Verified   string   `json:"verified,omitempty"` // "ok" or the verify error
	// InputCached is the fraction of the input file in the page cache
	// before the read that precedes the build (pagecache.go).
	InputCached *float64 `json:"input_cached,omitempty"`
	RSSBy       string   `json:"rss_by,omitempty"` // "GNU time", or "" for erofsbench's wait4
	Err         string   `json:"error,omitempty"`
}

// cellKey names one table cell.
type cellKey struct {
	dataset, tool, codec string
	workers              int
}

// measure runs every cell. The builders and worker settings take turns
// run by run, so that a disturbance from the rest of the machine spreads
// over all of them rather than falling on one.
func (b *bench) measure(datasets []string) error {
	if err := b.startMeasure(); err != nil {
		return err
	}
	imgDir := b.opts.imgDir
	for _, ds := range datasets {
		in := filepath.Join(b.opts.data, ds)
		if b.opts.input == "tar" {
			in = filepath.Join(b.opts.data, "tar", ds+".tar")
		}
		if err := warm(in); err != nil {
			return fmt.Errorf("reading %s: %w", in, err)
		}
		b.measureCPUs(ds)
		for _, c := range b.opts.codecs {
			var supported []*tool
			for _, t := range b.tools {
				if _, bad := t.Unsupported[c]; !bad {
					supported = append(supported, t)
				}
			}
			type setting struct {
				workers int
				active  []*tool
			}
			var settings []setting
			for _, w := range b.opts.workers {
				workers := 1
				if w == "all" {
					workers = cpus()
				}
				var active []*tool
				for _, t := range supported {
					if workers == 1 || t.WorkersFlag {
						active = append(active, t)
					}
				}
				settings = append(settings, setting{workers, active})
			}
			for r := 1; r <= b.opts.runs; r++ {
				for _, st := range settings {
					for _, t := range st.active {
						img := filepath.Join(imgDir, fmt.Sprintf("%s-%s-%s-w%d.erofs", t.Name, ds, c, st.workers))
						res := b.runOne(t, ds, c, st.workers, r, in, img)
						b.runs = append(b.runs, res)
						b.logRun(res, "")
						if !b.opts.keep || r < b.opts.runs {
							os.Remove(img)
						}
					}
				}
				if b.opts.copies && cpus() > 1 {
					for _, t := range supported {
						b.runCopies(t, ds, c, r, in)
					}
				}
			}
		}
		if err := b.writeJSON(); err != nil { // keep what is done if a later dataset fails
			return err
		}
	}
	return nil
}

func (b *bench) logRun(res *runResult, what string) {
	status := ""
	if res.Err != "" {
		status = " FAILED: " + res.Err
	}
	b.logf("%-9s %-7s %-10s w%d%s run %d: %.3f s wall, %.3f s cpu, %.1f MiB rss, %d bytes%s",
		res.Dataset, res.Codec, res.Tool, res.Workers, what, res.Run, res.WallS, res.UserS+res.SysS, float64(res.MaxRSSKiB)/1024, res.ImageBytes, status)
}

// runCopies runs one single-worker build per CPU at once, each pinned to
// its CPU. Nothing is shared between them but the machine: the time each
// takes against a build alone says what the CPUs give work that needs no
// coordination (other guests, shared caches, memory bandwidth, a slower
// CPU), which bounds what all workers of one build can gain.
func (b *bench) runCopies(t *tool, ds, c string, r int, in string) {
	if b.taskset == "" {
		return // startMeasure said why
	}
	n := cpus()
	res := make([]*runResult, n)
	for i := range n {
		res[i] = &runResult{Dataset: ds, Input: b.opts.input, Tool: t.Name, Codec: c, Workers: 1, Run: r,
			Copies: n, Pinned: strconv.Itoa(i)}
	}
	b.warmRun(in, res...)
	var wg sync.WaitGroup
	for i := range n {
		img := filepath.Join(b.opts.imgDir, fmt.Sprintf("%s-%s-%s-copy%d.erofs", t.Name, ds, c, i))
		wg.Go(func() {
			b.execRun(t, res[i], t.args(c, 1, in, img, b.opts.input == "tar"), in, img, false)
			os.Remove(img)
		})
	}
	wg.Wait()
	for _, x := range res {
		b.runs = append(b.runs, x)
		b.logRun(x, fmt.Sprintf(" copy on CPU %s of %d", x.Pinned, n))
	}
}

// startMeasure notes the start time, finds taskset and makes the image
// directory.
func (b *bench) startMeasure() error {
	b.start = time.Now()
	b.load[0] = loadavg()
	if b.opts.pinCPU >= 0 {
		if p, err := exec.LookPath("taskset"); err == nil {
			b.taskset = p
		} else {
			b.logf("no taskset: single-worker runs are not pinned, and -copies is not run")
		}
	}
	if err := exec.Command("/usr/bin/time", "-f", "%M", "-o", os.DevNull, "true").Run(); err == nil {
		b.gnuTime = "/usr/bin/time"
	} else {
		b.logf("no GNU time: peak RSS figures include erofsbench's own (%v)", err)
	}
	return os.MkdirAll(b.opts.imgDir, 0o755)
}

// measureCPUs records the CPUs' speeds before dataset ds.
func (b *bench) measureCPUs(ds string) {
	if b.noCPUs {
		return
	}
	s, err := cpuSpeedsChild()
	if err != nil {
		b.logf("CPU speeds not measured: %v", err)
		return
	}
	if b.cpuSpeeds == nil {
		b.cpuSpeeds = map[string][]cpuSpeed{}
	}
	b.cpuSpeeds[ds] = s
	b.logf("%s: %s", ds, strings.TrimSpace(cpuSpeedLine(s, b.opts.pinCPU)))
}

// warmRun reads the input before a build (or the builds run at once) and
// records in each res how much of it was cached before.
func (b *bench) warmRun(in string, res ...*runResult) {
	frac, err := warmInput(in)
	if err != nil {
		b.logf("reading %s before a build: %v", in, err)
	}
	if frac >= 0 {
		for _, r := range res {
			r.InputCached = &frac
		}
	}
}

// runOne builds one image and measures it.
func (b *bench) runOne(t *tool, ds, c string, workers, r int, in, img string) *runResult {
	res := &runResult{Dataset: ds, Input: b.opts.input, Tool: t.Name, Codec: c, Workers: workers, Run: r}
	b.warmRun(in, res)
	b.execRun(t, res, t.args(c, workers, in, img, b.opts.input == "tar"), in, img, b.opts.input == "tar")
	return res
}

// execRun runs one build with args (pinned when res.Workers is 1), and
// fills in res: times, peak RSS, image size and, for the first ocierofs
// run, the image's hash and (with -verify, when verifiable) its check
// against the tar.
func (b *bench) execRun(t *tool, res *runResult, args []string, in, img string, verifiable bool) {
	workers, r := res.Workers, res.Run
	name := t.Path
	if workers == 1 && b.taskset != "" {
		if res.Pinned == "" {
			res.Pinned = strconv.Itoa(b.opts.pinCPU)
		}
		args = append([]string{"-c", res.Pinned, t.Path}, args...)
		name = b.taskset
	}
	res.Args = append([]string{name}, args...)
	os.Remove(img)
	rssOut := ""
	if b.gnuTime != "" {
		rssOut = img + ".rss"
		args = append([]string{"-f", "%M", "-o", rssOut, name}, args...)
		name = b.gnuTime
		defer os.Remove(rssOut)
	}

	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	var stderr bytes.Buffer
	cmd.Stdout = io.Discard
	cmd.Stderr = &stderr
	t0 := time.Now()
	err := cmd.Run()
	res.WallS = time.Since(t0).Seconds()
	if ps := cmd.ProcessState; ps != nil {
		if ru, ok := ps.SysUsage().(*syscall.Rusage); ok {
			res.UserS = tv(ru.Utime)
			res.SysS = tv(ru.Stime)
			res.MaxRSSKiB = int64(ru.Maxrss) // KiB on Linux; int32 on 32-bit
		}
	}
	if rssOut != "" {
		res.RSSBy = "GNU time"
	}
	if rssOut != "" && err == nil {
		// The CPU times above are GNU time's and its child's, to the
		// microsecond; the peak RSS is the child's alone.
		out, rerr := os.ReadFile(rssOut)
		if rerr == nil {
			_, rerr = fmt.Sscan(string(out), &res.MaxRSSKiB)
		}
		if rerr != nil {
			err = fmt.Errorf("reading GNU time's output: %w", rerr)
		}
	}
	if err != nil {
		res.Err = firstLine(stderr.Bytes(), err)
		return
	}
	st, err := os.Stat(img)
	if err != nil {
		res.Err = err.Error()
		return
	}
	res.ImageBytes = st.Size()
	if t.kind == kindOcierofs && r == 1 && res.Copies == 0 {
		if res.SHA256, err = hashFile(img); err != nil {
			res.Err = err.Error()
		}
		if b.opts.verify && verifiable {
			out, err := runCombined(t.Path, "verify", img, in)
			res.Verified = "ok"
			if err != nil {
				res.Verified = firstLine(out, err)
			}
		}
	}
}

// runCombined runs a helper command (a probe or a verify) with the build
// timeout and returns its stdout and stderr together.
func runCombined(name string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	return exec.CommandContext(ctx, name, args...).CombinedOutput()
}

func tv(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }

func hashFile(p string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// cell is the median of the successful runs of one cell.
type cell struct {
	n, failed        int
	wall, cpu, rss   float64 // s, s, MiB
	image            int64
	sizesDiffer      bool
	sha256, firstErr string
}

func (b *bench) cell(k cellKey) *cell {
	return medianCell(b.runs, func(r *runResult) bool {
		return r.Suite == "" && r.Copies == 0 && r.Dataset == k.dataset && r.Tool == k.tool && r.Codec == k.codec && r.Workers == k.workers
	})
}

// copiesCell is the median build of -copies, over every copy of every run.
func (b *bench) copiesCell(ds, tool, codec string) (*cell, int) {
	n := 0
	c := medianCell(b.runs, func(r *runResult) bool {
		if r.Suite == "" && r.Copies > 0 && r.Dataset == ds && r.Tool == tool && r.Codec == codec {
			n = r.Copies
			return true
		}
		return false
	})
	return c, n
}

// medianCell is the cell of the runs that match; nil when none does.
func medianCell(runs []*runResult, match func(*runResult) bool) *cell {
	var wall, cpu, rss []float64
	c := &cell{}
	for _, r := range runs {
		if !match(r) {
			continue
		}
		if r.Err != "" {
			c.failed++
			if c.firstErr == "" {
				c.firstErr = r.Err
			}
			continue
		}
		wall = append(wall, r.WallS)
		cpu = append(cpu, r.UserS+r.SysS)
		rss = append(rss, float64(r.MaxRSSKiB)/1024)
		if c.image != 0 && c.image != r.ImageBytes {
			c.sizesDiffer = true
		}
		c.image = r.ImageBytes
		if r.SHA256 != "" {
			c.sha256 = r.SHA256
		}
	}
	c.n = len(wall)
	if c.n == 0 && c.failed == 0 {
		return nil
	}
	c.wall, c.cpu, c.rss = median(wall), median(cpu), median(rss)
	return c
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
