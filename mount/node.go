//go:build linux

package mount

import (
	"context"
	"io"
	"path"
	"sync"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/ocierofs/ocierofs/erofs"
)

// node is one inode of a layer image, as FUSE serves it: read-only, with
// the image's modes, owners, times, device numbers and xattrs (a whiteout
// is the char device 0:0 it is in the image, an opaque directory carries
// its trusted.overlay.opaque), which is what overlayfs reads in a lower
// layer.
type node struct {
	fs.Inode
	l    *layerFS
	ino  *erofs.Inode
	path string // the name it was first looked up by, for Options.Record

	once sync.Once
	ents map[string]erofs.Dirent // a directory's entries by name
	err  error
}

// layerFS is what the nodes of one layer share.
type layerFS struct {
	img *erofs.Image
	// fail reports an error of the image or its blob: every such error is
	// EIO to the reader, and the message goes to the log.
	fail func(what string, err error) syscall.Errno

	record   func(path string)
	mu       sync.Mutex
	recorded map[uint64]bool // nids whose opening was recorded
}

var (
	_ fs.NodeLookuper    = (*node)(nil)
	_ fs.NodeReaddirer   = (*node)(nil)
	_ fs.NodeGetattrer   = (*node)(nil)
	_ fs.NodeOpener      = (*node)(nil)
	_ fs.NodeReadlinker  = (*node)(nil)
	_ fs.NodeGetxattrer  = (*node)(nil)
	_ fs.NodeListxattrer = (*node)(nil)
	_ fs.NodeStatfser    = (*node)(nil)
)

// ino is the FUSE inode number of an EROFS nid: every name of a hard link
// gets the one inode.
func ino(nid uint64) uint64 { return nid + 1 }

func (n *node) entries() (map[string]erofs.Dirent, error) {
	n.once.Do(func() {
		ents, err := n.l.img.ReadDirInode(n.ino)
		if err != nil {
			n.err = err
			return
		}
		n.ents = make(map[string]erofs.Dirent, len(ents))
		for _, e := range ents {
			if e.Name != "." && e.Name != ".." {
				n.ents[e.Name] = e
			}
		}
	})
	return n.ents, n.err
}

func (n *node) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	ents, err := n.entries()
	if err != nil {
		return nil, n.l.fail("read directory", err)
	}
	e, ok := ents[name]
	if !ok {
		return nil, syscall.ENOENT
	}
	child, err := n.l.img.InodeAt(e.Nid)
	if err != nil {
		return nil, n.l.fail("read inode", err)
	}
	fillAttr(child, &out.Attr)
	c := &node{l: n.l, ino: child, path: path.Join(n.path, name)}
	return n.NewInode(ctx, c, fs.StableAttr{Mode: child.Mode & erofs.S_IFMT, Ino: ino(child.Nid)}), 0
}

func (n *node) Readdir(ctx context.Context) (fs.DirStream, syscall.Errno) {
	ents, err := n.entries()
	if err != nil {
		return nil, n.l.fail("read directory", err)
	}
	out := make([]fuse.DirEntry, 0, len(ents))
	for _, e := range ents {
		out = append(out, fuse.DirEntry{Name: e.Name, Ino: ino(e.Nid), Mode: fileTypeMode(e.FileType)})
	}
	return fs.NewListDirStream(out), 0
}

// fileTypeMode is the S_IFMT bits of a directory entry's file type.
func fileTypeMode(ft uint8) uint32 {
	switch ft {
	case erofs.FTRegFile:
		return unix.S_IFREG
	case erofs.FTDir:
		return unix.S_IFDIR
	case erofs.FTChrdev:
		return unix.S_IFCHR
	case erofs.FTBlkdev:
		return unix.S_IFBLK
	case erofs.FTFifo:
		return unix.S_IFIFO
	case erofs.FTSock:
		return unix.S_IFSOCK
	case erofs.FTSymlink:
		return unix.S_IFLNK
	}
	return 0
}

func (n *node) Getattr(ctx context.Context, f fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	fillAttr(n.ino, &out.Attr)
	return 0
}

func fillAttr(ino *erofs.Inode, a *fuse.Attr) {
	a.Ino = ino.Nid + 1
	a.Mode = ino.Mode
	a.Size = uint64(ino.Size)
	if ino.Mode&erofs.S_IFMT != erofs.S_IFREG && ino.Mode&erofs.S_IFMT != erofs.S_IFDIR && ino.Mode&erofs.S_IFMT != erofs.S_IFLNK {
		a.Size = 0
	}
	a.Blocks = (a.Size + 511) / 512
	a.Blksize = 4096
	a.Nlink = max(ino.Nlink, 1)
	a.Owner = fuse.Owner{Uid: ino.Uid, Gid: ino.Gid}
	a.Rdev = uint32(unix.Mkdev(ino.Devmajor, ino.Devminor))
	sec, nsec := uint64(ino.Mtime.Unix()), uint32(ino.Mtime.Nanosecond())
	a.Mtime, a.Mtimensec = sec, nsec
	a.Ctime, a.Ctimensec = sec, nsec
	a.Atime, a.Atimensec = sec, nsec
}

func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	if flags&(syscall.O_WRONLY|syscall.O_RDWR|syscall.O_TRUNC|syscall.O_APPEND) != 0 {
		return nil, 0, syscall.EROFS
	}
	r, err := n.l.img.DataReader(n.ino)
	if err != nil {
		return nil, 0, n.l.fail("open", err)
	}
	if n.l.record != nil {
		n.l.mu.Lock()
		first := !n.l.recorded[n.ino.Nid]
		n.l.recorded[n.ino.Nid] = true
		n.l.mu.Unlock()
		if first {
			n.l.record(n.path)
		}
	}
	// The image never changes: the page cache may keep what it read
	// across opens.
	return &handle{l: n.l, r: r}, fuse.FOPEN_KEEP_CACHE, 0
}

// handle is an open regular file.
type handle struct {
	l *layerFS
	r *io.SectionReader
}

var _ fs.FileReader = (*handle)(nil)

func (h *handle) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	n, err := h.r.ReadAt(dest, off)
	if err != nil && err != io.EOF {
		return nil, h.l.fail("read", err)
	}
	return fuse.ReadResultData(dest[:n]), 0
}

func (n *node) Readlink(ctx context.Context) ([]byte, syscall.Errno) {
	t, err := n.l.img.ReadlinkInode(n.ino)
	if err != nil {
		return nil, n.l.fail("readlink", err)
	}
	return []byte(t), 0
}

func (n *node) Getxattr(ctx context.Context, attr string, dest []byte) (uint32, syscall.Errno) {
	xs, err := n.l.img.InodeXattrs(n.ino)
	if err != nil {
		return 0, n.l.fail("read xattrs", err)
	}
	for _, x := range xs {
		if x.Name != attr {
			continue
		}
		if len(dest) < len(x.Value) {
			return uint32(len(x.Value)), syscall.ERANGE
		}
		return uint32(copy(dest, x.Value)), 0
	}
	return 0, syscall.ENODATA
}

func (n *node) Listxattr(ctx context.Context, dest []byte) (uint32, syscall.Errno) {
	xs, err := n.l.img.InodeXattrs(n.ino)
	if err != nil {
		return 0, n.l.fail("read xattrs", err)
	}
	var list []byte
	for _, x := range xs {
		list = append(append(list, x.Name...), 0)
	}
	if len(dest) < len(list) {
		return uint32(len(list)), syscall.ERANGE
	}
	return uint32(copy(dest, list)), 0
}

func (n *node) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	sb := n.l.img.Super()
	out.Bsize = uint32(sb.BlockSize)
	out.Frsize = uint32(sb.BlockSize)
	out.Blocks = sb.Blocks
	out.Files = sb.Inos
	out.NameLen = 255
	return 0
}
