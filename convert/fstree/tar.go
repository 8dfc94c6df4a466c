package fstree

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/url"
	"path"
	"strings"
	"time"

	"github.com/ocierofs/ocierofs/erofs"
)

// Whiteout modes of TarOptions.
const (
	WhiteoutsOverlay = "overlay"
	WhiteoutsKeep    = "keep"
)

// Names and xattrs of the OCI (aufs) and overlayfs whiteout forms.
const (
	whPrefix     = ".wh."
	whMetaPrefix = ".wh..wh."
	whOpaque     = ".wh..wh..opq"
	xattrOpaque  = "trusted.overlay.opaque"
	xattrOrigin  = "trusted.overlay.origin"
)

// TarOptions tells FromTar how to read a layer.
type TarOptions struct {
	// Whiteouts is "overlay" (the default when empty) to turn OCI
	// whiteouts into their overlayfs form, or "keep" to take the tar
	// literally.
	Whiteouts string
	// ImpliedDirMtime is the mtime of directories no entry declared.
	ImpliedDirMtime time.Time
}

// FromTar returns the tree that an uncompressed tar stream describes, as a
// converter is expected to lay it out:
//
//   - Names lose leading "/" and "./" and are cleaned; "" and "." are the
//     root. A name that escapes the root or holds NUL is an error.
//   - A later entry for a path replaces the earlier one. Directory over
//     directory keeps the children and takes the later metadata; any other
//     change of type drops the old subtree. A parent that is not a
//     directory is an error.
//   - Parents never declared are implied: mode 040755, uid and gid 0, mtime
//     ImpliedDirMtime, Implied set (until an entry declares them).
//   - A hard link names an earlier path (which must exist and not be a
//     directory) and joins its inode: same metadata and content.
//   - Xattrs come from PAX records SCHILY.xattr.NAME (raw value) and
//     LIBARCHIVE.xattr.NAME (URL-encoded name, base64 value); SCHILY wins.
//     Names EROFS cannot store (other namespaces, over 255 bytes) are
//     left out, as converters leave them out.
//   - With overlay whiteouts, DIR/.wh..wh..opq sets trusted.overlay.opaque=y
//     on DIR; DIR/.wh.NAME becomes a char device 0:0 DIR/NAME with no
//     permission bits, as mkfs.erofs and containerd's and docker's appliers
//     make it (mknod(S_IFCHR, 0)), and the entry's uid, gid and mtime (no
//     xattrs), replacing what the tar put there before; a char device 0:0
//     in the tar stays as it is, but is such a whiteout to overlayfs (and
//     gets its directory the origin marker too); other .wh..wh.* names are
//     dropped;
//     every directory that in the end holds such a whiteout device gets an
//     empty trusted.overlay.origin; a directory that replaces a whiteout or
//     another non-directory gets trusted.overlay.opaque=y; and the tar's own
//     trusted.overlay.* xattrs are left out. The markers are set after the
//     whole stream is read, so entry order does not matter to them.
func FromTar(r io.Reader, opt TarOptions) (*Tree, error) {
	overlay := true
	switch opt.Whiteouts {
	case "", WhiteoutsOverlay:
	case WhiteoutsKeep:
		overlay = false
	default:
		return nil, fmt.Errorf("fstree: unknown whiteout mode %q", opt.Whiteouts)
	}
	b := &tarBuilder{
		t:        newTree(),
		children: make(map[string]map[string]struct{}),
		opaque:   make(map[string]bool),
		whited:   make(map[string]bool),
		implied:  opt.ImpliedDirMtime,
		buf:      make([]byte, 128<<10),
	}
	b.put(b.impliedDir("."))

	if err := eachEntry(r, b.buf, func(hdr *tar.Header, data *fileData) error {
		return b.entry(hdr, data, overlay)
	}); err != nil {
		return nil, err
	}
	b.finish()
	return b.t, nil
}

// eachEntry calls f with each entry of the tar stream r and its content,
// read with buf; its errors name the entry.
func eachEntry(r io.Reader, buf []byte, f func(*tar.Header, *fileData) error) error {
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("fstree: tar: %w", err)
		}
		if err := f(hdr, &fileData{r: tr, buf: buf}); err != nil {
			return fmt.Errorf("fstree: tar entry %q: %w", hdr.Name, err)
		}
	}
}

type tarBuilder struct {
	t *Tree
	// children lists the names in each directory, so that replacing a
	// directory drops its subtree without a scan of the whole tree.
	children map[string]map[string]struct{}
	opaque   map[string]bool // directories with a .wh..wh..opq entry
	implied  time.Time
	buf      []byte

	// stack: the tree is layers applied in order (Stack): whiteouts
	// delete what the layers below have, and layer holds the paths the
	// current layer has put, which they never delete.
	stack bool
	layer map[string]bool
	// gone are the paths the current layer whited out and has not put
	// again (Stack), for hard links to its whiteouts.
	gone map[string]bool
	// held are the directories the current layer has a whiteout or an
	// opaque marker in (Stack): they are in its own tree, so an opaque
	// marker above keeps them as the layer's, as overlayfs shows the
	// layer's tree over the ones below.
	held map[string]bool
	// whited are the paths the layer whites out (overlay whiteouts).
	whited map[string]bool
	// lower, if set, is the stack below the layer: the directories the
	// layer implies are as lower has them (Stack.Layer), unless the
	// layer hides lower there (hideFromLower): fromLower holds them.
	lower     *Tree
	fromLower map[string]bool
	// rootMarker is the layer's opaque marker on the root, if any.
	rootMarker *tar.Header
}

// fileData is a regular file's content in the tar, read and hashed once
// for every builder that takes the entry.
type fileData struct {
	r    io.Reader
	buf  []byte
	read bool
	size int64
	sum  [32]byte
	err  error
}

func (d *fileData) get() (int64, [32]byte, error) {
	if !d.read {
		d.read = true
		h := sha256.New()
		d.size, d.err = io.CopyBuffer(h, d.r, d.buf)
		h.Sum(d.sum[:0])
	}
	return d.size, d.sum, d.err
}

// cleanName maps a tar name to a tree path.
func cleanName(name string) (string, error) {
	if strings.IndexByte(name, 0) >= 0 {
		return "", errors.New("name holds NUL")
	}
	// Clean of a rooted path would swallow a leading "..", so look for it
	// in the input first.
	if escapes(name) {
		return "", errors.New("name escapes the root")
	}
	p := path.Clean("/" + name)[1:] // also strips leading "/", "./", "//"
	if p == "" {
		return ".", nil
	}
	return p, nil
}

// escapes reports whether the relative path name (leading slashes ignored)
// climbs above its root at some point.
func escapes(name string) bool {
	depth := 0
	for _, c := range strings.Split(name, "/") {
		switch c {
		case "", ".":
		case "..":
			depth--
			if depth < 0 {
				return true
			}
		default:
			depth++
		}
	}
	return false
}

func (b *tarBuilder) impliedDir(p string) *Node {
	if l := b.lower.Node(p); l != nil && l.IsDir() && !l.Implied {
		b.fromLower[p] = true
		return &Node{Path: p, Mode: l.Mode, Uid: l.Uid, Gid: l.Gid, Mtime: l.Mtime, Xattrs: maps.Clone(l.Xattrs)}
	}
	return b.defaultDir(p)
}

// defaultDir is a directory no entry declared, as converters make it.
func (b *tarBuilder) defaultDir(p string) *Node {
	return &Node{Path: p, Mode: S_IFDIR | 0o755, Mtime: b.implied, Implied: true}
}

func (b *tarBuilder) entry(hdr *tar.Header, data *fileData, overlay bool) error {
	switch hdr.Typeflag {
	case tar.TypeXGlobalHeader, 'V':
		return nil // PAX global records, a GNU volume label: no file, as converters take them
	}
	p, err := cleanName(hdr.Name)
	if err != nil {
		return err
	}
	if overlay && p != "." {
		dir, base := parentOf(p), path.Base(p)
		switch {
		case base == whOpaque && b.stack:
			// Its parents are made first, as containerd's applier
			// makes them.
			if err := b.ensureDir(dir); err != nil {
				return err
			}
			b.held[dir] = true
			b.hideLower(dir)
			return nil
		case base == whOpaque:
			if err := b.ensureDir(dir); err != nil {
				return err
			}
			b.opaque[dir] = true
			if dir == "." && b.rootMarker == nil {
				b.rootMarker = hdr
			}
			return nil
		case strings.HasPrefix(base, whMetaPrefix):
			return nil
		case strings.HasPrefix(base, whPrefix):
			name := base[len(whPrefix):]
			if name == "" || name == "." || name == ".." {
				return fmt.Errorf("bad whiteout name %q", base)
			}
			return b.whiteout(hdr, dir, joinPath(dir, name))
		}
	}
	dev0 := false
	if overlay && p != "." && hdr.Typeflag == tar.TypeChar && hdr.Devmajor == 0 && hdr.Devminor == 0 {
		// overlayfs takes a character device 0:0 for a whiteout in
		// a layer, and in the upper directory a runtime extracts the
		// layer into: stacked, it deletes; in the layer's own tree it
		// stays as the tar has it, and the layer has whited out p.
		if b.stack {
			return b.whiteout(hdr, parentOf(p), p)
		}
		b.whited[p] = true
		dev0 = true
	}

	if hdr.Typeflag == tar.TypeLink {
		return b.hardLink(p, hdr.Linkname)
	}

	n := &Node{Path: p, Mtime: hdr.ModTime, whiteout: dev0}
	perm := uint32(hdr.Mode) & permMask
	if n.Uid, n.Gid, err = owner(hdr); err != nil {
		return err
	}
	switch hdr.Typeflag {
	case tar.TypeReg, tar.TypeGNUSparse, tar.TypeCont:
		// The tar reader expands sparse files: the hash covers the holes.
		n.Mode = S_IFREG | perm
		if n.Size, n.Digest, err = data.get(); err != nil {
			return fmt.Errorf("read data: %w", err)
		}
	case tar.TypeDir:
		n.Mode = S_IFDIR | perm
	case tar.TypeSymlink:
		n.Mode = S_IFLNK | perm
		n.Target = hdr.Linkname
	case tar.TypeChar, tar.TypeBlock:
		if hdr.Typeflag == tar.TypeChar {
			n.Mode = S_IFCHR | perm
		} else {
			n.Mode = S_IFBLK | perm
		}
		if hdr.Devmajor < 0 || hdr.Devmajor > 1<<32-1 || hdr.Devminor < 0 || hdr.Devminor > 1<<32-1 {
			return fmt.Errorf("device %d:%d out of range", hdr.Devmajor, hdr.Devminor)
		}
		n.Devmajor, n.Devminor = uint32(hdr.Devmajor), uint32(hdr.Devminor)
	case tar.TypeFifo:
		n.Mode = S_IFIFO | perm
	default:
		return fmt.Errorf("unsupported entry type %q", hdr.Typeflag)
	}
	if p == "." && !n.IsDir() {
		return errors.New("the root must be a directory")
	}
	if n.Xattrs, err = tarXattrs(hdr, overlay); err != nil {
		return err
	}
	if p != "." {
		if err := b.ensureDir(parentOf(p)); err != nil {
			return err
		}
	}
	delete(b.fromLower, p) // declared now: its own metadata
	if old := b.t.nodes[p]; overlay && !b.stack && n.IsDir() && (b.whited[p] || old != nil && !old.IsDir()) {
		// Deleted or replaced, and made again (also with another
		// entry between): nothing below shows through, as the
		// converter makes it.
		b.opaque[p] = true
	}
	b.put(n)
	return nil
}

// whiteout applies the whiteout of p (in dir), written as hdr. Stacked,
// it deletes p, also what the layer itself put there before, as docker,
// containerd and mkfs.erofs --aufs apply it (the image spec would keep
// that); in one layer's tree it is a char device 0:0 at p.
func (b *tarBuilder) whiteout(hdr *tar.Header, dir, p string) error {
	if err := b.ensureDir(dir); err != nil {
		return err
	}
	if b.stack {
		b.remove(p)
		b.gone[p] = true
		b.held[dir] = true
		return nil
	}
	b.whited[p] = true
	n := &Node{Path: p, Mode: S_IFCHR, Mtime: hdr.ModTime, whiteout: true}
	var err error
	if n.Uid, n.Gid, err = owner(hdr); err != nil {
		return err
	}
	b.put(n)
	return nil
}

func owner(hdr *tar.Header) (uid, gid uint32, err error) {
	if hdr.Uid < 0 || int64(hdr.Uid) > 1<<32-1 || hdr.Gid < 0 || int64(hdr.Gid) > 1<<32-1 {
		return 0, 0, fmt.Errorf("uid/gid %d/%d out of range", hdr.Uid, hdr.Gid)
	}
	return uint32(hdr.Uid), uint32(hdr.Gid), nil
}

// tarXattrs collects the xattrs of hdr's PAX records, but those EROFS
// cannot store (erofs.CheckXattrName: a converter leaves them out) and,
// with overlay whiteouts, overlayfs's own (trusted.overlay.*), which
// converters leave out too.
func tarXattrs(hdr *tar.Header, overlay bool) (map[string]string, error) {
	const schily, libarchive = "SCHILY.xattr.", "LIBARCHIVE.xattr."
	var xs map[string]string
	set := func(k, v string) {
		if erofs.CheckXattrName(k) != nil || overlay && strings.HasPrefix(k, "trusted.overlay.") {
			return
		}
		if xs == nil {
			xs = make(map[string]string)
		}
		xs[k] = v
	}
	for k, v := range hdr.PAXRecords {
		if !strings.HasPrefix(k, libarchive) {
			continue
		}
		name, err := url.PathUnescape(k[len(libarchive):])
		if err != nil || name == "" {
			return nil, fmt.Errorf("bad xattr record %q", k)
		}
		val, err := base64.RawStdEncoding.DecodeString(strings.TrimRight(v, "="))
		if err != nil {
			return nil, fmt.Errorf("xattr record %q: %w", k, err)
		}
		set(name, string(val))
	}
	for k, v := range hdr.PAXRecords {
		if name, ok := strings.CutPrefix(k, schily); ok && name != "" {
			set(name, v)
		}
	}
	return xs, nil
}

// ensureDir makes sure p is a directory, creating it and its parents as
// implied directories where missing.
func (b *tarBuilder) ensureDir(p string) error {
	n := b.t.nodes[p]
	if n != nil && n.whiteout {
		// Whited out, then a parent of an entry of the same layer: a
		// new directory, which hides what was below.
		b.opaque[p] = true
		b.put(b.defaultDir(p))
		return nil
	}
	if n != nil {
		if n.IsDir() {
			return nil
		}
		// A lower layer's non-directory where a layer puts a directory
		// (Stack): overlayfs shows the layer's directory.
		if !b.stack || b.layer[p] {
			return fmt.Errorf("parent %q is not a directory", p)
		}
	}
	if err := b.ensureDir(parentOf(p)); err != nil {
		return err
	}
	b.put(b.impliedDir(p))
	return nil
}

// put places n at n.Path, which must have a directory parent. What was
// there goes away, with its subtree unless both are directories.
func (b *tarBuilder) put(n *Node) {
	p := n.Path
	if old := b.t.nodes[p]; old != nil && !(old.IsDir() && n.IsDir()) {
		b.remove(p)
	}
	b.t.nodes[p] = n
	if b.stack {
		b.layer[p] = true
		delete(b.gone, p)
	}
	if p == "." {
		return
	}
	dir := parentOf(p)
	kids := b.children[dir]
	if kids == nil {
		kids = make(map[string]struct{})
		b.children[dir] = kids
	}
	kids[p] = struct{}{}
}

// hideFromLower gives the directories the layer implies with the
// metadata of lower's (fromLower) the defaults where the layer, read to
// its end, hides lower: it whites out the path or a directory above it,
// or makes a directory above it opaque (an opaque marker on the path
// itself keeps its metadata), as a converter makes them.
func (b *tarBuilder) hideFromLower() {
	for p := range b.fromLower {
		n := b.t.nodes[p]
		if n == nil || !n.IsDir() {
			continue
		}
		for q := p; ; q = parentOf(q) {
			if b.whited[q] || q != p && b.opaque[q] {
				*n = *b.defaultDir(p)
				break
			}
			if q == "." {
				break
			}
		}
	}
}

// hideLower deletes what the layers below the current one left under p,
// a directory the current layer makes opaque (Stack). The layer's own
// entries stay, and the directories that hold them, which the lower
// layers' metadata no longer reaches: those the layer did not declare
// are implied ones.
func (b *tarBuilder) hideLower(p string) {
	for kid := range b.children[p] {
		n := b.t.nodes[kid]
		switch {
		case b.layer[kid] && !n.IsDir():
		case b.layer[kid]:
			b.hideLower(kid)
		case n.IsDir() && b.holdsLayer(kid):
			*n = *b.defaultDir(kid)
			b.hideLower(kid)
		default:
			b.remove(kid)
		}
	}
}

// holdsLayer reports whether the current layer put anything below p,
// or a whiteout or opaque marker in it.
func (b *tarBuilder) holdsLayer(p string) bool {
	if b.held[p] {
		return true
	}
	for kid := range b.children[p] {
		if b.layer[kid] || b.holdsLayer(kid) {
			return true
		}
	}
	return false
}

// remove deletes p and everything below it.
func (b *tarBuilder) remove(p string) {
	for kid := range b.children[p] {
		b.remove(kid)
	}
	delete(b.children, p)
	delete(b.t.nodes, p)
	if p != "." {
		delete(b.children[parentOf(p)], p)
	}
}

// hardLink makes p another name of the inode at the tar name target.
func (b *tarBuilder) hardLink(p, target string) error {
	tp, err := cleanName(target)
	if err != nil {
		return fmt.Errorf("link target %q: %w", target, err)
	}
	t := b.t.nodes[tp]
	if t == nil && b.gone[tp] {
		// A link to the layer's whiteout (overlayfs makes them links
		// of one inode) is a whiteout too.
		return b.whiteout(nil, parentOf(p), p)
	}
	if t == nil {
		return fmt.Errorf("link target %q does not exist", target)
	}
	if t.IsDir() {
		return fmt.Errorf("link target %q is a directory", target)
	}
	if tp == p {
		return nil
	}
	if t.link == 0 {
		t.link = b.t.newLink()
	}
	n := *t
	n.Path = p
	// A link to a whiteout is a whiteout too, as overlayfs makes them
	// (links of one inode): its directory gets trusted.overlay.origin.
	if t.whiteout {
		b.whited[p] = true
	}
	if t.Xattrs != nil {
		n.Xattrs = make(map[string]string, len(t.Xattrs))
		for k, v := range t.Xattrs {
			n.Xattrs[k] = v
		}
	}
	if err := b.ensureDir(parentOf(p)); err != nil {
		return err
	}
	b.put(&n)
	return nil
}

// finish applies the whiteout xattrs to the final tree.
func (b *tarBuilder) finish() {
	set := func(dir, name, value string) {
		d := b.t.nodes[dir]
		if d == nil || !d.IsDir() {
			return // the directory was replaced after its marker
		}
		if d.Xattrs == nil {
			d.Xattrs = make(map[string]string)
		}
		d.Xattrs[name] = value
	}
	for dir := range b.opaque {
		set(dir, xattrOpaque, "y")
	}
	for p, n := range b.t.nodes {
		if n.whiteout {
			set(parentOf(p), xattrOrigin, "")
		}
	}
}
