package main

import (
	"archive/tar"
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ocierofs/ocierofs/convert/imagefile"
	"github.com/ocierofs/ocierofs/erofs"
)

// tarEntry is one entry for writeTestTar: a directory (name ends in /),
// a symbolic link (link set) or a regular file of data.
type tarEntry struct {
	name, link string
	data       []byte
	mode       int64
	typ        byte // other types: a hard link (to link), a device (1:3)
}

func writeTestTar(t *testing.T, path string, ents ...tarEntry) {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range ents {
		h := &tar.Header{Name: e.name, Mode: e.mode, ModTime: time.Unix(1700000000, 0), Format: tar.FormatPAX}
		switch {
		case e.typ != 0:
			h.Typeflag, h.Linkname, h.Devmajor, h.Devminor = e.typ, e.link, 1, 3
		case strings.HasSuffix(e.name, "/"):
			h.Typeflag = tar.TypeDir
		case e.link != "":
			h.Typeflag, h.Linkname = tar.TypeSymlink, e.link
		default:
			h.Typeflag, h.Size = tar.TypeReg, int64(len(e.data))
		}
		if h.Mode == 0 {
			h.Mode = 0o755
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		tw.Write(e.data)
	}
	tw.Close()
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

func openTestImage(t *testing.T, path string) *erofs.Image {
	t.Helper()
	f, err := imagefile.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f.Image
}

// patchRootDirent rewrites the root directory's entry for name: its nid
// and its file type (EROFS_FT_*). It finds the root's entries as the one
// run of 12-byte dirents in the image with their nids and types.
func patchRootDirent(t *testing.T, path, name string, nid uint64, ft byte) {
	t.Helper()
	img := openTestImage(t, path)
	ents, err := img.ReadDirInode(img.Root())
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	matches := func(at int) bool {
		for k, e := range ents {
			d := at + k*erofs.DirentSize
			if d+erofs.DirentSize > len(raw) || binary.LittleEndian.Uint64(raw[d:]) != e.Nid || raw[d+10] != e.FileType {
				return false
			}
		}
		return true
	}
	at := -1
	for i := 0; i < len(raw); i += 4 {
		if matches(i) {
			if at >= 0 {
				t.Fatalf("the root's dirents match at %d and %d", at, i)
			}
			at = i
		}
	}
	if at < 0 {
		t.Fatal("the root's dirents not found")
	}
	for k, e := range ents {
		if e.Name == name {
			d := at + k*erofs.DirentSize
			binary.LittleEndian.PutUint64(raw[d:], nid)
			raw[d+10] = ft
			if err := os.WriteFile(path, raw, 0o644); err != nil {
				t.Fatal(err)
			}
			return
		}
	}
	t.Fatalf("no %s in the root", name)
}

// TestExtractTraversal: a directory entry that says "directory" for a
// symbolic link to a directory outside the target (the image holds the
// same path, so a reader that follows the link inside the image lists
// files "under" it) must not make extract write through the link.
func TestExtractTraversal(t *testing.T) {
	b := bin(t)
	dir := t.TempDir()
	outside := t.TempDir() // absolute; it must stay empty
	var ents []tarEntry
	rel := strings.TrimPrefix(outside, "/")
	parts := strings.Split(rel, "/")
	for i := range parts {
		ents = append(ents, tarEntry{name: strings.Join(parts[:i+1], "/") + "/"})
	}
	ents = append(ents, tarEntry{name: rel + "/pwned", data: []byte("x")}, tarEntry{name: "x", link: outside})
	layer, img := filepath.Join(dir, "l.tar"), filepath.Join(dir, "l.img")
	writeTestTar(t, layer, ents...)
	if _, e, code := run(t, b, "mkfs", "-q", img, layer); code != 0 {
		t.Fatalf("mkfs: %s", e)
	}
	x, err := openTestImage(t, img).Lstat("x")
	if err != nil {
		t.Fatal(err)
	}
	patchRootDirent(t, img, "x", x.Nid, 2) // EROFS_FT_DIR
	dest := filepath.Join(dir, "dest")
	_, e, code := run(t, b, "extract", img, dest)
	if left, _ := os.ReadDir(outside); len(left) != 0 {
		t.Fatalf("extract wrote outside its directory: %v (exit %d: %s)", left, code, e)
	}
	if code != 0 {
		t.Fatalf("extract: exit %d: %s", code, e)
	}
	if l, err := os.Readlink(filepath.Join(dest, "x")); err != nil || l != outside {
		t.Errorf("x: %q, %v", l, err)
	}
	if got, err := os.ReadFile(filepath.Join(dest, rel, "pwned")); err != nil || string(got) != "x" {
		t.Errorf("%s/pwned inside the target: %q, %v", rel, got, err)
	}
}

// TestExtractDAG: a directory listed in two directories is an error, not
// a walk that doubles with every level, and extract leaves nothing; so
// for inspect, ls -R, verify and merge.
func TestExtractDAG(t *testing.T) {
	b := bin(t)
	dir := t.TempDir()
	layer, img := filepath.Join(dir, "l.tar"), filepath.Join(dir, "l.img")
	writeTestTar(t, layer, tarEntry{name: "a/"}, tarEntry{name: "a/c/"}, tarEntry{name: "a/f", data: []byte("f")}, tarEntry{name: "b/"})
	if _, e, code := run(t, b, "mkfs", "-q", img, layer); code != 0 {
		t.Fatalf("mkfs: %s", e)
	}
	a, err := openTestImage(t, img).Lstat("a")
	if err != nil {
		t.Fatal(err)
	}
	patchRootDirent(t, img, "b", a.Nid, 2)
	dest := filepath.Join(dir, "dest")
	if _, e, code := run(t, b, "extract", img, dest); code != 1 || !strings.Contains(e, "one parent") {
		t.Errorf("extract: exit %d: %s", code, e)
	}
	if _, err := os.Lstat(dest); !os.IsNotExist(err) {
		t.Errorf("extract left %s: %v", dest, err)
	}
	for _, cmd := range [][]string{{"inspect", img}, {"ls", "-R", img}, {"verify", img, layer}, {"merge", filepath.Join(dir, "m.img"), img}} {
		if _, e, code := run(t, b, cmd...); code != 1 || !strings.Contains(e, "one parent") {
			t.Errorf("%s: exit %d: %s", cmd[0], code, e)
		}
	}
}

// TestExtractNoPartial: a data error half way leaves the target as it
// was: not made, or empty.
func TestExtractNoPartial(t *testing.T) {
	b := bin(t)
	dir := t.TempDir()
	layer, img := filepath.Join(dir, "l.tar"), filepath.Join(dir, "l.img")
	text := make([]byte, 200000)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range text {
		text[i] = "abcdefgh \n"[r.IntN(10)]
	}
	writeTestTar(t, layer, tarEntry{name: "a/"}, tarEntry{name: "a/first", data: []byte("first")}, tarEntry{name: "z", data: text})
	if _, e, code := run(t, b, "mkfs", "-q", "-z", "lz4", img, layer); code != 0 {
		t.Fatalf("mkfs: %s", e)
	}
	im := openTestImage(t, img)
	z, err := im.Lstat("z")
	if err != nil {
		t.Fatal(err)
	}
	addr, _, ok := im.DataAddress(z)
	if !ok {
		t.Fatal("z has no data address")
	}
	raw, _ := os.ReadFile(img)
	for i := addr; i < addr+4096; i++ {
		raw[i] = 0xff
	}
	os.WriteFile(img, raw, 0o644)
	made, empty := filepath.Join(dir, "made"), filepath.Join(dir, "empty")
	os.Mkdir(empty, 0o755)
	for _, dest := range []string{made, empty} {
		if _, e, code := run(t, b, "extract", img, dest); code != 1 || !strings.Contains(e, "z") {
			t.Errorf("extract into %s: exit %d: %s", filepath.Base(dest), code, e)
		}
	}
	if _, err := os.Lstat(made); !os.IsNotExist(err) {
		t.Errorf("extract left %s: %v", made, err)
	}
	if left, err := os.ReadDir(empty); err != nil || len(left) != 0 {
		t.Errorf("extract left %v in %s (%v)", left, empty, err)
	}
	os.WriteFile(filepath.Join(empty, "mine"), nil, 0o644)
	if _, e, code := run(t, b, "extract", img, empty); code != 1 || !strings.Contains(e, "not empty") {
		t.Errorf("extract into a directory that is not empty: exit %d: %s", code, e)
	}
}

// TestExtractSparse: holes of a chunked image, and zeros of any image,
// become holes of the extracted file, whose bytes are those of the tar.
func TestExtractSparse(t *testing.T) {
	t.Parallel()
	b := bin(t)
	dir := t.TempDir()
	layer := filepath.Join(dir, "l.tar")
	const size = 64 << 20
	mixed := make([]byte, 3<<20)
	copy(mixed, "head")
	copy(mixed[2<<20:], "middle")
	copy(mixed[len(mixed)-4:], "tail")
	writeTestTar(t, layer, tarEntry{name: "zeros", data: make([]byte, size)}, tarEntry{name: "mixed", data: mixed})
	for _, opts := range [][]string{{"--chunk-size", "4096"}, {"-z", "lz4"}, {}} {
		img := filepath.Join(dir, "l.img")
		if _, e, code := run(t, b, append(append([]string{"mkfs", "-q"}, opts...), img, layer)...); code != 0 {
			t.Fatalf("mkfs %v: %s", opts, e)
		}
		dest := filepath.Join(dir, "dest")
		os.RemoveAll(dest)
		if _, e, code := run(t, b, "extract", img, dest); code != 0 {
			t.Fatalf("extract %v: exit %d: %s", opts, code, e)
		}
		for name, want := range map[string][]byte{"zeros": make([]byte, size), "mixed": mixed} {
			p := filepath.Join(dest, name)
			got, err := os.ReadFile(p)
			if err != nil || !bytes.Equal(got, want) {
				t.Errorf("%v: %s: %d bytes, %v", opts, name, len(got), err)
			}
			// mixed has three short runs of data: three blocks.
			fi, _ := os.Stat(p)
			if st := fi.Sys().(*syscall.Stat_t); st.Blocks*512 > 64<<10 {
				t.Errorf("%v: %s takes %d bytes on disk", opts, name, st.Blocks*512)
			}
		}
	}
}

// TestExtractReadOnlyDir: an unprivileged user can extract a directory
// without write permission that has entries: its mode comes last.
func TestExtractReadOnlyDir(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: needs root to run extract as another user; make test runs it")
	}
	setpriv, err := exec.LookPath("setpriv")
	if os.Geteuid() != 0 || err != nil {
		t.Skip("needs root and setpriv (util-linux) to run extract as another user")
	}
	b := bin(t)
	dir, err := os.MkdirTemp("", "extract-ro-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	os.Chmod(dir, 0o777)
	layer, img := filepath.Join(dir, "l.tar"), filepath.Join(dir, "l.img")
	// And a device with two names: both skipped (devices need root),
	// not the second made a link to the first that is not there.
	writeTestTar(t, layer, tarEntry{name: "ro/", mode: 0o555}, tarEntry{name: "ro/f", data: []byte("hi"), mode: 0o444},
		tarEntry{name: "null", typ: tar.TypeChar, mode: 0o666}, tarEntry{name: "null2", typ: tar.TypeLink, link: "null"})
	if _, e, code := run(t, b, "mkfs", "-q", img, layer); code != 0 {
		t.Fatalf("mkfs: %s", e)
	}
	os.Chmod(img, 0o644)
	dest := filepath.Join(dir, "new", "parents", "dest") // made as needed
	out, err := exec.Command(setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", b, "extract", img, dest).CombinedOutput()
	if err != nil {
		t.Fatalf("extract as nobody: %v: %s", err, out)
	}
	if strings.Count(string(out), "devices need root") != 2 {
		t.Errorf("extract as nobody: %s", out)
	}
	fi, err := os.Stat(filepath.Join(dest, "ro"))
	if err != nil || fi.Mode().Perm() != 0o555 {
		t.Errorf("ro: %v, %v", fi, err)
	}
	if got, err := os.ReadFile(filepath.Join(dest, "ro", "f")); err != nil || string(got) != "hi" {
		t.Errorf("ro/f: %q, %v", got, err)
	}
}

// TestHoleImage: inspect counts no data blocks for files that are all
// hole, and extract of two files of 1 PiB either makes them as holes or,
// where the file system cannot hold such a file, fails and leaves
// nothing, in either case without reading or writing a petabyte.
func TestHoleImage(t *testing.T) {
	b := bin(t)
	img := "../../erofs/testdata/holes.img"
	out, e, code := run(t, b, "inspect", img)
	if code != 0 || !strings.Contains(out, "(0 in data blocks, 0 inline)") || !strings.Contains(out, "metadata:           4096 bytes") {
		t.Errorf("inspect: exit %d: %s%s", code, out, e)
	}
	dest := filepath.Join(t.TempDir(), "x")
	start := time.Now()
	_, e, code = run(t, b, "extract", img, dest)
	t.Logf("extract: exit %d in %v: %s", code, time.Since(start), e)
	switch code {
	case 0:
		for _, name := range []string{"hole", "chunks"} {
			fi, err := os.Stat(filepath.Join(dest, name))
			if err != nil || fi.Size() != 1<<50 || fi.Sys().(*syscall.Stat_t).Blocks != 0 {
				t.Errorf("%s: %v, %v", name, fi, err)
			}
		}
	case 1:
		if _, err := os.Lstat(dest); !os.IsNotExist(err) {
			t.Errorf("extract failed and left %s: %v", dest, err)
		}
	default:
		t.Errorf("extract: exit %d: %s", code, e)
	}
}
