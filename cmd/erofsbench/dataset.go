package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// fixedMtime is the mtime of every generated file and directory
// (2023-11-14T22:13:20Z, the value make-datasets.sh uses).
const fixedMtime = 1700000000

// size256 is the size of the two single-file datasets.
const size256 = 256 << 20

// datasetNames lists the datasets of the mkfs suite in the order the
// report shows them.
var datasetNames = []string{"src256", "rand256", "small100k", "linux"}

// dedupeDatasetNames are the datasets of the dedupe suite.
var dedupeDatasetNames = []string{"small100k", "debian", "versions"}

// buildOrder is every dataset in the order they can be made: src256 is
// cut from the Linux tree, small100k from src256, versions from the Linux
// tree when there is one.
var buildOrder = []string{"linux", "src256", "rand256", "small100k", "versions", "debian"}

// datasetTitle is the row heading of a dataset in the report.
var datasetTitle = map[string]string{
	"src256":    "256 MiB source-like file",
	"rand256":   "256 MiB random file",
	"small100k": "100,000 small files",
	"linux":     "Linux source tree",
	"debian":    "Debian " + debianSuite + " minbase rootfs",
	"versions":  fmt.Sprintf("%d near-identical versions of a source tree", versionsCount),
}

// generator builds the datasets under root. Every dataset lives in
// root/NAME with its tar in root/tar/NAME.tar; a marker in root/.stamp/NAME
// records that both are complete, so reruns reuse them.
type generator struct {
	root    string
	seed    uint64
	ksrc    string // Debian linux-source tarball ("" when none)
	force   bool
	logf    func(format string, args ...any)
	manif   *manifest
	srcSet  []string // text sources for src256, relative to srcDir
	srcDir  string
	mirror  string   // Debian mirror of the debian dataset
	skipped []string // datasets that cannot be made here, with the reason
}

// ensure makes dataset name (and its tar) unless it is already there.
func (g *generator) ensure(name string) error {
	stamp := filepath.Join(g.root, ".stamp", name)
	tarPath := g.tarPath(name)
	if !g.force && exists(stamp) && exists(tarPath) {
		return g.manif.load(g.root, name)
	}
	for _, d := range []string{".stamp", "tar"} {
		if err := os.MkdirAll(filepath.Join(g.root, d), 0o755); err != nil {
			return err
		}
	}
	os.Remove(stamp)
	var err error
	switch name {
	case "linux":
		err = g.makeLinux()
	case "src256":
		err = g.makeSrc256()
	case "rand256":
		err = g.makeRand256()
	case "small100k":
		err = g.makeSmall100k()
	case "versions":
		err = g.makeVersions()
	case "debian":
		err = g.makeDebian()
	default:
		return fmt.Errorf("unknown dataset %q (have %s)", name, strings.Join(buildOrder, ", "))
	}
	if err != nil {
		return fmt.Errorf("dataset %s: %w", name, err)
	}
	g.logf("tar %s -> %s", name, tarPath)
	var mtime *time.Time
	if name == "debian" {
		t := timeFixed()
		mtime = &t
	}
	st, err := writeTarMtime(filepath.Join(g.root, name), tarPath, mtime)
	if err != nil {
		return fmt.Errorf("dataset %s: tar: %w", name, err)
	}
	st.Name = name
	if err := g.manif.store(g.root, st); err != nil {
		return err
	}
	return os.WriteFile(stamp, nil, 0o644)
}

func (g *generator) tarPath(name string) string {
	return filepath.Join(g.root, "tar", name+".tar")
}

// makeLinux unpacks Debian's linux-source tarball with the system tar (Go
// has no xz reader and the project takes no module for it). Directories get
// the fixed mtime, since those without an entry in the tarball would
// otherwise carry the time of extraction.
func (g *generator) makeLinux() error {
	if g.ksrc == "" {
		return errNoKernelSource
	}
	dir := filepath.Join(g.root, "linux")
	tmp := dir + ".tmp"
	os.RemoveAll(dir)
	os.RemoveAll(tmp)
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return err
	}
	g.logf("unpacking %s -> %s", g.ksrc, dir)
	cmd := exec.Command("tar", "-xf", g.ksrc, "--strip-components=1", "--no-same-owner", "-C", tmp)
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("tar -xf %s: %w", g.ksrc, err)
	}
	var dirs []string
	err := filepath.WalkDir(tmp, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if d.Name() == ".git" {
				if err := os.RemoveAll(p); err != nil {
					return err
				}
				return fs.SkipDir
			}
			dirs = append(dirs, p)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if err := pinMtimes(dirs); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(g.root, ".stamp", "linux.source"), []byte(filepath.Base(g.ksrc)+"\n"), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, dir)
}

var errNoKernelSource = errors.New("no Linux source tarball: install Debian's linux-source (apt-get install linux-source-6.12) or pass -linux-src")

// textSources lists the files src256 concatenates: the .c and .h files of
// the Linux tree in bytewise path order (as make-datasets.sh does), or the
// .go files of GOROOT/src when there is no kernel source.
func (g *generator) textSources() (string, []string, error) {
	if g.srcSet != nil {
		return g.srcDir, g.srcSet, nil
	}
	dir, exts := filepath.Join(g.root, "linux"), []string{".c", ".h"}
	if !exists(filepath.Join(g.root, ".stamp", "linux")) {
		dir, exts = filepath.Join(goroot(), "src"), []string{".go"}
		g.logf("no Linux tree: src256 is built from %s/**/*.go", dir)
	}
	var files []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			for _, e := range exts {
				if strings.HasSuffix(p, e) {
					rel, _ := filepath.Rel(dir, p)
					files = append(files, rel)
					break
				}
			}
		}
		return nil
	})
	if err != nil {
		return "", nil, err
	}
	if len(files) == 0 {
		return "", nil, fmt.Errorf("no text sources under %s", dir)
	}
	sort.Strings(files) // bytewise, like LC_ALL=C sort
	g.srcDir, g.srcSet = dir, files
	return dir, files, nil
}

// makeSrc256 concatenates source files (repeating the list if needed) into
// one 256 MiB file.
func (g *generator) makeSrc256() error {
	dir, files, err := g.textSources()
	if err != nil {
		return err
	}
	g.logf("generating src256 from %d files under %s", len(files), dir)
	return writeDataset(g.root, "src256", func(out string) error {
		f, err := os.Create(filepath.Join(out, "source.bin"))
		if err != nil {
			return err
		}
		w := &limitWriter{w: f, left: size256}
		for w.left > 0 {
			for _, rel := range files {
				src, err := os.Open(filepath.Join(dir, rel))
				if err != nil {
					f.Close()
					return err
				}
				_, err = io.Copy(w, src)
				src.Close()
				if err != nil && err != errFull {
					f.Close()
					return err
				}
				if w.left == 0 {
					break
				}
			}
		}
		return f.Close()
	})
}

// makeRand256 writes 256 MiB from a ChaCha8 stream, whose output the Go
// project specifies, so the bytes do not change between Go releases.
func (g *generator) makeRand256() error {
	g.logf("generating rand256")
	return writeDataset(g.root, "rand256", func(out string) error {
		f, err := os.Create(filepath.Join(out, "random.bin"))
		if err != nil {
			return err
		}
		rng := rand.NewChaCha8(seedBytes(g.seed + 1))
		buf := make([]byte, 1<<20)
		for range size256 >> 20 {
			rng.Read(buf)
			if _, err := f.Write(buf); err != nil {
				f.Close()
				return err
			}
		}
		return f.Close()
	})
}

// makeSmall100k writes 100 directories of 1,000 files, 128 B to 8 KiB each:
// three in four are a slice of src256 at a random offset (text), the rest
// random bytes.
func (g *generator) makeSmall100k() error {
	pool, err := os.ReadFile(filepath.Join(g.root, "src256", "source.bin"))
	if err != nil {
		return fmt.Errorf("small100k takes its text from src256: %w", err)
	}
	g.logf("generating small100k")
	return writeDataset(g.root, "small100k", func(out string) error {
		src := rand.NewChaCha8(seedBytes(g.seed + 2))
		rng := rand.New(src)
		buf := make([]byte, 8192)
		var paths []string
		for d := range 100 {
			dd := filepath.Join(out, fmt.Sprintf("d%03d", d))
			if err := os.Mkdir(dd, 0o755); err != nil {
				return err
			}
			paths = append(paths, dd)
			for i := range 1000 {
				size := 128 + rng.IntN(8192-128+1)
				var b []byte
				if rng.Float64() < 0.75 {
					off := rng.IntN(len(pool) - size)
					b = pool[off : off+size]
				} else {
					b = buf[:size]
					src.Read(b)
				}
				p := filepath.Join(dd, fmt.Sprintf("f%04d", i))
				if err := os.WriteFile(p, b, 0o644); err != nil {
					return err
				}
				paths = append(paths, p)
			}
		}
		return pinMtimes(paths)
	})
}

// writeDataset builds a dataset in root/NAME.tmp through fill, pins the
// mtimes of what fill made and renames it into place.
func writeDataset(root, name string, fill func(dir string) error) error {
	dir := filepath.Join(root, name)
	tmp := dir + ".tmp"
	os.RemoveAll(dir)
	os.RemoveAll(tmp)
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return err
	}
	if err := fill(tmp); err != nil {
		return err
	}
	var all []string
	filepath.WalkDir(tmp, func(p string, d fs.DirEntry, err error) error {
		if err == nil {
			all = append(all, p)
		}
		return err
	})
	if err := pinMtimes(all); err != nil {
		return err
	}
	return os.Rename(tmp, dir)
}

// pinMtimes sets the fixed mtime (and atime) on every path.
func pinMtimes(paths []string) error {
	t := timeFixed()
	for _, p := range paths {
		if err := os.Chtimes(p, t, t); err != nil {
			return err
		}
	}
	return nil
}

func seedBytes(s uint64) [32]byte {
	var b [32]byte
	for i := range 8 {
		b[i] = byte(s >> (8 * i))
	}
	copy(b[8:], "ocierofs erofsbench dataset")
	return b
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// findKernelSource returns the newest /usr/src/linux-source-*.tar.* or "".
func findKernelSource() string {
	m, _ := filepath.Glob("/usr/src/linux-source-*.tar.*")
	sort.Slice(m, func(i, j int) bool { return versionLess(m[i], m[j]) })
	if len(m) == 0 {
		return ""
	}
	return m[len(m)-1]
}

// versionLess compares strings with embedded numbers numerically
// (linux-source-6.9 < linux-source-6.12).
func versionLess(a, b string) bool {
	for a != "" && b != "" {
		na, ra := leadingNumber(a)
		nb, rb := leadingNumber(b)
		if na >= 0 && nb >= 0 {
			if na != nb {
				return na < nb
			}
			a, b = ra, rb
			continue
		}
		if a[0] != b[0] {
			return a[0] < b[0]
		}
		a, b = a[1:], b[1:]
	}
	return len(a) < len(b)
}

func leadingNumber(s string) (int, string) {
	i, n := 0, 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		n = n*10 + int(s[i]-'0')
		i++
	}
	if i == 0 {
		return -1, s
	}
	return n, s[i:]
}

// limitWriter passes on at most left bytes and then reports errFull.
type limitWriter struct {
	w    io.Writer
	left int64
}

var errFull = errors.New("limit reached")

func (l *limitWriter) Write(p []byte) (int, error) {
	if int64(len(p)) > l.left {
		n, err := l.w.Write(p[:l.left])
		l.left -= int64(n)
		if err == nil {
			err = errFull
		}
		return n, err
	}
	n, err := l.w.Write(p)
	l.left -= int64(n)
	return n, err
}

// goroot is the GOROOT of the go command on PATH, or "" without one.
func goroot() string {
	out, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}
