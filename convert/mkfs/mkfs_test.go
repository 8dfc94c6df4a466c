package mkfs_test

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/ocierofs/ocierofs/convert"
	"github.com/ocierofs/ocierofs/convert/fstree"
	"github.com/ocierofs/ocierofs/convert/internal/convtest"
	"github.com/ocierofs/ocierofs/convert/internal/roundtrip"
	"github.com/ocierofs/ocierofs/convert/mkfs"
	"github.com/ocierofs/ocierofs/erofs"
)

var must = roundtrip.Must

// TestMkfsSameFile: a build that would write over a file it reads (or
// write two outputs to one file) fails before writing anything, naming
// both, and every file is left as it was. Before the check each of these
// exited 0: mkfs --tar-index t.tar t.tar left an index pointing into
// itself, the tar's data gone.
func TestMkfsSameFile(t *testing.T) {
	dir := t.TempDir()
	tarData := convtest.TarOf(t, convtest.TarFile("f", string(convtest.Content("f", 20000)), 0o644, convtest.T0), convtest.TarFile("g", string(convtest.Content("g", 9000)), 0o644, convtest.T0))
	p := func(name string) string { return filepath.Join(dir, name) }
	must(t, os.WriteFile(p("t.tar"), tarData, 0o644))
	must(t, os.Symlink("t.tar", p("link.tar")))
	must(t, os.Mkdir(p("sub"), 0o755))
	must(t, os.Symlink("sub", p("sublink")))
	must(t, os.Mkdir(p("tree"), 0o755))
	must(t, os.WriteFile(p("tree/a"), []byte("a"), 0o644))
	must(t, os.Symlink("tree/new.img", p("into-tree.img")))
	// A chunk dictionary: an image whose data is in d1.blob.
	if _, err := mkfs.Build(p("d1.img"), p("t.tar"), convert.Options{Blob: p("d1.blob")}); err != nil {
		t.Fatal(err)
	}
	dict := convert.Options{Blob: p("d1.blob"), ChunkDicts: []string{p("d1.img")}}
	cases := []struct {
		name, out, in string
		opt           convert.Options
		want          []string // in the error
	}{
		{"output-is-input", p("t.tar"), p("t.tar"), convert.Options{}, []string{"the output", "the input"}},
		{"tar-index-over-its-tar", p("t.tar"), p("t.tar"), convert.Options{TarIndex: true}, []string{"the output", "the input"}},
		{"output-is-input-by-symlink", p("link.tar"), p("t.tar"), convert.Options{}, []string{"link.tar", "t.tar"}},
		{"output-is-image-read", p("d1.img"), p("d1.img"), convert.Options{}, []string{"the output"}},
		{"blob-is-output", p("new.img"), p("t.tar"), convert.Options{Blob: p("new.img")}, []string{"the output", "the blob"}},
		{"blob-is-output-by-dir-symlink", p("sub/new.img"), p("t.tar"), convert.Options{Blob: p("sublink/new.img")}, []string{"the output", "the blob"}},
		{"blob-is-input", p("x.img"), p("t.tar"), convert.Options{Blob: p("t.tar")}, []string{"the blob", "the input"}},
		{"blob-is-dictionary-blob", p("d2.img"), p("t.tar"), dict, []string{"the blob", "chunk dictionary"}},
		{"output-is-dictionary", p("d1.img"), p("t.tar"), convert.Options{Blob: p("d2.blob"), ChunkDicts: []string{p("d1.img")}}, []string{"the output", "chunk dictionary"}},
		{"output-inside-input-dir", p("tree/out.img"), p("tree"), convert.Options{}, []string{"inside the input directory"}},
		{"output-inside-input-dir-by-symlink", p("into-tree.img"), p("tree"), convert.Options{}, []string{"inside the input directory"}},
	}
	snapshot := func() map[string][]byte {
		m := map[string][]byte{}
		filepath.Walk(dir, func(path string, fi os.FileInfo, err error) error {
			if err == nil && fi.Mode().IsRegular() {
				b, _ := os.ReadFile(path)
				m[path] = b
			}
			return nil
		})
		return m
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := snapshot()
			_, err := mkfs.Build(tc.out, tc.in, tc.opt)
			if err == nil {
				t.Fatal("Mkfs succeeded")
			}
			t.Logf("Mkfs: %v", err)
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("the error does not name %q", w)
				}
			}
			after := snapshot()
			for name, b := range before {
				if !bytes.Equal(after[name], b) {
					t.Errorf("%s changed", name)
				}
			}
			for name := range after {
				if before[name] == nil {
					t.Errorf("%s left behind", name)
				}
			}
		})
	}
	// Distinct files still build, a blob beside its image included.
	if _, err := mkfs.Build(p("sub/ok.img"), p("t.tar"), convert.Options{Blob: p("sub/ok.blob")}); err != nil {
		t.Errorf("distinct files: %v", err)
	}
	if _, err := mkfs.Build(p("d2.img"), p("t.tar"), convert.Options{Blob: p("d2.blob"), ChunkDicts: []string{p("d1.img")}}); err != nil {
		t.Errorf("with a chunk dictionary: %v", err)
	}
}

// A directory holding overlayfs whiteouts (an overlay's upper directory,
// which containerd's snapshotter commits with mkfs.erofs) gets the empty
// trusted.overlay.origin a tar layer's whiteouts give it, also where the
// whiteout is a hard link of another, as overlayfs makes them; an origin
// the directory has already stays.
func TestBuildDirWhiteouts(t *testing.T) {
	roundtrip.RequireMount(t)
	src := t.TempDir()
	for _, d := range []string{"a", "b", "c", "d"} {
		must(t, os.Mkdir(filepath.Join(src, d), 0o755))
	}
	must(t, unix.Mknod(filepath.Join(src, "a", "gone"), unix.S_IFCHR, 0))
	must(t, os.Link(filepath.Join(src, "a", "gone"), filepath.Join(src, "c", "gone too")))
	must(t, unix.Mknod(filepath.Join(src, "d", "w"), unix.S_IFCHR, 0))
	must(t, unix.Lsetxattr(filepath.Join(src, "d"), "trusted.overlay.origin", []byte("kept"), 0))
	must(t, os.WriteFile(filepath.Join(src, "b", "file"), []byte("x"), 0o644))
	must(t, unix.Mknod(filepath.Join(src, "b", "null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))))

	img := filepath.Join(t.TempDir(), "dir.erofs")
	if _, err := mkfs.Build(img, src, convert.Options{}); err != nil {
		t.Fatal(err)
	}
	want := convtest.TreeFromDir(t, src)
	if n := want.MarkWhiteoutDirs(); n != 2 {
		t.Errorf("MarkWhiteoutDirs marked %d directories, want a and c", n)
	}
	got := convtest.TreeFromDir(t, roundtrip.Mount(t, img))
	convtest.ReportDiff(t, "the directory vs its image, mounted", fstree.Diff(want, got, fstree.DiffOptions{}))
	// The directory named through a symbolic link: the same image.
	link := filepath.Join(t.TempDir(), "link")
	must(t, os.Symlink(src, link))
	img2 := filepath.Join(t.TempDir(), "link.erofs")
	if _, err := mkfs.Build(img2, link, convert.Options{}); err != nil {
		t.Fatalf("a directory through a symbolic link: %v", err)
	}
	if a, b := convtest.ReadFile(t, img), convtest.ReadFile(t, img2); !bytes.Equal(a, b) {
		t.Errorf("the directory through a symbolic link gave another image")
	}
	for dir, origin := range map[string]string{"a": "", "c": "", "d": "kept", "b": "none"} {
		v, ok := got.Node(dir).Xattrs["trusted.overlay.origin"]
		if !ok {
			v = "none"
		}
		if v != origin {
			t.Errorf("%s: trusted.overlay.origin %q, want %q", dir, v, origin)
		}
	}
}

// Where the image goes: through a symbolic link, into a device or a FIFO
// in place, over a file keeping its permissions and owner; never over a
// directory. mkfs.erofs writes its FILE in place; a mkfs.erofs link to
// ocierofs must not turn a device node into a regular file.
func TestMkfsOutputs(t *testing.T) {
	dir := t.TempDir()
	p := func(name string) string { return filepath.Join(dir, name) }
	must(t, os.WriteFile(p("t.tar"), convtest.TarOf(t, convtest.TarFile("f", string(convtest.Content("f", 20000)), 0o644, convtest.T0)), 0o644))
	build := func(out string) error {
		_, err := mkfs.Build(out, p("t.tar"), convert.Options{Erofs: erofs.Options{BuildTime: convtest.T0}})
		return err
	}
	must(t, build(p("ref.img")))
	want, err := os.ReadFile(p("ref.img"))
	must(t, err)
	same := func(what, path string) {
		t.Helper()
		got, err := os.ReadFile(path)
		if err != nil || !bytes.Equal(got[:min(len(got), len(want))], want) {
			t.Errorf("%s: %s does not hold the image (%v)", what, path, err)
		}
	}

	// Symbolic links, one of them dangling: the file they name gets it.
	must(t, os.Symlink("sub/target.img", p("link.img")))
	must(t, os.Mkdir(p("sub"), 0o755))
	must(t, build(p("link.img")))
	if fi, err := os.Lstat(p("link.img")); err != nil || fi.Mode()&fs.ModeSymlink == 0 {
		t.Errorf("the link was replaced: %v %v", fi.Mode(), err)
	}
	same("through a dangling link", p("sub/target.img"))
	must(t, build(p("link.img")))
	same("through a link", p("sub/target.img"))

	// An existing file keeps its permissions and owner (another user's
	// as root, who can give it one).
	uid, gid := os.Geteuid(), os.Getegid()
	must(t, os.WriteFile(p("kept.img"), nil, 0o600))
	if uid == 0 {
		uid, gid = 1234, 5678
		must(t, os.Chown(p("kept.img"), uid, gid))
	}
	must(t, build(p("kept.img")))
	var st unix.Stat_t
	must(t, unix.Stat(p("kept.img"), &st))
	if st.Mode&0o7777 != 0o600 || int(st.Uid) != uid || int(st.Gid) != gid {
		t.Errorf("an existing file became mode %o, %d:%d; want 600, %d:%d", st.Mode&0o7777, st.Uid, st.Gid, uid, gid)
	}
	same("over a file", p("kept.img"))

	// A directory: refused before anything is built.
	must(t, os.Mkdir(p("d.img"), 0o755))
	if err := build(p("d.img")); err == nil || !strings.Contains(err.Error(), "is a directory") {
		t.Errorf("a directory as the output: %v", err)
	}

	// A character device (as /dev/null) stays one: a copy of /dev/null
	// as root, who can make one; /dev/null itself otherwise, which another
	// user could not replace anyway.
	null := "/dev/null"
	if os.Geteuid() == 0 {
		null = p("null")
		must(t, unix.Mknod(null, unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))))
	}
	must(t, build(null))
	if fi, err := os.Lstat(null); err != nil || fi.Mode()&fs.ModeCharDevice == 0 {
		t.Errorf("the character device was replaced: %v %v", fi.Mode(), err)
	}

	// A FIFO gets the image as a stream.
	must(t, unix.Mkfifo(p("fifo"), 0o644))
	got := make(chan []byte)
	go func() {
		b, _ := os.ReadFile(p("fifo"))
		got <- b
	}()
	must(t, build(p("fifo")))
	if b := <-got; !bytes.Equal(b, want) {
		t.Errorf("the FIFO gave %d bytes, not the image's %d", len(b), len(want))
	}

	// A block device (a loop device) is written from its start, if the
	// image fits.
	roundtrip.RequireMount(t)
	for _, size := range []int{len(want) + 8192, 4096} {
		backing := p(fmt.Sprintf("backing-%d", size))
		must(t, os.WriteFile(backing, bytes.Repeat([]byte{0xAA}, size), 0o644))
		out, err := exec.Command("losetup", "--find", "--show", backing).Output()
		if err != nil {
			t.Skipf("no loop device: losetup: %v", err)
		}
		loop := strings.TrimSpace(string(out))
		t.Cleanup(func() { exec.Command("losetup", "-d", loop).Run() })
		err = build(loop)
		if size < len(want) {
			if err == nil || !strings.Contains(err.Error(), "the device has 4096") {
				t.Errorf("an image larger than the device: %v", err)
			}
			continue
		}
		must(t, err)
		if fi, err := os.Lstat(loop); err != nil || fi.Mode()&fs.ModeDevice == 0 {
			t.Errorf("%s was replaced: %v %v", loop, fi.Mode(), err)
		}
		same("into a block device", backing)
		// The kernel mounts the device itself.
		mnt := t.TempDir()
		if out, err := exec.Command("mount", "-t", "erofs", "-o", "ro", loop, mnt).CombinedOutput(); err != nil {
			t.Fatalf("mount %s: %v: %s", loop, err, out)
		}
		f, err := os.ReadFile(filepath.Join(mnt, "f"))
		roundtrip.Unmount(t, mnt)
		if err != nil || !bytes.Equal(f, convtest.Content("f", 20000)) {
			t.Errorf("f on the mounted device: %d bytes, %v", len(f), err)
		}
	}
}
