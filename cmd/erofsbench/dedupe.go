package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// The dedupe suite (-suite dedupe) measures what each way of sharing data
// between files costs and saves: image size, wall and CPU time and peak RSS
// of ocierofs mkfs with and without each dedupe mode, next to mkfs.erofs in
// the mode it has that does the same. Every build is single-worker and
// pinned, so that the time a mode adds is not hidden by parallelism.

// dedupeMode is one row of the dedupe suite.
type dedupeMode struct {
	Name  string `json:"name"`
	Title string `json:"title"`
	Codec string `json:"codec"` // key of codecs
	// Base is the mode without dedupe (same codec) this one's savings and
	// time are measured against; Base == Name for the baselines.
	Base     string   `json:"base"`
	Ocierofs []string `json:"ocierofs"` // ocierofs mkfs flags beyond the common ones
	Mkfs     []string `json:"mkfs"`     // mkfs.erofs flags beyond the common ones
	// MkfsDedupe is the dedupe word of mkfs.erofs' -E list: "^dedupe"
	// (off), "dedupe" (extent dedupe of compressed data) or "" (its
	// default, which lets --chunksize share identical chunks: ^dedupe
	// turns that off too).
	MkfsDedupe string `json:"mkfs_dedupe"`
	MkfsTar    string `json:"mkfs_tar"` // --tar= value: f (full image) or i (index only)
	// NoMkfs says why mkfs.erofs has no cell in this row ("" when it has).
	NoMkfs   string `json:"no_mkfs,omitempty"`
	SizeOnly bool   `json:"size_only,omitempty"` // only the image size is of interest
}

const noWholeFile = "mkfs.erofs has no whole-file dedupe: compare with its no-dedupe row"

// dedupeModes are the rows of the dedupe suite, in report order.
var dedupeModes = []dedupeMode{
	{Name: "none", Title: "no dedupe", Codec: "none", Base: "none",
		Ocierofs: []string{"--no-file-dedupe"}, MkfsDedupe: "^dedupe", MkfsTar: "f"},
	{Name: "file", Title: "whole-file dedupe (ocierofs default)", Codec: "none", Base: "none",
		MkfsTar: "f", NoMkfs: noWholeFile},
	{Name: "chunk-4k", Title: "4 KiB chunks", Codec: "none", Base: "none",
		Ocierofs: []string{"--chunk-size=4K"}, Mkfs: []string{"--chunksize=4096"}, MkfsTar: "f"},
	{Name: "chunk-64k", Title: "64 KiB chunks", Codec: "none", Base: "none",
		Ocierofs: []string{"--chunk-size=64K"}, Mkfs: []string{"--chunksize=65536"}, MkfsTar: "f"},
	{Name: "chunk-1m", Title: "1 MiB chunks", Codec: "none", Base: "none",
		Ocierofs: []string{"--chunk-size=1M"}, Mkfs: []string{"--chunksize=1048576"}, MkfsTar: "f"},
	{Name: "lz4", Title: "lz4, no dedupe", Codec: "lz4", Base: "lz4",
		Ocierofs: []string{"--no-file-dedupe"}, MkfsDedupe: "^dedupe", MkfsTar: "f"},
	{Name: "lz4-file", Title: "lz4, whole-file dedupe (ocierofs default)", Codec: "lz4", Base: "lz4",
		MkfsTar: "f", NoMkfs: noWholeFile},
	{Name: "lz4-dedupe", Title: "lz4, --dedupe (-Ededupe)", Codec: "lz4", Base: "lz4",
		Ocierofs: []string{"--dedupe"}, MkfsDedupe: "dedupe", MkfsTar: "f"},
	{Name: "zstd", Title: "zstd 1, no dedupe", Codec: "zstd", Base: "zstd",
		Ocierofs: []string{"--no-file-dedupe"}, MkfsDedupe: "^dedupe", MkfsTar: "f"},
	{Name: "zstd-file", Title: "zstd 1, whole-file dedupe (ocierofs default)", Codec: "zstd", Base: "zstd",
		MkfsTar: "f", NoMkfs: noWholeFile},
	{Name: "zstd-dedupe", Title: "zstd 1, --dedupe (-Ededupe)", Codec: "zstd", Base: "zstd",
		Ocierofs: []string{"--dedupe"}, MkfsDedupe: "dedupe", MkfsTar: "f"},
	{Name: "tar-index", Title: "tar index (data left in the tar; size only)", Codec: "none", Base: "none",
		Ocierofs: []string{"--tar-index"}, MkfsDedupe: "^dedupe", MkfsTar: "i", SizeOnly: true},
}

// dedupeModeNames are the names of dedupeModes, for -modes.
func dedupeModeNames() []string {
	var s []string
	for _, m := range dedupeModes {
		s = append(s, m.Name)
	}
	return s
}

func findMode(name string) (dedupeMode, bool) {
	for _, m := range dedupeModes {
		if m.Name == name {
			return m, true
		}
	}
	return dedupeMode{}, false
}

// dedupeArgs is the command line of one build of the dedupe suite: the
// seed-003 settings (4 KiB blocks and pclusters, 64 KiB extents, no tail
// packing, no fragments), one worker, then the mode's own flags.
func (t *tool) dedupeArgs(m dedupeMode, in, out string) []string {
	cd := codecs[m.Codec]
	switch t.kind {
	case kindOcierofs:
		bs := "--block-size=4096"
		if m.MkfsTar == "i" {
			bs = "--block-size=512" // a tar index has 512-byte blocks
		}
		a := []string{"mkfs", "--quiet", bs, "--compress=" + cd.ocierofs,
			"--pcluster-size=4K", "--max-extent=64K", "--tail-packing=false", "--fragments=false",
			"--build-time=" + strconv.Itoa(fixedMtime)}
		if t.ExtendedFlag {
			a = append(a, "--extended-inodes")
		}
		if t.WorkersFlag {
			a = append(a, "--workers=1")
		}
		a = append(a, m.Ocierofs...)
		return append(a, out, in)
	default:
		ext := "-Eforce-inode-extended,^ztailpacking,^fragments"
		if m.MkfsDedupe != "" {
			ext += "," + m.MkfsDedupe
		}
		a := []string{"-b4096", "-C4096", "--max-extent-bytes=65536", "--quiet", "--zD=0", ext}
		if cd.mkfs != "" {
			a = append(a, "-z"+cd.mkfs)
		}
		if t.WorkersFlag {
			a = append(a, "--workers=1")
		}
		a = append(a, m.Mkfs...)
		return append(a, "--tar="+m.MkfsTar, out, in)
	}
}

// hasMode tells whether t has a cell in row m (mkfs.erofs lacks some modes
// altogether; either tool may refuse a flag).
func (t *tool) hasMode(m dedupeMode) bool {
	if t.kind == kindMkfsErofs && m.NoMkfs != "" {
		return false
	}
	_, bad := t.Unsupported[m.Name]
	return !bad
}

// unsupportedPrefix marks a mode whose flag the binary does not know, as
// opposed to one that failed on the probe input.
const unsupportedPrefix = "unsupported: "

// flagRejected tells whether a builder's complaint is about an unknown
// option (urfave/cli, getopt) rather than a failed build.
func flagRejected(out []byte) bool {
	for _, s := range []string{"flag provided but not defined", "unrecognized option", "unknown option", "invalid option"} {
		if bytes.Contains(out, []byte(s)) {
			return true
		}
	}
	return false
}

// probeDedupe builds a small tar with duplicate and shifted content in
// every selected mode and notes, per tool, the modes it rejects.
func (b *bench) probeDedupe() error {
	dir := filepath.Join(b.opts.data, "probe-dedupe")
	os.RemoveAll(dir)
	defer os.RemoveAll(dir)
	tree := filepath.Join(dir, "tree")
	if err := os.MkdirAll(filepath.Join(tree, "v1"), 0o755); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(tree, "v2"), 0o755); err != nil {
		return err
	}
	var text []byte
	for i := range 3000 {
		text = fmt.Appendf(text, "static int probe_%d(struct erofs_sb_info *sbi) { return %d; }\n", i, i*7)
	}
	edited := append(append(append([]byte(nil), text[:len(text)/2]...), "/* edit */\n"...), text[len(text)/2:]...)
	files := map[string][]byte{"v1/a.c": text, "v2/a.c": edited, "v2/same.c": text, "v1/small": []byte("small\n")}
	for p, d := range files {
		if err := os.WriteFile(filepath.Join(tree, p), d, 0o644); err != nil {
			return err
		}
	}
	tarPath := filepath.Join(dir, "probe.tar")
	if _, err := writeTar(tree, tarPath); err != nil {
		return err
	}
	for _, t := range b.tools {
		if !t.TarInput {
			for _, name := range b.opts.modes {
				t.Unsupported[name] = unsupportedPrefix + "no tar input (--tar=f)"
			}
			continue
		}
		if t.kind == kindMkfsErofs && !t.modern {
			for _, name := range b.opts.modes {
				t.Unsupported[name] = unsupportedPrefix + "mkfs.erofs older than 1.6"
			}
			continue
		}
		for _, name := range b.opts.modes {
			m, _ := findMode(name)
			if t.kind == kindMkfsErofs && m.NoMkfs != "" {
				continue
			}
			img := filepath.Join(dir, "probe.img")
			out, err := runCombined(t.Path, t.dedupeArgs(m, tarPath, img)...)
			if err == nil {
				if st, serr := os.Stat(img); serr != nil || st.Size() == 0 {
					err = fmt.Errorf("no image written")
				}
			}
			if err != nil {
				why := firstLine(out, err)
				if flagRejected(out) {
					t.Unsupported[name] = unsupportedPrefix + why
				} else {
					t.Unsupported[name] = "probe failed: " + why
				}
				b.logf("%s %s: %s: skipped", t.Name, name, t.Unsupported[name])
			}
			os.Remove(img)
		}
		b.logf("%s %s at %s: workers flag %v", t.Name, t.Version, t.Path, t.WorkersFlag)
	}
	return nil
}

// measureDedupe runs every dataset × mode × tool cell, the tools taking
// turns run by run as in measure.
func (b *bench) measureDedupe(datasets []string) error {
	if err := b.startMeasure(); err != nil {
		return err
	}
	for _, ds := range datasets {
		in := filepath.Join(b.opts.data, "tar", ds+".tar")
		if err := warm(in); err != nil {
			return fmt.Errorf("reading %s: %w", in, err)
		}
		for _, name := range b.opts.modes {
			m, _ := findMode(name)
			var active []*tool
			for _, t := range b.tools {
				if t.hasMode(m) {
					active = append(active, t)
				}
			}
			for r := 1; r <= b.opts.runs; r++ {
				for _, t := range active {
					img := filepath.Join(b.opts.imgDir, fmt.Sprintf("%s-%s-%s.erofs", t.Name, ds, m.Name))
					res := &runResult{Suite: "dedupe", Mode: m.Name, Dataset: ds, Input: "tar", Tool: t.Name,
						Codec: m.Codec, Workers: 1, Run: r}
					b.warmRun(in, res)
					b.execRun(t, res, t.dedupeArgs(m, in, img), in, img, !m.SizeOnly)
					b.runs = append(b.runs, res)
					status := ""
					if res.Err != "" {
						status = " FAILED: " + res.Err
					}
					b.logf("%-9s %-11s %-10s run %d: %.3f s wall, %.3f s cpu, %.1f MiB rss, %d bytes%s",
						ds, m.Name, t.Name, r, res.WallS, res.UserS+res.SysS, float64(res.MaxRSSKiB)/1024, res.ImageBytes, status)
					if !b.opts.keep || r < b.opts.runs {
						os.Remove(img)
					}
				}
			}
		}
		if err := b.writeJSON(); err != nil {
			return err
		}
	}
	b.finished = time.Now()
	b.load[1] = loadavg()
	return nil
}

// loadavg is the 1, 5 and 15 minute load averages ("" without procfs).
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}
