package roundtrip

import (
	"bytes"
	"fmt"
	"io"
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

// ProjectTree reads img with the project's own reader (erofs.Image).
func ProjectTree(t testing.TB, img string) *fstree.Tree {
	t.Helper()
	f, err := os.Open(img)
	Must(t, err)
	defer f.Close()
	fi, err := f.Stat()
	Must(t, err)
	im, err := erofs.Open(f, fi.Size())
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
// write yet. Two gaps are bridged here: it names the ACL xattrs with a
// trailing dot ("system.posix_acl_access."), which is undone; and it
// reads a shared xattr from one block only, so its Lstat fails on a path
// with a shared xattr longer than a block (valid EROFS: the kernel and
// mkfs.erofs have no such limit). Such paths are returned in partial and
// have only their type, size and content in the tree; any other error is
// an error.
func GoErofsTree(img string) (tr *fstree.Tree, partial []string, err error) {
	f, err := os.Open(img)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	fsys, err := goerofs.Open(f)
	if err != nil {
		return nil, nil, fmt.Errorf("Open: %w", err)
	}
	x, ok := fsys.(goErofsImage)
	if !ok {
		return nil, nil, fmt.Errorf("%T has no ReadDir, ReadLink and Lstat", fsys)
	}
	g := &goErofsFS{img: x, types: map[string]fs.FileMode{}}
	tr, err = fstree.FromFS(g)
	return tr, g.partial, err
}

type goErofsImage interface {
	fs.ReadDirFS
	fs.ReadLinkFS
}

// goErofsFS adapts go-erofs to fstree.StatFS.
type goErofsFS struct {
	img     goErofsImage
	types   map[string]fs.FileMode // from ReadDir, for partial paths
	partial []string
	fakeIno uint64
}

func (g *goErofsFS) Open(name string) (fs.File, error)    { return g.img.Open(name) }
func (g *goErofsFS) Readlink(name string) (string, error) { return g.img.ReadLink(name) }

func (g *goErofsFS) ReadDir(name string) ([]fs.DirEntry, error) {
	ents, err := g.img.ReadDir(name)
	for _, e := range ents {
		p := e.Name()
		if name != "." {
			p = name + "/" + p
		}
		g.types[p] = e.Type()
	}
	return ents, err
}

// longSharedXattr reports go-erofs's error for a shared xattr longer than
// a block.
func longSharedXattr(err error) bool {
	return err != nil && strings.Contains(err.Error(), "shared xattr too long")
}

func (g *goErofsFS) stat(name string) (*goerofs.Stat, error) {
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

// partialInfo is what can still be read of a path whose Lstat fails on a
// long shared xattr: the type its directory gives, and for a regular file
// the size, read through Open (which skips the xattrs). Its inode number
// is made up, unique.
func (g *goErofsFS) partialInfo(name string) (fstree.Info, error) {
	g.partial = append(g.partial, name)
	g.fakeIno++
	mode, err := unixMode(g.types[name])
	if err != nil {
		return fstree.Info{}, err
	}
	info := fstree.Info{Mode: mode, Ino: 1<<63 | g.fakeIno}
	if mode&unix.S_IFMT == unix.S_IFREG {
		f, err := g.img.Open(name)
		if err != nil {
			return fstree.Info{}, err
		}
		defer f.Close()
		if info.Size, err = io.Copy(io.Discard, f); err != nil {
			return fstree.Info{}, err
		}
	}
	return info, nil
}

func (g *goErofsFS) Lstat(name string) (fstree.Info, error) {
	st, err := g.stat(name)
	if longSharedXattr(err) {
		return g.partialInfo(name)
	}
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

func (g *goErofsFS) Xattrs(name string) ([]fstree.Xattr, error) {
	st, err := g.stat(name)
	if longSharedXattr(err) {
		return nil, nil // a partial path, recorded by Lstat
	}
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
// cannot judge this image: it is not installed, or the image has a block
// size erofs-utils 1.5 was not built for (it says so).
func Fsck(t testing.TB, img string, blockSize int, args ...string) (skip string) {
	t.Helper()
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
