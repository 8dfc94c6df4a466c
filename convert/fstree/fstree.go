// Package fstree takes snapshots of filesystem trees and compares them.
//
// A Tree is what a round-trip test needs to know about a tree: for every path
// its type, mode, owner, mtime, size and content digest, symlink target,
// device number, xattrs, and which paths are hard links of one inode. Trees
// come from a directory (FromDir), from any StatFS (FromFS), from an EROFS
// image through its reader (FromImage) or, as the expected result of a
// conversion, from a tar stream (FromTar, which applies the OCI whiteout
// rules on its own, independently of the converter).
//
//	want, err := fstree.FromTar(layer, fstree.TarOptions{})
//	got, err := fstree.FromImage(img)
//	for _, d := range fstree.Diff(want, got, fstree.DiffOptions{IgnoreImpliedMtime: true}) {
//		fmt.Println(d)
//	}
package fstree

import (
	"maps"
	"path"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/ocierofs/ocierofs/erofs"
	"github.com/ocierofs/ocierofs/whiteout"
)

// permMask is the permission bits of Node.Mode; its type bits are
// erofs's S_IF* (Linux's).
const permMask = 0o7777

// Node is one path of a Tree.
type Node struct {
	// Path is "." for the root, else slash-separated without a leading
	// slash ("a/b").
	Path string
	// Mode is the full st_mode: S_IFxxx type bits and the 07777 bits.
	Mode     uint32
	Uid, Gid uint32
	// Size is the length of a regular file; 0 for every other type.
	Size  int64
	Mtime time.Time
	// Devmajor and Devminor are the device number of a char or block device.
	Devmajor, Devminor uint32
	// Target is the target of a symbolic link.
	Target string
	// Xattrs maps full names ("user.a", "trusted.overlay.opaque") to raw
	// values; nil and empty mean the same.
	Xattrs map[string]string
	// Digest is the SHA-256 of a regular file's content.
	Digest [32]byte
	// Implied marks a directory that FromTar created because no tar entry
	// declared it; its metadata is the builder's default, not the tar's.
	Implied bool

	link int // hard-link group id; 0 = none
}

// IsDir reports whether n is a directory.
func (n *Node) IsDir() bool { return n.Mode&erofs.S_IFMT == erofs.S_IFDIR }

// Type is the S_IFxxx bits of n.Mode.
func (n *Node) Type() uint32 { return n.Mode & erofs.S_IFMT }

// setXattr sets an xattr of n.
func (n *Node) setXattr(name, value string) {
	if n.Xattrs == nil {
		n.Xattrs = make(map[string]string)
	}
	n.Xattrs[name] = value
}

// Perm is the permission, setuid, setgid and sticky bits of n.Mode.
func (n *Node) Perm() uint32 { return n.Mode & permMask }

// Tree is a snapshot of a filesystem tree: nodes by path, and the hard-link
// groups among them.
type Tree struct {
	nodes    map[string]*Node
	nextLink int
	inodes   map[any]*Node // the first node of each inode key (inode)
}

func newTree() *Tree { return &Tree{nodes: make(map[string]*Node), inodes: make(map[any]*Node)} }

// Node returns the node at path ("." for the root), or nil (also of a nil
// Tree).
func (t *Tree) Node(path string) *Node {
	if t == nil {
		return nil
	}
	return t.nodes[path]
}

// Len is the number of paths in t, the root included.
func (t *Tree) Len() int { return len(t.nodes) }

// Paths returns every path of t in tree order: "." first, then paths
// compared bytewise with '/' sorting before every other byte, so that a
// directory's contents follow it directly.
func (t *Tree) Paths() []string {
	ps := slices.Collect(maps.Keys(t.nodes))
	sortPaths(ps)
	return ps
}

// MarkWhiteoutDirs gives every directory that holds an overlayfs whiteout
// (a character device 0:0) and no trusted.overlay.origin an empty one, as
// mkfs.BuildDir and mkfs.erofs do when they take such a directory (an
// overlay's upper directory) into an image. It returns how many it marked.
func (t *Tree) MarkWhiteoutDirs() int {
	n := 0
	for p, c := range t.nodes {
		if p == "." || c.Type() != erofs.S_IFCHR || c.Devmajor != 0 || c.Devminor != 0 {
			continue
		}
		d := t.nodes[path.Dir(p)]
		if _, ok := d.Xattrs[whiteout.OriginXattr]; ok {
			continue
		}
		d.setXattr(whiteout.OriginXattr, "")
		n++
	}
	return n
}

// LinkGroups returns the sets of paths that are one inode, each with at
// least two paths. Each group is in Paths order and the groups are ordered
// by their first path.
func (t *Tree) LinkGroups() [][]string {
	var ps []string
	for p, n := range t.nodes {
		if n.link != 0 {
			ps = append(ps, p)
		}
	}
	sortPaths(ps)
	return slices.DeleteFunc(t.groups(ps), func(g []string) bool { return len(g) < 2 })
}

// groups splits ps, in Paths order, into t's inodes, in the order of
// their first paths.
func (t *Tree) groups(ps []string) [][]string {
	var gs [][]string
	at := make(map[int]int) // link id → index in gs
	for _, p := range ps {
		id := t.nodes[p].link
		if i, ok := at[id]; ok && id != 0 {
			gs[i] = append(gs[i], p)
			continue
		}
		at[id] = len(gs)
		gs = append(gs, []string{p})
	}
	return gs
}

// inode records the non-directory n as a name of the inode that key
// stands for: a hard link of the node first recorded with it.
func (t *Tree) inode(key any, n *Node) {
	first := t.inodes[key]
	switch {
	case first == nil:
		t.inodes[key] = n
		return
	case first.link == 0:
		t.nextLink++
		first.link = t.nextLink
	}
	n.link = first.link
}

// pathLess orders paths as Paths documents: "." first, then name by
// name, which is bytewise with '/' before every other byte.
func pathLess(a, b string) bool {
	if a == "." || b == "." {
		return a == "." && b != "."
	}
	for {
		ca, ra, moreA := strings.Cut(a, "/")
		cb, rb, moreB := strings.Cut(b, "/")
		if ca != cb || !moreA || !moreB {
			return ca < cb || ca == cb && !moreA && moreB
		}
		a, b = ra, rb
	}
}

func sortPaths(ps []string) { sort.Slice(ps, func(i, j int) bool { return pathLess(ps[i], ps[j]) }) }
