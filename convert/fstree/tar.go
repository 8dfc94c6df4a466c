package fstree

import (
	"archive/tar"
	"crypto/sha256"
	"fmt"
	"io"
	"maps"
	"time"

	"github.com/ocierofs/ocierofs/erofs"
	"github.com/ocierofs/ocierofs/whiteout"
)

// TarOptions tells FromTar how to read a layer.
type TarOptions struct {
	// Whiteouts is how the layer reads them: whiteout.Overlay (the
	// default) turns OCI whiteouts into their overlayfs form,
	// whiteout.Keep takes the tar literally.
	Whiteouts whiteout.Mode
	// ImpliedDirMtime is the mtime of directories no entry declared.
	ImpliedDirMtime time.Time
}

// FromTar returns the tree that an uncompressed tar stream describes, as a
// converter is expected to lay it out: the layer's overlay form over no
// layers (whiteout.Layer.Overlay, which decides how entries replace,
// delete and imply one another), with
//
//   - Names as whiteout.Clean makes them; a bad one is an error.
//   - Parents never declared implied: mode 040755, uid and gid 0, mtime
//     ImpliedDirMtime, Implied set.
//   - Xattrs from PAX records, as whiteout.Xattrs reads them. Names EROFS
//     cannot store (other namespaces, over 255 bytes) are left out, as
//     converters leave them out, and, with overlay whiteouts, the tar's
//     own trusted.overlay.*.
//   - With overlay whiteouts, a whiteout a character device 0:0: of no
//     permission bits and the .wh. entry's uid, gid and mtime (no xattrs),
//     as mkfs.erofs and containerd's and docker's appliers make it
//     (mknod(erofs.S_IFCHR, 0)), or as the tar has the device 0:0; an opaque
//     directory trusted.overlay.opaque=y, and a directory that holds a
//     whiteout an empty trusted.overlay.origin.
func FromTar(r io.Reader, opt TarOptions) (*Tree, error) {
	nodes := make(map[*tar.Header]*Node)
	l, err := readLayer(r, make([]byte, 128<<10), opt.Whiteouts, nodes)
	if err != nil {
		return nil, err
	}
	ov, err := l.Overlay(nil)
	if err != nil {
		return nil, fmt.Errorf("fstree: %w", err)
	}
	return treeOf(ov, nodes, opt.ImpliedDirMtime), nil
}

// readLayer reads a tar stream into a whiteout.Layer, and the node of
// each header into nodes (a file's size and digest read once).
func readLayer(r io.Reader, buf []byte, mode whiteout.Mode, nodes map[*tar.Header]*Node) (*whiteout.Layer, error) {
	l := whiteout.NewLayer(mode)
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return l, nil
		}
		if err != nil {
			return nil, fmt.Errorf("fstree: tar: %w", err)
		}
		n, err := nodeOf(hdr, tr, buf, mode)
		if err != nil {
			return nil, fmt.Errorf("fstree: tar entry %q: %w", hdr.Name, err)
		}
		nodes[hdr] = n
		if err := l.Add(hdr); err != nil {
			return nil, fmt.Errorf("fstree: %w", err)
		}
	}
}

// nodeOf is the node a tar header makes, but for its path.
func nodeOf(hdr *tar.Header, data io.Reader, buf []byte, mode whiteout.Mode) (*Node, error) {
	if hdr.Uid < 0 || int64(hdr.Uid) > 1<<32-1 || hdr.Gid < 0 || int64(hdr.Gid) > 1<<32-1 {
		return nil, fmt.Errorf("uid/gid %d/%d out of range", hdr.Uid, hdr.Gid)
	}
	n := &Node{Mtime: hdr.ModTime, Uid: uint32(hdr.Uid), Gid: uint32(hdr.Gid)}
	perm := uint32(hdr.Mode) & permMask
	var err error
	switch hdr.Typeflag {
	case tar.TypeReg, tar.TypeGNUSparse, tar.TypeCont:
		// The tar reader expands sparse files: the hash covers the holes.
		n.Mode = erofs.S_IFREG | perm
		h := sha256.New()
		if n.Size, err = io.CopyBuffer(h, data, buf); err != nil {
			return nil, fmt.Errorf("read data: %w", err)
		}
		h.Sum(n.Digest[:0])
	case tar.TypeDir:
		n.Mode = erofs.S_IFDIR | perm
	case tar.TypeSymlink:
		n.Mode = erofs.S_IFLNK | perm
		n.Target = hdr.Linkname
	case tar.TypeChar, tar.TypeBlock:
		n.Mode = erofs.S_IFCHR | perm
		if hdr.Typeflag == tar.TypeBlock {
			n.Mode = erofs.S_IFBLK | perm
		}
		if hdr.Devmajor < 0 || hdr.Devmajor > 1<<32-1 || hdr.Devminor < 0 || hdr.Devminor > 1<<32-1 {
			return nil, fmt.Errorf("device %d:%d out of range", hdr.Devmajor, hdr.Devminor)
		}
		n.Devmajor, n.Devminor = uint32(hdr.Devmajor), uint32(hdr.Devminor)
	case tar.TypeFifo:
		n.Mode = erofs.S_IFIFO | perm
	case tar.TypeLink, tar.TypeXGlobalHeader, 'V':
		// A link has its target's node; PAX global records and a GNU
		// volume label are no file (whiteout.Layer.Add skips them).
		return n, nil
	default:
		return nil, fmt.Errorf("unsupported entry type %q", hdr.Typeflag)
	}
	if n.Xattrs, err = tarXattrs(hdr, mode); err != nil {
		return nil, err
	}
	return n, nil
}

// treeOf is the Tree of wt, whose headers have their nodes in nodes.
func treeOf(wt *whiteout.Tree, nodes map[*tar.Header]*Node, implied time.Time) *Tree {
	t := newTree()
	wt.Walk(func(p string, w *whiteout.Node) error {
		var n Node
		switch h := w.Hdr; {
		case h == nil:
			n = Node{Mode: erofs.S_IFDIR | 0o755, Mtime: implied, Implied: true}
		case w.Named():
			// A whiteout of a .wh. entry: a marker, its xattrs left out.
			n = Node{Mode: erofs.S_IFCHR, Mtime: h.ModTime, Uid: uint32(h.Uid), Gid: uint32(h.Gid)}
		default:
			n = *nodes[h]
			n.Xattrs = maps.Clone(n.Xattrs)
		}
		n.Path = p
		if w.Opaque {
			n.setXattr(whiteout.OpaqueXattr, "y")
		}
		if w.Origin {
			n.setXattr(whiteout.OriginXattr, "")
		}
		if !w.IsDir() && w.Hdr != nil {
			t.inode(w.Hdr, &n)
		}
		t.nodes[p] = &n
		return nil
	})
	return t
}

// tarXattrs are the xattrs of hdr (whiteout.Xattrs) but those EROFS
// cannot store (erofs.CheckXattrName: a converter leaves them out) and,
// with overlay whiteouts, overlayfs's own (trusted.overlay.*), which
// converters leave out too.
func tarXattrs(hdr *tar.Header, mode whiteout.Mode) (map[string]string, error) {
	xs, err := whiteout.Xattrs(hdr)
	maps.DeleteFunc(xs, func(k, _ string) bool { return erofs.CheckXattrName(k) != nil || !mode.KeepXattr(k) })
	return xs, err
}
