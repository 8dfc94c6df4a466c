package main

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// dedupeCell is the median cell of one tool × dataset × mode.
func (b *bench) dedupeCell(ds, toolName, mode string) *cell {
	return medianCell(b.runs, func(r *runResult) bool {
		return r.Suite == "dedupe" && r.Dataset == ds && r.Tool == toolName && r.Mode == mode
	})
}

// dedupeMarkdown renders the dedupe suite: the modes with each builder's
// flags, then per dataset one row per mode with, for each builder, its
// median wall / CPU / RSS, image bytes, the bytes saved against the same
// builder's no-dedupe row for that codec and the time that costs.
func (b *bench) dedupeMarkdown() string {
	var sb strings.Builder
	b.dedupeHeader(&sb)
	b.dedupeModes(&sb)
	for _, ds := range b.datasetsMeasured() {
		b.dedupeDataset(&sb, ds)
	}
	writeNotes(&sb, b.dedupeNotes())
	return sb.String()
}

// dedupeHeader writes how the suite was measured: host, settings, how
// long it took and how busy the machine was, the builders and the
// datasets skipped.
func (b *bench) dedupeHeader(sb *strings.Builder) {
	h := host()
	fmt.Fprintf(sb, "## erofsbench dedupe suite %s\n\n", b.start.UTC().Format("2006-01-02 15:04 UTC"))
	pin := "not pinned"
	if b.opts.pinCPU >= 0 {
		pin = fmt.Sprintf("pinned to CPU %d (taskset)", b.opts.pinCPU)
	}
	fmt.Fprintf(sb, "Host: %d CPUs (%s), Linux %s. Input: the dataset's tar. Median of %d runs; every build single-worker (--workers=1), %s.\n",
		h.CPUs, h.Model, h.Kernel, b.opts.runs, pin)
	fmt.Fprintf(sb, "Common settings: 4 KiB blocks, 4 KiB pclusters, 64 KiB max extent, no tail packing, no fragments, %s (mkfs.erofs also: --zD=0).\n", inodesSetting(b.tools))
	if !b.finished.IsZero() {
		fmt.Fprintf(sb, "Measuring took %s.", b.finished.Sub(b.start).Round(time.Second))
		if b.load[0] != "" {
			fmt.Fprintf(sb, " Load average (1, 5, 15 min) %s at the start, %s at the end; above the CPU count, other work stretches the wall times and the CPU times are the figures to compare.", b.load[0], b.load[1])
		}
		sb.WriteString("\n")
	}
	sb.WriteString("\n")
	for _, t := range b.tools {
		fmt.Fprintf(sb, "- %s: %s (%s)\n", t.Name, t.Version, t.Path)
	}
	for _, s := range b.skipped {
		fmt.Fprintf(sb, "- dataset skipped: %s\n", s)
	}
}

// dedupeModes writes the table of the modes measured and each builder's
// flags for them.
func (b *bench) dedupeModes(sb *strings.Builder) {
	sb.WriteString("\nModes (each builder's flags on top of the common ones; \"saved\" and \"time\" compare with the no-dedupe mode named in the last column):\n\n")
	row(sb, []string{"mode", "what", "ocierofs", "mkfs.erofs", "compared with"})
	row(sb, []string{"---", "---", "---", "---", "---"})
	for _, name := range b.opts.modes {
		m, ok := findMode(name)
		if !ok {
			continue
		}
		oci := "`--compress=" + codecs[m.Codec].ocierofs + strings.Join(append([]string{""}, m.Ocierofs...), " ") + "`"
		mk := "–"
		if m.NoMkfs == "" {
			ext := ""
			if m.MkfsDedupe != "" {
				ext = "-E…," + m.MkfsDedupe + " "
			}
			z := ""
			if codecs[m.Codec].mkfs != "" {
				z = "-z" + codecs[m.Codec].mkfs + " "
			}
			mk = "`" + ext + z + strings.Join(append(append([]string{}, m.Mkfs...), "--tar="+m.MkfsTar), " ") + "`"
		}
		row(sb, []string{m.Name, m.Title, oci, mk, m.Base})
	}
}

// dedupeDataset writes the table of dataset ds: a row per mode.
func (b *bench) dedupeDataset(sb *strings.Builder, ds string) {
	title := datasetTitle[ds]
	if title == "" {
		title = ds
	}
	fmt.Fprintf(sb, "\n### %s (%s)\n\n", title, ds)
	if d := b.manif.Datasets[ds]; d != nil {
		fmt.Fprintf(sb, "%d files, %d dirs, %d symlinks, %d hard links, %s bytes of file data in a %s-byte tar (%s).\n\n",
			d.Files, d.Dirs, d.Symlinks, d.Hardlinks, thousands(d.Bytes), thousands(d.TarBytes), d.Source)
	}
	head := []string{"mode"}
	for _, t := range b.tools {
		l := b.toolLabel(t)
		head = append(head, l+": wall s / CPU s / RSS MiB", "image bytes", "saved", "time")
	}
	if len(b.tools) > 1 {
		head = append(head, fmt.Sprintf("%s ÷ %s image", b.tools[0].Name, b.tools[1].Name))
	}
	row(sb, head)
	row(sb, numericSep(len(head)))
	for _, name := range b.opts.modes {
		if m, ok := findMode(name); ok {
			row(sb, b.dedupeRow(ds, m))
		}
	}
}

// dedupeRow is mode m's row of dataset ds: four cells per builder (its
// cell, image bytes, saved, time), or why it has no figures, and the
// ratio of the first two builders' images.
func (b *bench) dedupeRow(ds string, m dedupeMode) []string {
	r := []string{m.Name}
	var images []*cell
	for _, t := range b.tools {
		c := b.dedupeCell(ds, t.Name, m.Name)
		images = append(images, c)
		switch {
		case t.kind == kindMkfsErofs && m.NoMkfs != "":
			r = append(r, "no such mode", "–", "–", "–")
			continue
		case c == nil:
			why := "–"
			if u, bad := t.Unsupported[m.Name]; bad {
				why = "probe failed"
				if strings.HasPrefix(u, unsupportedPrefix) {
					why = "unsupported"
				}
			}
			r = append(r, why, "–", "–", "–")
			continue
		case c.n == 0:
			r = append(r, "failed", "–", "–", "–")
			continue
		}
		r = append(r, fmtCell(c), thousands(c.image))
		base := b.dedupeCell(ds, t.Name, m.Base)
		r = append(r, saved(c, base, m), timeCost(c, base, m))
	}
	if len(b.tools) > 1 {
		r = append(r, imageRatio(images[0], images[1]))
	}
	return r
}

// dedupeNotes lists what the tables cannot show: modes a builder does not
// have, image sizes that differ between runs, failed runs and images that
// do not verify.
func (b *bench) dedupeNotes() []string {
	var notes []string
	for _, t := range b.tools {
		for _, name := range b.opts.modes {
			if u, bad := t.Unsupported[name]; bad {
				notes = append(notes, fmt.Sprintf("%s %s: %s", t.Name, name, u))
			}
		}
	}
	for _, ds := range b.datasetsMeasured() {
		for _, t := range b.tools {
			for _, name := range b.opts.modes {
				if c := b.dedupeCell(ds, t.Name, name); c != nil && c.sizesDiffer {
					notes = append(notes, fmt.Sprintf("%s %s %s: image size differs between runs", ds, name, t.Name))
				}
			}
		}
	}
	for _, r := range b.runs {
		if r.Suite != "dedupe" {
			continue
		}
		if r.Err != "" {
			notes = append(notes, fmt.Sprintf("%s %s %s run %d failed: %s", r.Dataset, r.Mode, r.Tool, r.Run, r.Err))
		}
		if r.Verified != "" && r.Verified != "ok" {
			notes = append(notes, fmt.Sprintf("%s %s %s: verify: %s", r.Dataset, r.Mode, r.Tool, r.Verified))
		}
	}
	return notes
}

// saved is what mode m's image saves against its no-dedupe base cell.
func saved(c, base *cell, m dedupeMode) string {
	switch {
	case m.Name == m.Base:
		return "(baseline)"
	case base == nil || base.n == 0 || base.image == 0:
		return "–"
	}
	d := base.image - c.image
	return fmt.Sprintf("%s (%.1f%%)", thousands(d), 100*float64(d)/float64(base.image))
}

// timeCost is mode m's wall and CPU time divided by its base cell's.
func timeCost(c, base *cell, m dedupeMode) string {
	switch {
	case m.Name == m.Base:
		return "(baseline)"
	case base == nil || base.n == 0 || base.wall == 0 || base.cpu == 0:
		return "–"
	}
	return fmt.Sprintf("%.2f× wall, %.2f× CPU", c.wall/base.wall, c.cpu/base.cpu)
}

func imageRatio(a, b *cell) string {
	if a == nil || b == nil || a.n == 0 || b.n == 0 || b.image == 0 {
		return "–"
	}
	return fmt.Sprintf("%.3f", float64(a.image)/float64(b.image))
}

// thousands prints n with commas between groups of three digits.
func thousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var out []byte
	for i := range len(s) {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	if neg {
		return "-" + string(out)
	}
	return string(out)
}
