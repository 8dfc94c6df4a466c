package imagebuild

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// The inputs a release build takes from git, given here so that a copy of
// the tree without .git builds the same.
const (
	reproVersion  = "v0.0.0-repro"
	reproEpoch    = "1700000000"
	reproRevision = "0000000000000000000000000000000000000000"
)

// copyTree copies what a clone of the repository at root holds (tracked
// files and new ones not ignored, as they are on disk) into dst: a clean
// clone, less .git.
func copyTree(t *testing.T, root, dst string) {
	t.Helper()
	out, err := exec.Command("git", "-C", root, "ls-files", "-z", "--cached", "--others", "--exclude-standard").Output()
	if err != nil {
		t.Skipf("no git checkout to copy: %v", err)
	}
	n := 0
	for _, rel := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		src := filepath.Join(root, rel)
		fi, err := os.Lstat(src)
		if errors.Is(err, fs.ErrNotExist) {
			continue // deleted, not yet committed
		}
		if err != nil {
			t.Fatal(err)
		}
		d := filepath.Join(dst, rel)
		if err := os.MkdirAll(filepath.Dir(d), 0o755); err != nil {
			t.Fatal(err)
		}
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(src)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(target, d); err != nil {
				t.Fatal(err)
			}
		case fi.Mode().IsRegular():
			b, err := os.ReadFile(src)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(d, b, fi.Mode().Perm()); err != nil {
				t.Fatal(err)
			}
		}
		n++
	}
	t.Logf("copied %d files of %s to %s", n, root, dst)
}

// makeImage runs `make image` in tree with DIST=dist and the given
// environment, and returns the tags of dist/image with their digests.
func makeImage(t *testing.T, tree, dist string, env ...string) map[string]v1.Hash {
	t.Helper()
	cmd := exec.Command("make", "-s", "-C", tree, "image", "DIST="+dist,
		"VERSION="+reproVersion, "SOURCE_DATE_EPOCH="+reproEpoch, "REVISION="+reproRevision)
	cmd.Env = append(os.Environ(), env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make image in %s: %v\n%s", tree, err, out)
	}
	b, err := os.ReadFile(filepath.Join(dist, "image", "index.json"))
	if err != nil {
		t.Fatal(err)
	}
	var im v1.IndexManifest
	if err := json.Unmarshal(b, &im); err != nil {
		t.Fatal(err)
	}
	tags := map[string]v1.Hash{}
	for _, d := range im.Manifests {
		tags[d.Annotations["org.opencontainers.image.ref.name"]] = d.Digest
	}
	return tags
}

// TestMakeImageReproducible runs `make image` (and so `make release`)
// twice: in this tree with the usual Go build cache, and in a copy of it
// at another path with an empty build cache, as on another machine. The
// binaries, SHA256SUMS, the image's index and its EROFS twin must come out
// the same, the binaries static, without build ID or build paths, and
// stamped with the version.
func TestMakeImageReproducible(t *testing.T) {
	if testing.Short() {
		t.Skip("builds every release binary twice, once without a build cache (minutes)")
	}
	for _, tool := range []string{"make", "git", "sha256sum"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("no %s", tool)
		}
	}
	if _, err := os.Stat(CACertsPath); err != nil {
		t.Skipf("no CA bundle to put in the image (Debian package ca-certificates): %v", err)
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	distA := filepath.Join(t.TempDir(), "dist")
	tagsA := makeImage(t, root, distA)

	treeB := filepath.Join(t.TempDir(), "another", "checkout", "of", "ocierofs")
	copyTree(t, root, treeB)
	distB := filepath.Join(t.TempDir(), "distB")
	tagsB := makeImage(t, treeB, distB, "GOCACHE="+filepath.Join(t.TempDir(), "gocache"))

	sumsA, err := os.ReadFile(filepath.Join(distA, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	sumsB, err := os.ReadFile(filepath.Join(distB, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(sumsA, sumsB) {
		t.Errorf("two builds of the same tree, different binaries:\n%s\nand\n%s", sumsA, sumsB)
	}
	t.Logf("SHA256SUMS:\n%s", sumsA)
	var names []string
	for _, l := range strings.Split(strings.TrimSpace(string(sumsA)), "\n") {
		f := strings.Fields(l)
		if len(f) != 2 {
			t.Fatalf("SHA256SUMS line %q", l)
		}
		names = append(names, f[1])
	}
	for _, want := range []string{"ocierofs-linux-amd64", "ocierofs-mirror-linux-amd64", "ocierofs-linux-arm64", "ocierofs-mirror-linux-arm64", "ocierofs-darwin-arm64", "ocierofs-mirror-darwin-arm64"} {
		if !strings.Contains(string(sumsA), "  "+want+"\n") {
			t.Errorf("SHA256SUMS lacks %s", want)
		}
	}
	// sha256sum -c, as docs/install.md tells users to check a download.
	check := exec.Command("sha256sum", "-c", "SHA256SUMS")
	check.Dir = distB
	if out, err := check.CombinedOutput(); err != nil {
		t.Errorf("sha256sum -c SHA256SUMS: %v\n%s", err, out)
	}

	home, _ := os.UserHomeDir()
	gopath, _ := exec.Command("go", "env", "GOPATH").Output()
	for _, n := range names {
		b, err := os.ReadFile(filepath.Join(distB, n))
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{root, treeB, strings.TrimSpace(string(gopath)), home} {
			if p != "" && p != "/" && bytes.Contains(b, []byte(p+"/")) {
				t.Errorf("%s holds the build machine's path %s", n, p)
			}
		}
		if !strings.Contains(n, "-linux-") {
			continue // Mach-O: the paths and SHA256SUMS above are what is checked
		}
		f, err := elf.NewFile(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("%s: %v", n, err)
		}
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP {
				t.Errorf("%s is dynamically linked", n)
			}
		}
		if s := f.Section(".note.go.buildid"); s != nil {
			// An ELF note: name size, descriptor (the ID) size, type,
			// the name "Go\0\0", then the ID.
			note, err := io.ReadAll(s.Open())
			if err != nil || len(note) < 16 {
				t.Fatalf("%s: build ID note %q: %v", n, note, err)
			}
			if size := binary.LittleEndian.Uint32(note[4:8]); size != 0 {
				t.Errorf("%s has a build ID: %q", n, note[16:])
			}
		}
	}
	host := filepath.Join(distB, "ocierofs-linux-"+runtime.GOARCH)
	if runtime.GOOS == "linux" {
		for _, prog := range []string{"ocierofs", "ocierofs-mirror"} {
			out, err := exec.Command(filepath.Join(distB, prog+"-linux-"+runtime.GOARCH), "version").CombinedOutput()
			want := prog + " version " + reproVersion + " (go"
			if err != nil || !strings.HasPrefix(string(out), want) {
				t.Errorf("%s version: %v\n%s\nwant it to start with %q", host, err, out, want)
			}
		}
	}

	for _, tag := range []string{reproVersion, reproVersion + "-erofs"} {
		if tagsA[tag] == (v1.Hash{}) {
			t.Errorf("make image wrote no %s: %v", tag, tagsA)
		}
		if tagsA[tag] != tagsB[tag] {
			t.Errorf("image %s: %s in one build, %s in the other", tag, tagsA[tag], tagsB[tag])
		}
	}
	t.Logf("image %v", tagsA)
}
