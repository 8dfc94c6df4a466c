package main

import (
	"bytes"
	"debug/buildinfo"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"

	"github.com/ocierofs/ocierofs/cmd/internal/version"
)

// codec is one compression setting as each builder spells it.
type codec struct {
	ocierofs string // --compress value
	mkfs     string // mkfs.erofs -z value ("" for none)
}

// codecNames are the codecs in report order; levels are seed 003's (lz4hc,
// not in seed 003, at both builders' default level 9).
var codecNames = []string{"none", "lz4", "lz4hc", "deflate", "lzma", "zstd"}

var codecs = map[string]codec{
	"none":    {"none", ""},
	"lz4":     {"lz4", "lz4"},
	"lz4hc":   {"lz4hc", "lz4hc"},
	"deflate": {"deflate,level=6", "deflate,level=6"},
	"lzma":    {"lzma,level=1", "lzma,level=1"},
	"zstd":    {"zstd,level=1", "zstd,level=1"},
}

// codecTitle is the column heading of a codec.
var codecTitle = map[string]string{
	"none": "none", "lz4": "lz4", "lz4hc": "lz4hc 9",
	"deflate": "deflate 6", "lzma": "lzma 1", "zstd": "zstd 1",
}

type toolKind int

const (
	kindOcierofs toolKind = iota
	kindMkfsErofs
)

// tool is one image builder under test and what it can do, as its --help
// and a probe build on a tiny input tell.
type tool struct {
	Name        string `json:"name"`
	Path        string `json:"path"`
	Version     string `json:"version"`
	WorkersFlag bool   `json:"workers_flag"`
	// ExtendedFlag: ocierofs mkfs has --extended-inodes, so both tools
	// write 64-byte inodes (mkfs.erofs is given -Eforce-inode-extended).
	// Without it ocierofs writes compact ones where they fit.
	ExtendedFlag bool              `json:"extended_inodes_flag"`
	TarInput     bool              `json:"tar_input"`
	Unsupported  map[string]string `json:"unsupported,omitempty"` // codec → first line of the error
	kind         toolKind
	modern       bool // mkfs.erofs ≥ 1.6: has -V, ^ztailpacking, ^fragments, ^dedupe, --zD
}

func newOcierofs(path string) (*tool, error) {
	p, err := exec.LookPath(path)
	if err != nil {
		return nil, fmt.Errorf("ocierofs: %w", err)
	}
	p, _ = filepath.Abs(p)
	t := &tool{Name: "ocierofs", Path: p, kind: kindOcierofs, TarInput: true, Unsupported: map[string]string{}}
	t.Version = "unknown"
	var name, goVersion string
	if out, err := exec.Command(p, "--version").Output(); err == nil {
		if m := ocierofsVersionRE.FindSubmatch(out); m != nil {
			name, goVersion = string(m[1]), string(m[2])
		}
	} else if bi, err := buildinfo.ReadFile(p); err == nil {
		// A program older than --version.
		name, goVersion = version.FromBuildInfo(bi), bi.GoVersion
	}
	if name != "" {
		if name == "devel" {
			// Built with no name: the build time is the next best one.
			if st, err := os.Stat(p); err == nil {
				name += ", built " + st.ModTime().UTC().Format("2006-01-02 15:04 UTC")
			}
		}
		t.Version = name + " (" + goVersion + ")"
	}
	help, _ := exec.Command(p, "mkfs", "--help").CombinedOutput()
	t.WorkersFlag = bytes.Contains(help, []byte("--workers"))
	t.ExtendedFlag = bytes.Contains(help, []byte("--extended-inodes"))
	return t, nil
}

var ocierofsVersionRE = regexp.MustCompile(`^ocierofs version (\S+) \((go\S+)`)

var mkfsVersionRE = regexp.MustCompile(`mkfs\.erofs(?: \(erofs-utils\))? ([0-9][0-9A-Za-z.+~-]*)`)

func newMkfsErofs(path string) (*tool, error) {
	p, _ := filepath.Abs(path)
	t := &tool{Name: "mkfs.erofs", Path: p, kind: kindMkfsErofs, ExtendedFlag: true, Unsupported: map[string]string{}}
	if out, err := exec.Command(p, "-V").CombinedOutput(); err == nil {
		if m := mkfsVersionRE.FindSubmatch(out); m != nil {
			t.Version = string(m[1])
		}
		t.modern = true
	}
	help, _ := exec.Command(p, "--help").CombinedOutput()
	t.WorkersFlag = bytes.Contains(help, []byte("--workers"))
	t.TarInput = bytes.Contains(help, []byte("--tar="))
	return t, nil
}

// benchUUID is the UUID mkfs.erofs is given, so that its images are the
// same from run to run. ocierofs derives its own from the input, as it
// does at its defaults.
const benchUUID = "6f636965-726f-4673-a062-656e63680001"

// args is the command line of one build. workers is 1 for a single
// worker, otherwise the CPU count (passed only where the flag exists).
func (t *tool) args(c string, workers int, in, out string, tarInput bool) []string {
	cd := codecs[c]
	switch t.kind {
	case kindOcierofs:
		a := []string{"mkfs", "--quiet", "--block-size=4096", "--compress=" + cd.ocierofs,
			"--pcluster-size=4K", "--max-extent=64K", "--tail-packing=false", "--fragments=false",
			// Otherwise ocierofs's defaults, as a user runs it: whole-file
			// dedupe on and the UUID derived from the input.
			"--build-time=" + strconv.Itoa(fixedMtime)}
		if t.ExtendedFlag {
			a = append(a, "--extended-inodes")
		}
		if t.WorkersFlag {
			a = append(a, "--workers="+strconv.Itoa(workers))
		}
		return append(a, out, in)
	default:
		a := []string{"-C4096", "--max-extent-bytes=65536"}
		if t.modern {
			a = append(a, "-b4096", "--quiet", "-Eforce-inode-extended,^ztailpacking,^fragments,^dedupe", "--zD=0", "-U", benchUUID)
		} else {
			// 1.5 and older: no -b (the block size is the page size, 4 KiB
			// here); tail packing, fragments and dedupe are opt-in.
			a = append(a, "-Eforce-inode-extended")
		}
		if cd.mkfs != "" {
			a = append(a, "-z"+cd.mkfs)
		}
		if t.WorkersFlag {
			a = append(a, "--workers="+strconv.Itoa(workers))
		}
		if tarInput {
			a = append(a, "--tar=f")
		}
		return append(a, out, in)
	}
}

// probe builds a tiny dataset with every codec and notes those the tool
// refuses, with the first line of its complaint.
func (b *bench) probe() error {
	dir := filepath.Join(b.opts.data, "probe")
	os.RemoveAll(dir)
	tree := filepath.Join(dir, "tree")
	if err := os.MkdirAll(filepath.Join(tree, "sub"), 0o755); err != nil {
		return err
	}
	text := bytes.Repeat([]byte("static int probe(struct erofs_sb_info *sbi) { return 0; }\n"), 600)
	if err := os.WriteFile(filepath.Join(tree, "sub", "a.c"), text, 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(tree, "b"), []byte("small\n"), 0o644); err != nil {
		return err
	}
	tarPath := filepath.Join(dir, "probe.tar")
	if _, err := writeTar(tree, tarPath); err != nil {
		return err
	}
	tarIn := b.opts.input == "tar"
	in := tree
	if tarIn {
		in = tarPath
	}
	for _, t := range b.tools {
		if tarIn && !t.TarInput {
			for _, c := range b.opts.codecs {
				t.Unsupported[c] = "no tar input (--tar=f); try -input dir"
			}
			continue
		}
		if t.kind == kindMkfsErofs && t.Version == "" {
			// 1.5 prints its version as the first line of a build.
			out, _ := exec.Command(t.Path, filepath.Join(dir, "v.img"), tree).CombinedOutput()
			if m := mkfsVersionRE.FindSubmatch(out); m != nil {
				t.Version = string(m[1])
			} else {
				t.Version = "unknown"
			}
		}
		for _, c := range b.opts.codecs {
			img := filepath.Join(dir, "probe.img")
			cmd := exec.Command(t.Path, t.args(c, 1, in, img, tarIn)...)
			out, err := cmd.CombinedOutput()
			if err == nil {
				if st, serr := os.Stat(img); serr != nil || st.Size() == 0 {
					err = fmt.Errorf("no image written")
				}
			}
			if err != nil {
				t.Unsupported[c] = firstLine(out, err)
				b.logf("%s %s: %s: skipped", t.Name, c, t.Unsupported[c])
			}
			os.Remove(img)
		}
		b.logf("%s %s at %s: workers flag %v, tar input %v", t.Name, t.Version, t.Path, t.WorkersFlag, t.TarInput)
	}
	return nil
}

func firstLine(out []byte, err error) string {
	for _, l := range strings.Split(string(out), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			return l
		}
	}
	return err.Error()
}

// cpus is the worker count of an "all workers" run.
func cpus() int { return runtime.NumCPU() }
