package roundtrip

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"sort"
	"strings"
	"testing"
	"time"

	goerofs "github.com/erofs/go-erofs"
	"golang.org/x/sys/unix"

	"github.com/ocierofs/ocierofs/convert/fstree"
	"github.com/ocierofs/ocierofs/erofs"
)

// ProjectTree reads img with the project's own reader (erofs.Image), with
// its extra devices given as files or, if none are, found inside img as
// Linux 6.4+ does (an image with its blobs or tar appended).
func ProjectTree(t testing.TB, img string, devices ...string) *fstree.Tree {
	t.Helper()
	f, err := os.Open(img)
	Must(t, err)
	defer f.Close()
	fi, err := f.Stat()
	Must(t, err)
	opts := []erofs.OpenOption{erofs.WithFlatDevices()}
	if len(devices) > 0 {
		opts = nil
	}
	for _, d := range devices {
		df, err := os.Open(d)
		Must(t, err)
		defer df.Close()
		dfi, err := df.Stat()
		Must(t, err)
		opts = append(opts, erofs.WithDevice(df, dfi.Size()))
	}
	im, err := erofs.Open(f, fi.Size(), opts...)
	if err != nil {
		t.Fatalf("erofs.Open(%s): %v", img, err)
	}
	tr, err := fstree.FromImage(im)
	if err != nil {
		t.Fatalf("fstree.FromImage(%s): %v", img, err)
	}
	return tr
}

// GoErofsTree reads img with github.com/erofs/go-erofs.
//
// go-erofs v0.3.1 exposes everything fstree compares, through Lstat's
// Sys() (*erofs.Stat: mode with setuid/setgid/sticky, uid, gid, mtime with
// nanoseconds, size, rdev, nid for hard links, xattrs), ReadLink, ReadDir
// and Open. It reads no compressed image, which this converter does not
// write yet. Its gaps: it names the ACL xattrs with a trailing dot
// ("system.posix_acl_access."), which is undone here; and it reads a
// shared xattr from one block only, so it fails on an image whose shared
// xattrs are longer than a block (valid EROFS, but the writer avoids it for
// go-erofs' sake, so that is reported as an error).
func GoErofsTree(img string) (*fstree.Tree, error) {
	f, err := os.Open(img)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fsys, err := goerofs.Open(f)
	if err != nil {
		return nil, fmt.Errorf("Open: %w", err)
	}
	x, ok := fsys.(goErofsImage)
	if !ok {
		return nil, fmt.Errorf("%T has no ReadDir, ReadLink and Lstat", fsys)
	}
	return fstree.FromFS(goErofsFS{x})
}

type goErofsImage interface {
	fs.ReadDirFS
	fs.ReadLinkFS
}

// goErofsFS adapts go-erofs to fstree.StatFS.
type goErofsFS struct{ img goErofsImage }

func (g goErofsFS) Open(name string) (fs.File, error)          { return g.img.Open(name) }
func (g goErofsFS) ReadDir(name string) ([]fs.DirEntry, error) { return g.img.ReadDir(name) }
func (g goErofsFS) Readlink(name string) (string, error)       { return g.img.ReadLink(name) }

func (g goErofsFS) stat(name string) (*goerofs.Stat, error) {
	fi, err := g.img.Lstat(name)
	if err != nil {
		return nil, err
	}
	st, ok := fi.Sys().(*goerofs.Stat)
	if !ok {
		return nil, fmt.Errorf("go-erofs: %s: Sys() is %T, not *erofs.Stat", name, fi.Sys())
	}
	return st, nil
}

func (g goErofsFS) Lstat(name string) (fstree.Info, error) {
	st, err := g.stat(name)
	if err != nil {
		return fstree.Info{}, err
	}
	mode, err := unixMode(st.Mode)
	if err != nil {
		return fstree.Info{}, fmt.Errorf("go-erofs: %s: %w", name, err)
	}
	info := fstree.Info{
		Mode:  mode,
		Uid:   st.UID,
		Gid:   st.GID,
		Size:  st.Size,
		Mtime: time.Unix(int64(st.Mtime), int64(st.MtimeNs)),
		Ino:   uint64(st.Ino),
	}
	if t := mode & unix.S_IFMT; t == unix.S_IFCHR || t == unix.S_IFBLK {
		// i_u holds the device number in the kernel's new_encode_dev form.
		d := st.Rdev
		info.Devmajor = (d & 0xfff00) >> 8
		info.Devminor = d&0xff | (d>>12)&0xfff00
	}
	return info, nil
}

func (g goErofsFS) Xattrs(name string) ([]fstree.Xattr, error) {
	st, err := g.stat(name)
	if err != nil {
		return nil, err
	}
	var xs []fstree.Xattr
	for k, v := range st.Xattrs {
		if k == "system.posix_acl_access." || k == "system.posix_acl_default." {
			k = strings.TrimSuffix(k, ".")
		}
		xs = append(xs, fstree.Xattr{Name: k, Value: []byte(v)})
	}
	sort.Slice(xs, func(i, j int) bool { return xs[i].Name < xs[j].Name })
	return xs, nil
}

// unixMode turns an fs.FileMode into st_mode.
func unixMode(m fs.FileMode) (uint32, error) {
	mode := uint32(m.Perm())
	if m&fs.ModeSetuid != 0 {
		mode |= unix.S_ISUID
	}
	if m&fs.ModeSetgid != 0 {
		mode |= unix.S_ISGID
	}
	if m&fs.ModeSticky != 0 {
		mode |= unix.S_ISVTX
	}
	switch {
	case m&fs.ModeDir != 0:
		mode |= unix.S_IFDIR
	case m&fs.ModeSymlink != 0:
		mode |= unix.S_IFLNK
	case m&fs.ModeNamedPipe != 0:
		mode |= unix.S_IFIFO
	case m&fs.ModeSocket != 0:
		mode |= unix.S_IFSOCK
	case m&fs.ModeCharDevice != 0:
		mode |= unix.S_IFCHR
	case m&fs.ModeDevice != 0:
		mode |= unix.S_IFBLK
	case m&fs.ModeType == 0:
		mode |= unix.S_IFREG
	default:
		return 0, fmt.Errorf("file mode %v has no st_mode type", m)
	}
	return mode, nil
}

// Fsck runs Debian's fsck.erofs (erofs-utils 1.5) with args on img and
// fails the test unless it exits 0. It returns a reason instead when fsck
// cannot judge this image: it is not installed, the image has a block
// size erofs-utils 1.5 was not built for (it says so), or the test runs
// under -short (the fast tier needs no erofs-utils).
func Fsck(t testing.TB, img string, blockSize int, args ...string) (skip string) {
	t.Helper()
	if testing.Short() {
		return "-short: no fsck.erofs; make test runs it"
	}
	if _, err := exec.LookPath("fsck.erofs"); err != nil {
		return "no fsck.erofs (Debian package erofs-utils)"
	}
	out, err := exec.Command("fsck.erofs", append(args, img)...).CombinedOutput()
	if err == nil {
		return ""
	}
	// erofs-utils 1.5 is built for 4 KiB blocks only: it says "blksize N
	// isn't supported", or fails to read the 4 KiB it takes for the
	// superblock's block from a smaller image.
	if blockSize != 0 && blockSize != 4096 &&
		(bytes.Contains(out, []byte("blksize")) || bytes.Contains(out, []byte("cannot read erofs superblock"))) {
		return fmt.Sprintf("fsck.erofs 1.5 does not know %d-byte blocks: %s", blockSize, firstLine(out))
	}
	// 1.5 predates fragments (1.6) and the deflate and zstd codecs.
	if bytes.Contains(out, []byte("unidentified incompatible feature")) || bytes.Contains(out, []byte("unsupported algorithm")) ||
		bytes.Contains(out, []byte("unknown compression format")) {
		return "fsck.erofs 1.5 does not know a feature of the image: " + firstLine(out)
	}
	t.Errorf("fsck.erofs %s %s: %v\n%s", strings.Join(args, " "), img, err, Shorten(out))
	return ""
}

func firstLine(b []byte) string {
	s := strings.TrimSpace(string(b))
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return s
}
