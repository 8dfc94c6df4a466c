package convert_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/ocierofs/ocierofs/convert"
	"github.com/ocierofs/ocierofs/convert/fstree"
	"github.com/ocierofs/ocierofs/convert/internal/roundtrip"
)

// TestMkfsSameFile: a build that would write over a file it reads (or
// write two outputs to one file) fails before writing anything, naming
// both, and every file is left as it was. Before the check each of these
// exited 0: mkfs --tar-index t.tar t.tar left an index pointing into
// itself, the tar's data gone.
func TestMkfsSameFile(t *testing.T) {
	dir := t.TempDir()
	tarData := tarOf(t, cFile("f", string(content("f", 20000)), 0o644, t0), cFile("g", string(content("g", 9000)), 0o644, t0))
	p := func(name string) string { return filepath.Join(dir, name) }
	must(t, os.WriteFile(p("t.tar"), tarData, 0o644))
	must(t, os.Symlink("t.tar", p("link.tar")))
	must(t, os.Mkdir(p("sub"), 0o755))
	must(t, os.Symlink("sub", p("sublink")))
	must(t, os.Mkdir(p("tree"), 0o755))
	must(t, os.WriteFile(p("tree/a"), []byte("a"), 0o644))
	// A chunk dictionary: an image whose data is in d1.blob.
	if _, err := convert.Mkfs(p("d1.img"), p("t.tar"), convert.Options{Blob: p("d1.blob")}); err != nil {
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
			_, err := convert.Mkfs(tc.out, tc.in, tc.opt)
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
	if _, err := convert.Mkfs(p("sub/ok.img"), p("t.tar"), convert.Options{Blob: p("sub/ok.blob")}); err != nil {
		t.Errorf("distinct files: %v", err)
	}
	if _, err := convert.Mkfs(p("d2.img"), p("t.tar"), convert.Options{Blob: p("d2.blob"), ChunkDicts: []string{p("d1.img")}}); err != nil {
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
	must(t, unix.Mknod(filepath.Join(src, "a", "gone"), unix.S_IFCHR|0o000, 0))
	must(t, os.Link(filepath.Join(src, "a", "gone"), filepath.Join(src, "c", "gone too")))
	must(t, unix.Mknod(filepath.Join(src, "d", "w"), unix.S_IFCHR|0o000, 0))
	must(t, unix.Lsetxattr(filepath.Join(src, "d"), "trusted.overlay.origin", []byte("kept"), 0))
	must(t, os.WriteFile(filepath.Join(src, "b", "file"), []byte("x"), 0o644))
	must(t, unix.Mknod(filepath.Join(src, "b", "null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))))

	img := filepath.Join(t.TempDir(), "dir.erofs")
	if _, err := convert.Mkfs(img, src, convert.Options{}); err != nil {
		t.Fatal(err)
	}
	want := treeFromDir(t, src)
	if n := want.MarkWhiteoutDirs(); n != 2 {
		t.Errorf("MarkWhiteoutDirs marked %d directories, want a and c", n)
	}
	got := treeFromDir(t, roundtrip.Mount(t, img))
	reportDiff(t, "the directory vs its image, mounted", fstree.Diff(want, got, fstree.DiffOptions{}))
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
