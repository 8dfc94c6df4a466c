package main

import (
	"archive/tar"
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// compatTar writes a small layer: text to compress, a whiteout, an
// opaque directory, a hard link, mtimes of several years.
func compatTar(t *testing.T, path string) {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	add := func(h tar.Header, data []byte) {
		h.Size = int64(len(data))
		if h.ModTime.IsZero() {
			h.ModTime = time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
		}
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		tw.Write(data)
	}
	text := bytes.Repeat([]byte("a line of text that compresses, with a number 12345\n"), 3000)
	add(tar.Header{Name: "etc/", Typeflag: tar.TypeDir, Mode: 0o755}, nil)
	add(tar.Header{Name: "etc/passwd", Typeflag: tar.TypeReg, Mode: 0o644, ModTime: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)},
		[]byte("root:x:0:0:root:/root:/bin/sh\n"))
	add(tar.Header{Name: "etc/.wh.motd", Typeflag: tar.TypeReg}, nil)
	add(tar.Header{Name: "var/", Typeflag: tar.TypeDir, Mode: 0o755}, nil)
	add(tar.Header{Name: "var/.wh..wh..opq", Typeflag: tar.TypeReg}, nil)
	add(tar.Header{Name: "var/log", Typeflag: tar.TypeReg, Mode: 0o600, Uid: 100000, Gid: 7}, text)
	add(tar.Header{Name: "var/log.1", Typeflag: tar.TypeLink, Linkname: "var/log"}, nil)
	add(tar.Header{Name: "big", Typeflag: tar.TypeReg, Mode: 0o644}, bytes.Repeat(text, 3))
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// ocierofs called mkfs.erofs reads mkfs.erofs's command line, and builds
// the image `ocierofs mkfs` builds with the same settings, byte for byte.
// (convert's TestMkfsErofsKernel mounts what only this name can make, and
// TestContainerdMkfsErofs has containerd run it.)
func TestMkfsErofs(t *testing.T) {
	b := bin(t)
	dir := t.TempDir()
	mkfs := filepath.Join(dir, "mkfs.erofs")
	if err := os.Symlink(b, mkfs); err != nil {
		t.Fatal(err)
	}
	layer := filepath.Join(dir, "layer.tar")
	compatTar(t, layer)
	const uuid = "6b1ff4b0-4a6e-4c45-bc3b-1d1f0cf9d3c2"

	// runMkfs runs mkfs.erofs ARGS with the layer on stdin.
	runMkfs := func(args ...string) (string, string, int) {
		t.Helper()
		return runMkfsOf(t, layer, mkfs, args...)
	}

	if out, _, code := runMkfs("--help"); code != 0 || !strings.Contains(out, "--tar=") || !strings.Contains(out, "Usage: mkfs.erofs") {
		t.Errorf("mkfs.erofs --help: exit %d:\n%s", code, out)
	}
	if out, _, code := runMkfs("-V"); code != 0 || !strings.HasPrefix(out, "mkfs.erofs (ocierofs) ") {
		t.Errorf("mkfs.erofs -V: exit %d: %q", code, out)
	}
	// The subcommand is the same program.
	if out, _, code := run(t, b, "mkfs.erofs", "--help"); code != 0 || !strings.Contains(out, "--tar=") {
		t.Errorf("ocierofs mkfs.erofs --help: exit %d:\n%s", code, out)
	}
	if _, e, code := run(t, b, "mkfs.erofs", "--bogus"); code != 1 || e != "mkfs.erofs: unrecognized option '--bogus'\nTry 'mkfs.erofs --help' for more information.\n" {
		t.Errorf("ocierofs mkfs.erofs --bogus: exit %d, stderr %q", code, e)
	}

	for _, tc := range []struct {
		name     string
		mkfsArgs []string // before FILE [SOURCE]; no SOURCE: stdin
		stdin    bool
		ours     []string // ocierofs mkfs flags for the same image
	}{
		{"containerd", []string{"--tar=f", "--aufs", "--quiet", "-Enoinline_data", "-b4096", "-T0", "--mkfs-time", "--sort=none", "-U", uuid}, true,
			[]string{"--no-inline-data", "--no-file-dedupe", "-b", "4096", "-T", "0", "-U", uuid}},
		{"lz4hc", []string{"--tar=f", "--aufs", "--quiet", "-Enoinline_data", "-zlz4hc,12", "-C65536", "-Eztailpacking", "-T0", "--mkfs-time", "-U", uuid}, false,
			[]string{"--no-inline-data", "--no-file-dedupe", "-z", "lz4hc,level=12", "--pcluster-size", "64K", "-T", "0", "-U", uuid}},
		{"deflate", []string{"--tar=f", "--aufs", "--quiet", "-zdeflate,9", "-T", "0", "--mkfs-time", "--max-extent-bytes=65536", "-Efragments,dedupe", "-U", uuid}, false,
			[]string{"--no-file-dedupe", "-z", "deflate,level=9", "--pcluster-size", "4K", "--max-extent", "64K", "--tail-packing=false", "--fragments", "--dedupe", "-T", "0", "-U", uuid}},
		{"no aufs", []string{"--tar=f", "--quiet", "-T0", "--mkfs-time", "-U", uuid}, true,
			[]string{"--no-file-dedupe", "--whiteouts", "keep", "-T", "0", "-U", uuid}},
	} {
		a, o := filepath.Join(dir, tc.name+".mkfs"), filepath.Join(dir, tc.name+".ours")
		args := append(append([]string{}, tc.mkfsArgs...), a)
		if !tc.stdin {
			args = append(args, layer)
		}
		if _, e, code := runMkfs(args...); code != 0 {
			t.Errorf("%s: mkfs.erofs %s: exit %d: %s", tc.name, strings.Join(args, " "), code, e)
			continue
		}
		if _, e, code := run(t, b, append(append([]string{"mkfs", "-q"}, tc.ours...), o, layer)...); code != 0 {
			t.Fatalf("%s: ocierofs mkfs: exit %d: %s", tc.name, code, e)
		}
		x, _ := os.ReadFile(a)
		y, _ := os.ReadFile(o)
		if len(x) == 0 || !bytes.Equal(x, y) {
			t.Errorf("%s: mkfs.erofs %v and ocierofs mkfs %v made different images (%d and %d bytes)", tc.name, tc.mkfsArgs, tc.ours, len(x), len(y))
		}
		if out, e, code := run(t, b, "verify", "--whiteouts", map[bool]string{true: "overlay", false: "keep"}[tc.name != "no aufs"], a, layer); code != 0 {
			t.Errorf("%s: verify: exit %d: %s%s", tc.name, code, out, e)
		}
	}

	// ocierofs mkfs --tar-index takes the tar on stdin too: the device
	// table then takes its size at the end, and has no name for it.
	idxIn, idxFile := filepath.Join(dir, "in.idx"), filepath.Join(dir, "file.idx")
	if _, e, code := runMkfsOf(t, layer, b, "mkfs", "-q", "--tar-index", "-U", uuid, idxIn, "-"); code != 0 {
		t.Fatalf("mkfs --tar-index from stdin: exit %d: %s", code, e)
	}
	if _, e, code := run(t, b, "mkfs", "-q", "--tar-index", "-U", uuid, idxFile, layer); code != 0 {
		t.Fatalf("mkfs --tar-index: exit %d: %s", code, e)
	}
	fi, err := os.Stat(layer)
	if err != nil {
		t.Fatal(err)
	}
	for name, tag := range map[string]string{idxIn: "", idxFile: "layer.tar"} {
		img, c, err := openImage(name)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		d := img.Devices()
		c.Close()
		if len(d) != 1 || d[0].Blocks != uint64((fi.Size()+511)/512) || d[0].Tag != tag {
			t.Errorf("%s: devices %+v, want one of %d blocks named %q", name, d, (fi.Size()+511)/512, tag)
		}
	}
	// With the tar after it, the stdin index reads as the tar.
	raw, _ := os.ReadFile(idxIn)
	tb, _ := os.ReadFile(layer)
	flat := idxIn + ".flat"
	if err := os.WriteFile(flat, append(raw, tb...), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, e, code := run(t, b, "verify", "-q", flat, layer); code != 0 {
		t.Errorf("verify of [index][tar] made from stdin: exit %d: %s%s", code, out, e)
	}
	if _, e, code := runMkfsOf(t, layer, b, "mkfs", "-q", "--tar-index", "--append-tar", idxIn, "-"); code != 1 || !strings.Contains(e, "must be a file") {
		t.Errorf("mkfs --append-tar of stdin: exit %d: %s", code, e)
	}

	// -Eforce-inode-extended, which ocierofs mkfs does not offer.
	ext := filepath.Join(dir, "ext.img")
	if _, e, code := runMkfs("--tar=f", "--quiet", "-Eforce-inode-extended", "-T0", "--mkfs-time", ext); code != 0 {
		t.Fatalf("-Eforce-inode-extended: exit %d: %s", code, e)
	}
	if out, _, _ := run(t, b, "inspect", ext); !regexp.MustCompile(`; 0 compact, \d+ extended`).MatchString(out) {
		t.Errorf("-Eforce-inode-extended: inspect says:\n%s", out)
	}

	// Refusals: exit 1, one message naming what is wrong, no image.
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--tar", "--aufs", "-q", "OUT"}, "invalid option -- 'q'"},
		{[]string{"-Eall-fragments", "-zlz4", "--tar=f", "OUT"}, "all-fragments is not supported"},
		{[]string{"--all-root", "OUT", dir}, "--all-root: not supported by ocierofs"},
		{[]string{"OUT", layer}, "is not a directory"},
		{[]string{"--tar=f", "OUT", dir}, "is a directory"},
		{[]string{"--tar=f", "OUT", filepath.Join(dir, "missing.tar")}, "no such file"},
		{[]string{"OUT"}, "missing argument: SOURCE"},
	} {
		out := filepath.Join(dir, "refused.img")
		args := append([]string{}, tc.args...)
		for i, a := range args {
			if a == "OUT" {
				args[i] = out
			}
		}
		_, e, code := runMkfs(args...)
		if code != 1 || !strings.Contains(e, tc.want) || !strings.HasPrefix(e, "mkfs.erofs: ") {
			t.Errorf("mkfs.erofs %v: exit %d, stderr %q; want 1 and %q", tc.args, code, e, tc.want)
		}
		if _, err := os.Stat(out); err == nil {
			t.Errorf("mkfs.erofs %v: left %s", tc.args, out)
		}
	}
	// A tar cut in the middle of big's data: an error naming the entry,
	// no image.
	raw, _ = os.ReadFile(layer)
	cut := filepath.Join(dir, "cut.tar")
	os.WriteFile(cut, raw[:len(raw)/2], 0o644)
	bad := filepath.Join(dir, "bad.img")
	if _, e, code := run(t, mkfs, "--tar=f", "--quiet", bad, cut); code != 1 || !strings.Contains(e, `"big"`) {
		t.Errorf("a cut tar: exit %d: %s", code, e)
	}
	if _, err := os.Stat(bad); err == nil {
		t.Errorf("a cut tar left %s", bad)
	}
}

// runMkfsOf runs b ARGS with the file in on stdin.
func runMkfsOf(t *testing.T, in, b string, args ...string) (string, string, int) {
	t.Helper()
	f, err := os.Open(in)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	return runStdin(t, f, b, args...)
}
