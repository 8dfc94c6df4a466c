package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"
)

// results is the JSON file: everything needed to redo the tables.
type results struct {
	Started  time.Time               `json:"started"`
	Finished time.Time               `json:"finished"`
	Host     hostInfo                `json:"host"`
	Settings map[string]any          `json:"settings"`
	Tools    []*tool                 `json:"tools"`
	Datasets map[string]*datasetInfo `json:"datasets"`
	Runs     []*runResult            `json:"runs"`
	Modes    []dedupeMode            `json:"modes,omitempty"`   // dedupe suite
	Skipped  []string                `json:"skipped,omitempty"` // datasets not made, with the reason
	// CPUSpeeds: each CPU's compression speed, pinned (cpuspeed.go),
	// measured before each dataset.
	CPUSpeeds map[string][]cpuSpeed `json:"cpu_speeds,omitempty"`
	// SelfRSSKiB is erofsbench's own peak RSS: every build's is at least
	// that, as a child started with vfork inherits its parent's peak at
	// exec. It must stay below the smallest figure measured.
	SelfRSSKiB int64 `json:"erofsbench_max_rss_kib,omitempty"`
}

type hostInfo struct {
	CPUs   int    `json:"cpus"`
	Model  string `json:"cpu_model"`
	Kernel string `json:"kernel"`
}

// selfRSS is this process's peak RSS so far, KiB.
func selfRSS() int64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return int64(ru.Maxrss)
}

func host() hostInfo {
	h := hostInfo{CPUs: runtime.NumCPU()}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		h.Kernel = strings.TrimSpace(string(b))
	}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				h.Model = strings.TrimSpace(v)
				break
			}
		}
		f.Close()
	}
	return h
}

func (b *bench) jsonPath() string {
	if b.opts.jsonOut == "" {
		b.opts.jsonOut = filepath.Join(b.opts.data, "results",
			"erofsbench-"+b.start.UTC().Format("20060102T150405Z")+".json")
	}
	return b.opts.jsonOut
}

func (b *bench) writeJSON() error {
	b.selfRSS = selfRSS()
	res := results{
		Started: b.start.UTC(), Finished: time.Now().UTC(), Host: host(),
		Settings: map[string]any{
			"input": b.opts.input, "runs": b.opts.runs, "workers": b.opts.workers,
			"pin_cpu": b.opts.pinCPU, "codecs": b.opts.codecs,
			"block": 4096, "pcluster": 4096, "max_extent": 65536,
			"tail_packing": false, "fragments": false, "mkfs_erofs_dedupe": false, "ocierofs_file_dedupe": true,
		},
		Tools: b.tools, Datasets: b.manif.Datasets, Runs: b.runs, Skipped: b.skipped,
		CPUSpeeds: b.cpuSpeeds, SelfRSSKiB: b.selfRSS,
	}
	if b.opts.suite == "dedupe" {
		res.Settings = map[string]any{
			"suite": "dedupe", "input": "tar", "runs": b.opts.runs, "workers": []string{"1"},
			"pin_cpu": b.opts.pinCPU, "img_dir": b.opts.imgDir,
			"block": 4096, "pcluster": 4096, "max_extent": 65536,
			"tail_packing": false, "fragments": false,
		}
		res.Settings["loadavg_start"], res.Settings["loadavg_end"] = b.load[0], b.load[1]
		for _, name := range b.opts.modes {
			m, _ := findMode(name)
			res.Modes = append(res.Modes, m)
		}
	}
	p := b.jsonPath()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	out, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(p, out, 0o644)
}

// report writes the JSON file and prints the Markdown tables.
func (b *bench) report() error {
	if err := b.writeJSON(); err != nil {
		return err
	}
	md := b.render()
	fmt.Print(md)
	if b.opts.mdOut != "" {
		if err := os.WriteFile(b.opts.mdOut, []byte(md), 0o644); err != nil {
			return err
		}
	}
	b.logf("raw runs in %s", b.jsonPath())
	return nil
}

// render is the Markdown report of the suite that was run.
func (b *bench) render() string {
	if b.opts.suite == "dedupe" {
		return b.dedupeMarkdown()
	}
	return b.markdown()
}

func (b *bench) toolLabel(t *tool) string {
	if t.Version != "" && t.Version != "unknown" && t.kind == kindMkfsErofs {
		return t.Name + " " + t.Version
	}
	return t.Name
}

func workersLabel(w int) string {
	if w == 1 {
		return "×1"
	}
	return fmt.Sprintf("×%d", w)
}

// markdown renders the report: per dataset one table of wall / CPU / RSS
// cells with the other builders' times divided by the first builder's
// (above 1: the first builder is faster), then the image sizes.
func (b *bench) markdown() string {
	var sb strings.Builder
	b.markdownHeader(&sb)
	ws := b.workerCounts()
	for _, ds := range b.datasetsMeasured() {
		b.speedTable(&sb, ds, ws)
		b.copiesTable(&sb, ds, ws)
	}
	notes := b.sizeTable(&sb, ws)
	if len(b.tools) > 1 {
		fmt.Fprintf(&sb, "\nPercentages: %s's image relative to the other builder's (negative: smaller).\n", b.tools[0].Name)
	}
	writeNotes(&sb, append(notes, b.runNotes()...))
	b.commandLines(&sb)
	return sb.String()
}

// commandLines writes each builder's command line for every codec, as the
// first single-worker run of the codec had it: what was measured, to be
// run again by hand.
func (b *bench) commandLines(sb *strings.Builder) {
	var lines []string
	for _, t := range b.tools {
		for _, c := range b.opts.codecs {
			i := slices.IndexFunc(b.runs, func(r *runResult) bool {
				return r.Suite == "" && r.Tool == t.Name && r.Codec == c && r.Workers == 1 && r.Copies == 0
			})
			if i >= 0 {
				lines = append(lines, strings.Join(b.runs[i].Args, " "))
			}
		}
	}
	if len(lines) == 0 {
		return
	}
	sb.WriteString("\nCommand lines (one worker; the all-worker runs differ in --workers only):\n\n```sh\n")
	for _, l := range lines {
		sb.WriteString(l + "\n")
	}
	sb.WriteString("```\n")
}

// markdownHeader writes how the suite was measured: host, settings, the
// page cache, the builders and the codecs they skipped, and how to read
// a cell.
func (b *bench) markdownHeader(sb *strings.Builder) {
	h := host()
	fmt.Fprintf(sb, "## erofsbench %s\n\n", b.start.UTC().Format("2006-01-02 15:04 UTC"))
	fmt.Fprintf(sb, "Host: %d CPUs (%s), Linux %s. Input: %s. Median of %d runs; single-worker runs pinned to CPU %d.\n",
		h.CPUs, h.Model, h.Kernel, b.inputLabel(), b.opts.runs, b.opts.pinCPU)
	if slices.ContainsFunc(b.runs, func(r *runResult) bool { return r.RSSBy != "" }) {
		sb.WriteString("Peak RSS as GNU time reports it: it forks each build, which starts from its small peak, not erofsbench's.\n")
	} else if b.selfRSS > 0 {
		fmt.Fprintf(sb, "erofsbench's own peak RSS: %.1f MiB, a floor under every RSS figure (a build started with vfork inherits its parent's peak at exec).\n", float64(b.selfRSS)/1024)
	}
	fmt.Fprintf(sb, "Settings: 4 KiB blocks and pclusters, 64 KiB max extent, no tail packing, no fragments, %s, compact indexes. mkfs.erofs: no dedupe (^dedupe), the UUID given (-U); ocierofs: otherwise its defaults (whole-file dedupe, the UUID derived from the input).\n", inodesSetting(b.tools))
	sb.WriteString(cachedLine(b.runs))
	sb.WriteString("\n")
	for _, t := range b.tools {
		fmt.Fprintf(sb, "- %s: %s (%s)", t.Name, t.Version, t.Path)
		if len(t.Unsupported) > 0 {
			var s []string
			for _, c := range b.opts.codecs {
				if why, ok := t.Unsupported[c]; ok {
					s = append(s, c+" ("+why+")")
				}
			}
			fmt.Fprintf(sb, "; skipped: %s", strings.Join(s, "; "))
		}
		if !t.WorkersFlag {
			fmt.Fprintf(sb, "; no --workers flag (single-threaded runs only)")
		}
		sb.WriteString("\n")
	}
	sb.WriteString("\nEach cell: wall s / CPU s (user+sys) / peak RSS MiB. ")
	if len(b.tools) > 1 {
		fmt.Fprintf(sb, "\"÷\" columns: the other builder's wall time, CPU time and peak RSS divided by %s's (above 1: %s is faster / smaller).", b.tools[0].Name, b.tools[0].Name)
	}
	sb.WriteString("\n")
}

// speedTable writes the table of dataset ds: per codec, each builder's
// cell for each worker count, the others' ratios to the first builder,
// and the first builder's speedup from the fewest workers to the most.
func (b *bench) speedTable(sb *strings.Builder, ds string, ws []int) {
	ref := b.tools[0]
	fmt.Fprintf(sb, "\n### %s\n\n", datasetTitle[ds])
	if l := cpuSpeedLine(b.cpuSpeeds[ds], b.opts.pinCPU); l != "" {
		sb.WriteString("Before these builds: " + l + "\n")
	}
	head := []string{"codec"}
	for _, w := range ws {
		for _, t := range b.tools {
			head = append(head, b.toolLabel(t)+" "+workersLabel(w))
		}
		for _, t := range b.tools[1:] {
			head = append(head, fmt.Sprintf("%s ÷ %s %s: wall, CPU, RSS", t.Name, ref.Name, workersLabel(w)))
		}
	}
	if len(ws) > 1 {
		head = append(head, fmt.Sprintf("%s wall %s ÷ %s", ref.Name, workersLabel(ws[0]), workersLabel(ws[len(ws)-1])))
	}
	row(sb, head)
	row(sb, numericSep(len(head)))
	for _, c := range b.opts.codecs {
		if r, found := b.speedRow(ds, c, ws); found {
			row(sb, r)
		}
	}
}

// speedRow is codec c's row of speedTable; found says whether a builder
// has a cell in it.
func (b *bench) speedRow(ds, c string, ws []int) (r []string, found bool) {
	ref := b.tools[0]
	r = []string{codecTitle[c]}
	for _, w := range ws {
		rc := b.cell(cellKey{ds, ref.Name, c, w})
		for _, t := range b.tools {
			cl := b.cell(cellKey{ds, t.Name, c, w})
			r = append(r, fmtCell(cl))
			found = found || cl != nil
		}
		for _, t := range b.tools[1:] {
			r = append(r, ratio(b.cell(cellKey{ds, t.Name, c, w}), rc))
		}
	}
	if len(ws) > 1 {
		r = append(r, speedRatio(b.cell(cellKey{ds, ref.Name, c, ws[0]}), b.cell(cellKey{ds, ref.Name, c, ws[len(ws)-1]})))
	}
	return r, found
}

// sizeTable writes the image sizes of the builds with the fewest workers
// (the others' should be the same): per dataset and codec, each
// builder's, the others relative to the first's. It returns a note for
// each first builder's image that differs between worker counts.
func (b *bench) sizeTable(sb *strings.Builder, ws []int) (notes []string) {
	ref := b.tools[0]
	fmt.Fprintf(sb, "\n### Image size, MiB (%s)\n\n", strings.Join(b.toolNames(), " / "))
	head := []string{"dataset"}
	for _, c := range b.opts.codecs {
		head = append(head, codecTitle[c])
	}
	row(sb, head)
	row(sb, numericSep(len(head)))
	for _, ds := range b.datasetsMeasured() {
		r := []string{datasetTitle[ds]}
		for _, c := range b.opts.codecs {
			r = append(r, b.sizeCell(ds, c, ws[0]))
			// The first builder's images must not depend on the worker count.
			if len(ws) > 1 {
				a := b.cell(cellKey{ds, ref.Name, c, ws[0]})
				z := b.cell(cellKey{ds, ref.Name, c, ws[len(ws)-1]})
				if a != nil && z != nil && a.sha256 != "" && z.sha256 != "" && a.sha256 != z.sha256 {
					notes = append(notes, fmt.Sprintf("%s %s: %s image differs between %s and %s workers", ds, c, ref.Name, workersLabel(ws[0]), workersLabel(ws[len(ws)-1])))
				}
			}
		}
		row(sb, r)
	}
	return notes
}

// sizeCell is the image sizes of dataset ds and codec c with w workers,
// one per builder, the others relative to the first's.
func (b *bench) sizeCell(ds, c string, w int) string {
	var parts []string
	var refSize int64
	for i, t := range b.tools {
		cl := b.cell(cellKey{ds, t.Name, c, w})
		if cl == nil || cl.n == 0 {
			parts = append(parts, "–")
			continue
		}
		s := fmt.Sprintf("%.2f", float64(cl.image)/(1<<20))
		if i == 0 {
			refSize = cl.image
		} else if refSize > 0 {
			s += fmt.Sprintf(" (%+.2f%%)", 100*(float64(refSize)/float64(cl.image)-1))
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, " / ")
}

// runNotes lists the runs that failed and the images that do not verify.
func (b *bench) runNotes() []string {
	var notes []string
	for _, r := range b.runs {
		if r.Err != "" {
			notes = append(notes, fmt.Sprintf("%s %s %s ×%d run %d failed: %s", r.Dataset, r.Codec, r.Tool, r.Workers, r.Run, r.Err))
		}
		if r.Verified != "" && r.Verified != "ok" {
			notes = append(notes, fmt.Sprintf("%s %s %s ×%d: verify: %s", r.Dataset, r.Codec, r.Tool, r.Workers, r.Verified))
		}
	}
	return notes
}

func (b *bench) inputLabel() string {
	if b.opts.input == "tar" {
		return "the dataset's tar"
	}
	return "the dataset's directory"
}

func (b *bench) toolNames() []string {
	var s []string
	for _, t := range b.tools {
		s = append(s, b.toolLabel(t))
	}
	return s
}

func (b *bench) workerCounts() []int {
	var ws []int
	for _, w := range b.opts.workers {
		if w == "1" {
			ws = append(ws, 1)
		} else {
			ws = append(ws, cpus())
		}
	}
	return ws
}

// copiesTable writes, when -copies ran, how long a single-worker build
// took alone and with one more on every other CPU, and so how much faster
// than one worker all CPUs can be: the bound of the all-worker speedup.
func (b *bench) copiesTable(sb *strings.Builder, ds string, ws []int) {
	all := ws[len(ws)-1]
	var rows [][]string
	n := 0
	for _, c := range b.opts.codecs {
		for _, t := range b.tools {
			cc, k := b.copiesCell(ds, t.Name, c)
			if cc == nil {
				continue
			}
			n = k
			alone := b.cell(cellKey{ds, t.Name, c, 1})
			r := []string{codecTitle[c], t.Name, "–", fmtCell(cc), "–", "–"}
			if alone != nil && alone.n > 0 {
				r[2] = fmtCell(alone)
				if cc.n > 0 && cc.wall > 0 {
					r[4] = fmt.Sprintf("%.2f×", float64(k)*alone.wall/cc.wall)
				}
				if all > 1 {
					r[5] = speedRatio(alone, b.cell(cellKey{ds, t.Name, c, all}))
				}
			}
			rows = append(rows, r)
		}
	}
	if len(rows) == 0 {
		return
	}
	fmt.Fprintf(sb, "\n%d single-worker builds at once, each pinned to its own CPU (medians over every build):\n\n", n)
	row(sb, []string{"codec", "builder", "×1 alone", fmt.Sprintf("×1, %d at once", n), fmt.Sprintf("bound: %d × alone ÷ at once", n), "wall ×1 ÷ " + workersLabel(all)})
	row(sb, []string{"---", "---", "---:", "---:", "---:", "---:"})
	for _, r := range rows {
		row(sb, r)
	}
}

func (b *bench) datasetsMeasured() []string {
	seen := map[string]bool{}
	var out []string
	for _, r := range b.runs {
		if !seen[r.Dataset] {
			seen[r.Dataset] = true
			out = append(out, r.Dataset)
		}
	}
	return out
}

// numericSep is the separator row of a table of n columns whose first
// column is text and the others figures, aligned right.
func numericSep(n int) []string {
	sep := make([]string, n)
	for i := range sep {
		sep[i] = "---:"
	}
	sep[0] = "---"
	return sep
}

// writeNotes writes the notes under the tables, if there are any.
func writeNotes(sb *strings.Builder, notes []string) {
	if len(notes) == 0 {
		return
	}
	sb.WriteString("\nNotes:\n")
	for _, n := range notes {
		fmt.Fprintf(sb, "- %s\n", n)
	}
}

func row(sb *strings.Builder, cells []string) {
	sb.WriteString("| " + strings.Join(cells, " | ") + " |\n")
}

func fmtCell(c *cell) string {
	switch {
	case c == nil:
		return "–"
	case c.n == 0:
		return "failed"
	}
	s := fmt.Sprintf("%s / %s / %.1f", secs(c.wall), secs(c.cpu), c.rss)
	if c.failed > 0 {
		s += fmt.Sprintf(" (%d failed)", c.failed)
	}
	return s
}

// secs prints seconds with three significant digits or more.
func secs(s float64) string {
	switch {
	case s < 10:
		return fmt.Sprintf("%.3f", s)
	case s < 100:
		return fmt.Sprintf("%.2f", s)
	default:
		return fmt.Sprintf("%.1f", s)
	}
}

// ratio is other/ref for wall time, CPU time and peak RSS. On a machine
// shared with other work the CPU ratio is the steadier of the two times.
func ratio(other, ref *cell) string {
	if other == nil || ref == nil || other.n == 0 || ref.n == 0 || ref.wall == 0 || ref.cpu == 0 || ref.rss == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f×, %.2f×, %.1f×", other.wall/ref.wall, other.cpu/ref.cpu, other.rss/ref.rss)
}

// speedRatio is how much faster b is than a.
func speedRatio(a, b *cell) string {
	if a == nil || b == nil || a.n == 0 || b.n == 0 || b.wall == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f×", a.wall/b.wall)
}

// loadResults rebuilds a bench from JSON result files (their runs merged in
// order), so that a report can be printed again or several runs combined.
func loadResults(paths []string) (*bench, error) {
	b := &bench{opts: &options{}, manif: &manifest{Datasets: map[string]*datasetInfo{}}}
	seenTool := map[string]bool{}
	seenCodec := map[string]bool{}
	seenWorkers := map[int]bool{}
	seenMode := map[string]bool{}
	for _, p := range paths {
		raw, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		var r results
		if err := json.Unmarshal(raw, &r); err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		if b.start.IsZero() {
			b.start = r.Started
			b.opts.suite, _ = r.Settings["suite"].(string)
			b.load[0], _ = r.Settings["loadavg_start"].(string)
			b.opts.input, _ = r.Settings["input"].(string)
			if n, ok := r.Settings["runs"].(float64); ok {
				b.opts.runs = int(n)
			}
			if n, ok := r.Settings["pin_cpu"].(float64); ok {
				b.opts.pinCPU = int(n)
			}
		}
		for _, t := range r.Tools {
			if !seenTool[t.Name] {
				seenTool[t.Name] = true
				if t.Name != "ocierofs" {
					t.kind = kindMkfsErofs
				}
				b.tools = append(b.tools, t)
			}
		}
		for n, d := range r.Datasets {
			b.manif.Datasets[n] = d
		}
		b.finished = r.Finished
		if l, ok := r.Settings["loadavg_end"].(string); ok {
			b.load[1] = l
		}
		b.skipped = append(b.skipped, r.Skipped...)
		for ds, s := range r.CPUSpeeds {
			if b.cpuSpeeds == nil {
				b.cpuSpeeds = map[string][]cpuSpeed{}
			}
			b.cpuSpeeds[ds] = s
		}
		b.selfRSS = max(b.selfRSS, r.SelfRSSKiB)
		for _, run := range r.Runs {
			seenCodec[run.Codec] = true
			seenWorkers[run.Workers] = true
			seenMode[run.Mode] = true
		}
		b.runs = append(b.runs, r.Runs...)
	}
	for _, m := range dedupeModeNames() {
		if seenMode[m] {
			b.opts.modes = append(b.opts.modes, m)
		}
	}
	for _, c := range codecNames {
		if seenCodec[c] {
			b.opts.codecs = append(b.opts.codecs, c)
		}
	}
	if seenWorkers[1] {
		b.opts.workers = append(b.opts.workers, "1")
	}
	if len(seenWorkers) > 1 || !seenWorkers[1] {
		b.opts.workers = append(b.opts.workers, "all")
	}
	if len(b.tools) == 0 {
		return nil, fmt.Errorf("no builders in %s", strings.Join(paths, ", "))
	}
	return b, nil
}

// cachedLine says how much of the input the page cache held before the read
// that precedes each build (pagecache.go), or nothing if it was not measured.
func cachedLine(runs []*runResult) string {
	n, all := 0, 0
	var least *runResult
	for _, r := range runs {
		if r.InputCached == nil {
			continue
		}
		n++
		if *r.InputCached == 1 {
			all++
		}
		if least == nil || *r.InputCached < *least.InputCached {
			least = r
		}
	}
	if n == 0 {
		return ""
	}
	return fmt.Sprintf("The input is read once before each build; before that read, %d of %d builds found all of it in the page cache, the least %.1f%% (%s, %s, %s).\n",
		all, n, *least.InputCached*100, least.Dataset, least.Tool, least.Codec)
}

// inodesSetting says which inode form each builder was asked for: seed 003
// compares extended (64-byte) inodes, which an ocierofs without
// --extended-inodes cannot write everywhere.
func inodesSetting(tools []*tool) string {
	var compact []string
	for _, t := range tools {
		if !t.ExtendedFlag {
			compact = append(compact, t.Name)
		}
	}
	if len(compact) == 0 {
		return "extended inodes (ocierofs --extended-inodes, mkfs.erofs -Eforce-inode-extended)"
	}
	return "extended inodes, except " + strings.Join(compact, ", ") + " (no --extended-inodes flag: compact inodes where they fit)"
}
