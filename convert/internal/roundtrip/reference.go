package roundtrip

import (
	"bytes"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	kgzip "github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
	"golang.org/x/sys/unix"

	"github.com/ocierofs/ocierofs/convert/fstree"
)

// ExtractGNU extracts tarPath into dir the way the issue defines the
// reference: GNU tar as root with --xattrs --xattrs-include='*'
// --numeric-owner -p. Directories tar creates on its own get 0755.
func ExtractGNU(t testing.TB, tarPath, dir string) {
	t.Helper()
	cmd := exec.Command("sh", "-c", `umask 022 && exec tar --xattrs --xattrs-include='*' --numeric-owner -p -xf "$1" -C "$2"`, "sh", tarPath, dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("tar -xf %s: %v\n%s", tarPath, err, out)
	}
	if len(out) > 0 {
		t.Logf("tar -xf %s said:\n%s", filepath.Base(tarPath), Shorten(out))
	}
}

// Shorten trims command output for a log line.
func Shorten(b []byte) string {
	s := string(bytes.TrimSpace(b))
	if len(s) > 2000 {
		s = s[:2000] + " …"
	}
	return s
}

// MapWhiteouts turns an extracted OCI layer at root into its overlayfs
// form: .wh.NAME becomes a char device 0:0 NAME without permission bits
// (as containerd's and docker's appliers mknod it), with the .wh. entry's
// owner and mtime; .wh..wh..opq becomes trusted.overlay.opaque=y on its
// directory; other .wh..wh.* names go; a directory holding a whiteout
// device (also a char device 0:0 of the tar) gets an empty
// trusted.overlay.origin. The mtimes of directories
// the mapping touched are set back from want (the expected tree), except
// for implied directories, whose mtime no entry gives.
func MapWhiteouts(t testing.TB, root string, want *fstree.Tree) {
	t.Helper()
	var whs, devs []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if strings.HasPrefix(d.Name(), ".wh.") {
			whs = append(whs, p)
			if d.IsDir() {
				return fs.SkipDir
			}
		}
		if d.Type()&fs.ModeCharDevice != 0 {
			// A char device 0:0 of the tar is a whiteout too.
			var st unix.Stat_t
			if err := unix.Lstat(p, &st); err == nil && st.Rdev == 0 {
				devs = append(devs, p)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	touched := map[string]bool{}
	origin := map[string]bool{}
	for _, p := range whs {
		dir, base := filepath.Dir(p), filepath.Base(p)
		touched[dir] = true
		switch {
		case base == ".wh..wh..opq":
			Must(t, os.Remove(p))
			Must(t, unix.Lsetxattr(dir, "trusted.overlay.opaque", []byte("y"), 0))
		case strings.HasPrefix(base, ".wh..wh."):
			Must(t, os.RemoveAll(p))
		default:
			var st unix.Stat_t
			Must(t, unix.Lstat(p, &st))
			Must(t, os.RemoveAll(p))
			dev := filepath.Join(dir, strings.TrimPrefix(base, ".wh."))
			if _, err := os.Lstat(dev); err == nil {
				t.Fatalf("MapWhiteouts: %s and its whiteout were both extracted: the extraction is no reference for this tar", dev)
			}
			Must(t, unix.Mknod(dev, unix.S_IFCHR, 0))
			Must(t, unix.Lchown(dev, int(st.Uid), int(st.Gid)))
			Must(t, unix.Chmod(dev, 0)) // mknod's mode is masked by the umask only
			Must(t, unix.UtimesNanoAt(unix.AT_FDCWD, dev, []unix.Timespec{st.Mtim, st.Mtim}, unix.AT_SYMLINK_NOFOLLOW))
			origin[dir] = true
		}
	}
	for _, p := range devs {
		origin[filepath.Dir(p)] = true
	}
	for dir := range origin {
		Must(t, unix.Lsetxattr(dir, "trusted.overlay.origin", []byte{}, 0))
	}
	for dir := range touched {
		rel, err := filepath.Rel(root, dir)
		Must(t, err)
		n := want.Node(filepath.ToSlash(rel))
		if n == nil || n.Implied || !n.IsDir() {
			continue
		}
		ts, err := unix.TimeToTimespec(n.Mtime) // its fields are 32-bit on 32-bit machines
		Must(t, err)
		Must(t, unix.UtimesNanoAt(unix.AT_FDCWD, dir, []unix.Timespec{ts, ts}, unix.AT_SYMLINK_NOFOLLOW))
	}
}

// Must fails the test on a non-nil error.
func Must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// Compress writes src compressed with codec ("gz" or "zst") next to it and
// returns the new file's path. It uses Debian's gzip -n and zstd when they
// are installed, else klauspost/compress.
func Compress(t testing.TB, src, codec string) string {
	t.Helper()
	dst := src + "." + codec
	if _, err := os.Stat(dst); err == nil {
		return dst
	}
	var cli []string
	switch codec {
	case "gz":
		cli = []string{"gzip", "-n", "-c", src}
	case "zst":
		cli = []string{"zstd", "-q", "-c", src}
	default:
		t.Fatalf("unknown codec %q", codec)
	}
	out, err := os.Create(dst)
	Must(t, err)
	defer out.Close()
	if _, err := exec.LookPath(cli[0]); err == nil {
		cmd := exec.Command(cli[0], cli[1:]...)
		cmd.Stdout = out
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("%s: %v: %s", strings.Join(cli, " "), err, stderr.Bytes())
		}
		return dst
	}
	t.Logf("no %s command: compressing with klauspost/compress", cli[0])
	in, err := os.Open(src)
	Must(t, err)
	defer in.Close()
	var w io.WriteCloser
	if codec == "gz" {
		w = kgzip.NewWriter(out)
	} else {
		w, err = zstd.NewWriter(out)
		Must(t, err)
	}
	if _, err := io.Copy(w, in); err != nil {
		t.Fatal(err)
	}
	Must(t, w.Close())
	return dst
}
