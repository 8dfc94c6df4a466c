package main

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// The versions dataset is what chunk dedupe is for: many releases of one
// source tree side by side (v01/, v02/, …), each a little different from
// the one before. Whole-file dedupe shares the files a release left alone;
// only a content-defined or fixed-chunk dedupe can share the rest of a file
// in which a few lines were inserted or deleted, since the edit shifts
// everything after it.
const (
	versionsCount  = 16       // releases in the tree
	versionsTarget = 20 << 20 // size of the first release, bytes
	versionsMaxSrc = 256 << 10
)

// versionParams are the share of files each new release changes.
type versionParams struct {
	edit   float64 // files with lines inserted or deleted in the middle
	rename float64 // files moved to a new name, content kept
}

var defaultVersionParams = versionParams{edit: 0.04, rename: 0.005}

// verFile is one file of a release. Releases share the data of the files
// they do not change; an edit makes a new slice.
type verFile struct {
	path string
	data []byte
}

// makeVersions samples ~versionsTarget bytes of the text sources (every
// k-th run of consecutive files in path order, so that the sample spans the
// tree and its directories still hold many files each) and writes
// versionsCount releases made from them.
func (g *generator) makeVersions() error {
	dir, files, err := g.textSources()
	if err != nil {
		return err
	}
	base, err := sampleSources(dir, files, versionsTarget)
	if err != nil {
		return err
	}
	var n int
	for _, f := range base {
		n += len(f.data)
	}
	from := dir
	if b, err := os.ReadFile(filepath.Join(g.root, ".stamp", "linux.source")); err == nil && strings.HasPrefix(dir, g.root) {
		from = strings.TrimSpace(string(b))
	}
	src := fmt.Sprintf("seed %d, %d releases of %d files (%.1f MiB) sampled from %s", g.seed+3, versionsCount, len(base), float64(n)/(1<<20), from)
	g.logf("generating versions: %s", src)
	if err := os.WriteFile(filepath.Join(g.root, ".stamp", "versions.source"), []byte(src+"\n"), 0o644); err != nil {
		return err
	}
	return writeDataset(g.root, "versions", func(out string) error {
		return writeVersions(out, base, versionsCount, g.seed+3, defaultVersionParams)
	})
}

// sampleRun is how many consecutive files sampleSources takes at a time.
const sampleRun = 64

// sampleSources reads every k-th run of sampleRun files of files (paths
// relative to dir, skipping those over versionsMaxSrc, mostly generated
// tables) with k chosen so that about target bytes are read.
func sampleSources(dir string, files []string, target int64) ([]verFile, error) {
	sizes := make([]int64, len(files))
	var total int64
	for i, rel := range files {
		st, err := os.Stat(filepath.Join(dir, rel))
		if err != nil {
			return nil, err
		}
		if st.Size() <= versionsMaxSrc {
			sizes[i] = st.Size()
			total += st.Size()
		}
	}
	k := int((total + target - 1) / target)
	k = max(k, 1)
	var out []verFile
	var got int64
	for i, rel := range files {
		if (i/sampleRun)%k != 0 || sizes[i] == 0 {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, rel))
		if err != nil {
			return nil, err
		}
		out = append(out, verFile{filepath.ToSlash(rel), b})
		if got += int64(len(b)); got >= target {
			break
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no source files to sample under %s", dir)
	}
	return out, nil
}

// writeVersions writes n releases of base under out/v01 … out/vNN: the
// first is base itself, each later one is nextVersion of the one before,
// all drawn from one ChaCha8 stream of seed.
func writeVersions(out string, base []verFile, n int, seed uint64, p versionParams) error {
	rng := rand.New(rand.NewChaCha8(seedBytes(seed)))
	cur := base
	for v := 1; v <= n; v++ {
		if v > 1 {
			cur = nextVersion(rng, cur, v, p)
		}
		root := filepath.Join(out, fmt.Sprintf("v%02d", v))
		for _, f := range cur {
			dst := filepath.Join(root, filepath.FromSlash(f.path))
			if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
				return err
			}
			if err := os.WriteFile(dst, f.data, 0o644); err != nil {
				return fmt.Errorf("version %d: %w", v, err)
			}
		}
	}
	return nil
}

// nextVersion makes release v from prev: p.edit of the files get one to
// three insertions or deletions of a few lines in their middle half, p.rename
// of the others a new name; the rest are prev's, shared.
func nextVersion(rng *rand.Rand, prev []verFile, v int, p versionParams) []verFile {
	next := append([]verFile(nil), prev...)
	if len(prev) < 2 {
		return next
	}
	nEdit := max(1, int(p.edit*float64(len(prev))+0.5))
	nRename := max(1, int(p.rename*float64(len(prev))+0.5))
	if nEdit+nRename > len(prev) {
		nEdit, nRename = len(prev)-1, 1
	}
	pick := rng.Perm(len(prev))
	for _, i := range pick[:nEdit] {
		next[i].data = editText(rng, prev[i].data, v)
	}
	taken := make(map[string]bool, len(prev))
	for _, f := range prev {
		taken[f.path] = true
	}
	for _, i := range pick[nEdit : nEdit+nRename] {
		np := renamed(prev[i].path, v)
		if !taken[np] {
			taken[np] = true
			next[i].path = np
		}
	}
	return next
}

// renamed gives a file the name it has after a rename in release v:
// dir/name.ext becomes dir/name.rVV.ext (an earlier .rNN is replaced).
func renamed(p string, v int) string {
	dir, file := path.Split(p)
	ext := path.Ext(file)
	stem := strings.TrimSuffix(file, ext)
	if i := strings.LastIndex(stem, ".r"); i >= 0 && len(stem)-i == 4 {
		stem = stem[:i]
	}
	return fmt.Sprintf("%s%s.r%02d%s", dir, stem, v, ext)
}

// editText returns a copy of data with one to three edits, each inserting
// one to five new lines or deleting one to five lines at a line boundary in
// the middle half of the text, so that the bytes after it shift by an
// amount that is rarely a multiple of any chunk size.
func editText(rng *rand.Rand, data []byte, v int) []byte {
	out := data
	for range 1 + rng.IntN(3) {
		starts := lineStarts(out)
		n := len(starts)
		var at, end int // bytes [at, end) are replaced
		if n < 4 {
			at, end = len(out), len(out)
		} else {
			line := n/4 + rng.IntN(n/2)
			at = starts[line]
			end = at
			if rng.IntN(2) == 1 {
				k := min(1+rng.IntN(5), n/4)
				if line+k < n {
					end = starts[line+k]
				} else {
					end = len(out)
				}
			}
		}
		var ins []byte
		if end == at {
			for range 1 + rng.IntN(5) {
				ins = fmt.Appendf(ins, "\t/* release %d: %016x */\n", v, rng.Uint64())
			}
		}
		b := make([]byte, 0, len(out)-(end-at)+len(ins))
		b = append(b, out[:at]...)
		b = append(b, ins...)
		b = append(b, out[end:]...)
		out = b
	}
	if bytes.Equal(out, data) { // a deletion undid an insertion: still a change
		out = append(append([]byte(nil), data...), '\n')
	}
	return out
}

// lineStarts is the offset of every line of b.
func lineStarts(b []byte) []int {
	s := []int{0}
	for i, c := range b {
		if c == '\n' && i+1 < len(b) {
			s = append(s, i+1)
		}
	}
	if len(b) == 0 {
		return nil
	}
	return s
}
