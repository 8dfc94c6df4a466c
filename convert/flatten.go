package convert

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/ocierofs/ocierofs/erofs"
	"github.com/ocierofs/ocierofs/oci"
	"github.com/ocierofs/ocierofs/oci/atomicfile"
	"github.com/ocierofs/ocierofs/whiteout"
)

// Flattening merges all layers of an image into one EROFS image, as
// overlayfs would show them stacked, without writing anything an upper
// layer hides: the layers are read from the top down, and an entry is
// added only if no layer above it has claimed its path, deleted it by
// whiteout, made a parent opaque, or put a non-directory on a parent.
//
// Directories are the exception to "first claim wins" in one way: a
// directory that an upper layer only implies (lists children of, but not
// itself) takes the metadata of the first lower layer that lists it, as
// the stacked layers show through lower.go, unless a layer in between
// deleted it or put a non-directory there (cut): then it is a new one.
//
// A hard link in a lower layer may name a target that an upper layer
// replaced; the link still holds the old content. Hidden files are
// therefore kept in a spool (a temp file, only for the layer being read)
// until the layer ends, and a link to one becomes a regular file with the
// hidden content.
//
// A hard link may also name a file of a lower layer (docker and containerd
// apply a layer's links in the tree of the layers below). Read from the
// top, such a link comes before its target: it waits (pending) until a
// lower layer gives the target, visible or hidden.

// flatNode is a path as the layers read so far (all above the current one,
// plus the current one) leave it.
type flatNode struct {
	children map[string]*flatNode
	first    int  // rank of the top-most layer that has the path (as entry or parent)
	explicit int  // rank of the layer that lists the path itself; -1: none
	nondir   bool // that listing is a non-directory
	gone     bool // that listing is a whiteout
	opaque   int  // rank of a layer whose opaque marker is on the path; -1: none
	// cut is the rank of a layer that deletes or replaces the path
	// under a directory an upper layer only implies: the lower layers'
	// directory there, contents and metadata, is gone; -1: none.
	cut int
	// whited is the rank of a layer that whites out the path; -1: none.
	whited int
}

func newFlatNode(rank int) *flatNode {
	return &flatNode{first: rank, explicit: -1, opaque: -1, cut: -1, whited: -1}
}

// flattener holds the merged view for one flatten run.
type flattener struct {
	root  *flatNode
	spool *os.File
	off   int64
	// hidden are the current layer's non-directories that upper layers
	// hide, by path, for hard links to them.
	hidden map[string]*hiddenEntry
	// hiddenLinks are the current layer's hard links that upper layers
	// hide: their targets, by path, for links to them.
	hiddenLinks map[string]hiddenLink
	// pending are the hard links of upper layers to files of lower
	// ones, by target.
	pending map[string][]*pendingLink
	// ownPending are the current layer's pending links: at its end,
	// those it took back (an entry or a whiteout at their path since)
	// are gone (endLayer).
	ownPending []*pendingLink
	// ownPendingAt is the last of them at each path.
	ownPendingAt map[string]*pendingLink
	// needed are the targets that a lower layer must give (docker
	// applied a hard link to each there, and fails without it): of
	// hidden links, and of links their layer took back (need).
	needed map[string]neededLink
	// own is the current layer's own shape, hidden or not, as applying
	// it in order leaves it.
	own ownShape
	// layers are the change sets of the layers read, by rank: stacked
	// from the bottom once all are read, they say whether docker and
	// containerd take the image (stack).
	layers []*whiteout.Layer
}

// pendingLink is a hard link waiting for a lower layer's file.
type pendingLink struct {
	entry erofs.Entry
	rank  int  // of its layer: that layer's own later entries do not give its target
	step  int  // of its layer's ownShape, that put it
	gone  bool // its layer took it back
}

// hiddenLink is a hidden hard link of the current layer.
type hiddenLink struct {
	target string
	step   int // of the layer's ownShape, that put it
}

// neededLink is a link to a target that a layer below its own must give.
type neededLink struct {
	path string
	rank int
}

type hiddenEntry struct {
	entry     erofs.Entry
	off, size int64 // of the content in the spool
	step      int   // of the layer's ownShape, that put it
	// linked are the links to it, in order: the first one still there
	// holds its content, the next ones link to that. head skips those
	// gone, which never come back.
	linked []linkedAt
	head   int
}

// linkedAt is a path a hidden entry is linked at, by the layer's step
// that put it there; 0 for an upper layer's link, which stays.
type linkedAt struct {
	path string
	step int
}

// first is the first path still linked to h; false if none.
func (f *flattener) first(h *hiddenEntry) (string, bool) {
	for ; h.head < len(h.linked); h.head++ {
		if l := h.linked[h.head]; l.step == 0 || f.own.still(l.path, l.step) {
			return l.path, true
		}
	}
	return "", false
}

func newFlattener(tmp string) (*flattener, error) {
	f, err := atomicfile.Unnamed(tmp, "flatten-spool-")
	if err != nil {
		return nil, err
	}
	return &flattener{root: newFlatNode(0), spool: f, pending: map[string][]*pendingLink{}, needed: map[string]neededLink{}}, nil
}

func (f *flattener) close() { f.spool.Close() }

// startLayer forgets the hidden entries of the previous layer: a link of
// an upper layer to one was made pending when it was read.
func (f *flattener) startLayer() {
	f.hidden = map[string]*hiddenEntry{}
	f.hiddenLinks = map[string]hiddenLink{}
	f.ownPending, f.ownPendingAt = nil, map[string]*pendingLink{}
	f.own = ownShape{nondir: map[string]int{}, dir: map[string]int{}, gone: map[string]int{}, opaque: map[string]bool{}}
	f.off = 0
}

// ownShape follows where the layer being read has a file, symlink or
// other non-directory, and a directory, as applying its entries in order
// leaves them. Docker and containerd fail at an entry below one of its
// non-directories, and at a hard link to a file the layer removed or to
// a directory, as do the stacked conversion (its builder) and
// fstree.Stack; the flattener must find it itself, as the builder never
// sees an entry an upper layer hides, and a link to a lower layer's file
// waits for that layer.
//
// Removals are not carried down the tree: a whiteout at p, or a
// non-directory there, removes what the layer had below p at that step,
// and a non-directory below p counts only if it came after every removal
// above it.
type ownShape struct {
	step   int
	nondir map[string]int // path → the step that put a non-directory there
	// dir: path → the last step that put a directory there, or an
	// entry, whiteout or opaque marker below it (which makes it one).
	dir  map[string]int
	gone map[string]int // path → the last step that removed what was below it
	// opaque are the directories the layer put an opaque marker on:
	// what the layers below have in them is gone for the layer's links.
	opaque map[string]bool
}

// under reports the non-directory of the layer at a parent of p, or at p
// too with self (an opaque marker's directory).
func (s *ownShape) under(p string, self bool) (string, bool) {
	if len(s.nondir) == 0 {
		return "", false
	}
	removed := 0
	for i := 0; i <= len(p); i++ {
		if i < len(p) && p[i] != '/' || i == len(p) && !self {
			continue
		}
		q := p[:i]
		t, ok := s.nondir[q]
		if ok && t > removed {
			return q, true
		}
		removed = max(removed, t, s.gone[q])
	}
	return "", false
}

// removed is the last step that removed what the layers below have at p:
// a whiteout at p or above it, a non-directory above it; 0 if none.
func (s *ownShape) removed(p string) int {
	last := s.gone[p]
	for i := 0; i < len(p); i++ {
		if p[i] == '/' {
			last = max(last, s.gone[p[:i]], s.nondir[p[:i]])
		}
	}
	return last
}

// next records a step of the layer at p, which makes the directories
// above p (and p itself, with self) the layer's.
func (s *ownShape) next(p string, self bool) {
	s.step++
	for i := 0; i < len(p); i++ {
		if p[i] == '/' {
			s.dir[p[:i]] = s.step
		}
	}
	if self {
		s.dir[p] = s.step
	}
}

// put records the layer's entry at p.
func (s *ownShape) put(p string, isDir bool) {
	s.next(p, isDir)
	if isDir {
		// A directory replaces the layer's non-directory there; what
		// was below it before that stays removed.
		if t, ok := s.nondir[p]; ok {
			s.gone[p] = max(s.gone[p], t)
			delete(s.nondir, p)
		}
		return
	}
	s.nondir[p] = s.step
}

// remove records the layer's whiteout of p.
func (s *ownShape) remove(p string) {
	s.next(p, false)
	s.gone[p] = s.step
	delete(s.nondir, p)
}

// hasFile reports whether the layer's last word on p is a non-directory
// (a hidden one, too).
func (s *ownShape) hasFile(p string) bool { return s.still(p, s.nondir[p]) }

// still reports whether the non-directory the layer put at p at step is
// still there: not replaced, removed, or below a removal since.
func (s *ownShape) still(p string, step int) bool {
	return step > 0 && s.nondir[p] == step && step > s.removed(p)
}

// marked reports whether the layer put an opaque marker above p.
func (s *ownShape) marked(p string) bool {
	if len(s.opaque) == 0 {
		return false
	}
	if s.opaque[""] {
		return true // the root's: whiteouts of what the layers below have there
	}
	for i := 0; i < len(p); i++ {
		if p[i] == '/' && s.opaque[p[:i]] {
			return true
		}
	}
	return false
}

// isDir reports whether the layer's last word on p made it a directory.
func (s *ownShape) isDir(p string) bool {
	d := s.dir[p]
	return d > 0 && d > s.removed(p) && d > s.nondir[p]
}

// refuse is the error of an entry of the layer below one of its own
// non-directories.
func (s *ownShape) refuse(p string, self bool) error {
	if q, ok := s.under(p, self); ok {
		return fmt.Errorf("entry %q: parent %q is not a directory", p, q)
	}
	return nil
}

// refuseLink is the error of the layer's hard link at p to t, a path where
// the layer has no file of its own, so a lower layer's: docker fails where
// the layer has removed it (also by an opaque marker above it), or made it
// a directory, or put a non-directory above it.
func (s *ownShape) refuseLink(p, t string) error {
	switch q, ok := s.under(t, false); {
	case ok:
		return fmt.Errorf("entry %q: hard link to %q: %q is not a directory", p, t, q)
	case s.isDir(t):
		return fmt.Errorf("entry %q: hard link to the directory %q", p, t)
	case s.removed(t) > 0 || s.marked(t):
		return fmt.Errorf("entry %q: hard link to %q, which its layer removed", p, t)
	}
	return nil
}

// claim decides whether the layer of rank may put an entry at p (a
// directory if isDir), and records it when it may. gone marks a whiteout,
// which claims p for nothing.
func (f *flattener) claim(p string, rank int, isDir, gone bool) bool {
	n := f.root
	if p != "" && n.opaque >= 0 && n.opaque < rank {
		return false // the root is opaque above
	}
	if p != "" {
		comps := strings.Split(p, "/")
		for k, c := range comps {
			next := n.children[c]
			if next == nil {
				if n.children == nil {
					n.children = map[string]*flatNode{}
				}
				next = newFlatNode(rank)
				n.children[c] = next
			}
			n = next
			if k == len(comps)-1 {
				break
			}
			upperListed := n.explicit >= 0 && n.explicit < rank
			if upperListed && (n.nondir || n.gone) || n.opaque >= 0 && n.opaque < rank {
				return false // a parent is gone, not a directory, or opaque above
			}
		}
	}
	if n.explicit >= 0 && n.explicit < rank {
		// An upper layer lists p itself. If as a directory, a
		// non-directory or whiteout here cuts it off from what lies
		// lower (rm -rf /x in one layer, mkdir /x in a later one).
		if !isDir && !n.nondir && !n.gone && n.opaque < 0 {
			n.opaque = rank
		}
		return false
	}
	if !isDir && n.first < rank {
		// An upper layer has a directory here (that it only implies). A
		// non-directory or whiteout under it stops what lies lower from
		// merging into it, as it would in a stack of overlay layers.
		if n.opaque < 0 {
			n.opaque = rank
		}
		if n.cut < 0 {
			n.cut = rank
		}
		return false
	}
	if isDir && n.cut >= 0 && n.cut < rank {
		// A directory an upper layer deleted or replaced: the one an
		// upper layer implies there is a new one, without its metadata.
		return false
	}
	if n.explicit < 0 || n.explicit == rank {
		if gone {
			n.whited = rank
		}
		replaced := n.whited == rank || n.explicit == rank && n.nondir
		if replaced && isDir && n.opaque < 0 {
			// Deleted or replaced, and made again in one layer (also
			// with another entry between): nothing of the layers
			// below shows through it.
			n.opaque = rank
		}
		n.explicit, n.nondir, n.gone = rank, !isDir, gone
	}
	return true
}

// takeBack undoes what the layer of rank put at and below p, a directory
// an upper layer has too, when the layer then deletes or replaces p (a
// whiteout or a non-directory at p after its own entries): applied in
// order, the layer leaves nothing there, and the upper layer's directory
// holds only its own entries. It returns the paths to remove from the
// image and the directories to make implied again (their metadata was
// the layer's).
func (f *flattener) takeBack(p string, rank int) (remove, imply []string) {
	n := f.node(p)
	if n == nil {
		return nil, nil
	}
	var walk func(p string, n *flatNode)
	walk = func(p string, n *flatNode) {
		if n.explicit == rank && !n.nondir && n.first < rank {
			imply = append(imply, p)
		}
		for name, c := range n.children {
			cp := p + "/" + name
			if c.first == rank {
				remove = append(remove, cp)
				delete(n.children, name)
				continue
			}
			walk(cp, c)
		}
	}
	walk(p, n)
	// In path order: the image does not depend on it, but errors would.
	slices.Sort(remove)
	slices.Sort(imply)
	return remove, imply
}

// lastWhiteout reports whether the layer of rank, which whited out p,
// has not put anything there since (a hidden entry, or one it claimed).
func (f *flattener) lastWhiteout(p string, rank int) bool {
	if f.own.hasFile(p) || f.own.isDir(p) {
		return false // a file, hidden too, or a directory (an entry below p) since
	}
	n := f.node(p)
	return n == nil || n.explicit != rank || n.gone
}

// listed is the rank of the layer that lists p itself; -1 for none so far.
func (f *flattener) listed(p string) int {
	if n := f.node(p); n != nil {
		return n.explicit
	}
	return -1
}

// hiddenAt is the layer's hidden entry at p, while the layer still has it
// there (it may since have removed or replaced it).
func (f *flattener) hiddenAt(p string) *hiddenEntry {
	if h := f.hidden[p]; h != nil && f.own.still(p, h.step) {
		return h
	}
	return nil
}

// hiddenLinkAt is the target of the layer's hidden hard link at p, while
// the layer still has it there.
func (f *flattener) hiddenLinkAt(p string) (string, bool) {
	l, ok := f.hiddenLinks[p]
	return l.target, ok && f.own.still(p, l.step)
}

// node is the node of the path p (not the root), or nil.
func (f *flattener) node(p string) *flatNode {
	n := f.root
	for c := range strings.SplitSeq(p, "/") {
		if n = n.children[c]; n == nil {
			return nil
		}
	}
	return n
}

// unresolved is the error of hard links whose target no layer has.
func (f *flattener) unresolved() error {
	var first *erofs.Entry
	for _, links := range f.pending {
		for _, pl := range links {
			if !pl.gone && (first == nil || pl.entry.Path < first.Path) {
				first = &pl.entry
			}
		}
	}
	for target, link := range f.needed {
		if first == nil || link.path < first.Path {
			first = &erofs.Entry{Path: link.path, HardLink: target}
		}
	}
	if first == nil {
		return nil
	}
	return fmt.Errorf("entry %q: hard link to %q, which no layer has", first.Path, first.HardLink)
}

// markOpaque records the opaque marker of the layer of rank on dir; it
// reports false when dir is hidden from that layer.
func (f *flattener) markOpaque(dir string, rank int) bool {
	n := f.root
	if dir != "" && n.opaque >= 0 && n.opaque < rank {
		return false
	}
	for _, c := range strings.Split(dir, "/") {
		if dir == "" {
			break
		}
		next := n.children[c]
		if next == nil {
			if n.children == nil {
				n.children = map[string]*flatNode{}
			}
			next = newFlatNode(rank)
			n.children[c] = next
		}
		upperListed := next.explicit >= 0 && next.explicit < rank
		if upperListed && (next.nondir || next.gone) || next.opaque >= 0 && next.opaque < rank {
			return false
		}
		n = next
	}
	if n.opaque < 0 {
		n.opaque = rank
	}
	return true
}

// addFlat is addEntry for a flattened image.
func (l *tarLayer) addFlat(hdr *tar.Header, p string, kind whiteout.Kind, target string, data io.Reader) error {
	f := l.flat
	switch kind {
	case whiteout.Drop:
		return nil
	case whiteout.Whiteout:
		if err := f.own.refuse(target, false); err != nil {
			return err
		}
		f.own.remove(target)
		if !f.claim(target, l.rank, false, true) {
			return l.takeBack(target)
		}
		// What the layer itself put at the path before goes too, as
		// docker, containerd and mkfs.erofs --aufs apply a whiteout
		// (the image spec would keep it).
		if err := l.b.Remove(target); err != nil {
			return err
		}
		// Its directory is there, as in the layer's own image (and
		// containerd's applier makes it), even if nothing else is in it.
		if dir := path.Dir(target); dir != "." {
			return l.b.MkdirAll(dir)
		}
		return nil
	case whiteout.Opaque:
		if err := f.own.refuse(target, true); err != nil {
			return err
		}
		f.own.next(target, true)
		f.own.opaque[target] = true
		if f.markOpaque(target, l.rank) {
			return l.b.MkdirAll(target)
		}
		return nil
	}
	e, ok, err := l.entryOf(hdr, p)
	if err != nil || !ok {
		return err // or an entry left out (a PAX global header)
	}
	if err := f.own.refuse(p, false); err != nil {
		return err
	}
	if p == "" && !e.IsDir() {
		// Also where an upper layer lists the root and hides this one.
		return errors.New("the root must be a directory")
	}
	l.entries++
	// Whether a link's target is the layer's own, before the link
	// itself counts (a link to itself is to nothing).
	ownTarget := e.HardLink != "" && f.own.hasFile(e.HardLink)
	f.own.put(p, e.IsDir())
	if !f.claim(p, l.rank, e.IsDir(), false) {
		if e.IsDir() {
			return nil
		}
		if err := l.takeBack(p); err != nil {
			return err
		}
		if e.HardLink != "" {
			// Hidden, but what links to it links to its target.
			t := e.HardLink
			r, isLink := f.hiddenLinkAt(t)
			if isLink {
				t = r // a link to a hidden link: its target
			}
			f.hiddenLinks[p] = hiddenLink{t, f.own.step}
			if !isLink && !ownTarget {
				// A lower layer's, or nobody's.
				if err := f.own.refuseLink(p, t); err != nil {
					return err
				}
				f.need(t, p, l.rank)
			}
			return l.linkPending(p, e.HardLink)
		}
		h := &hiddenEntry{entry: e, off: f.off, step: f.own.step}
		if e.Mode&erofs.S_IFMT == erofs.S_IFREG && e.Size > 0 {
			// At f.off, not at the file's position: each layer's
			// spool starts at 0 again.
			n, err := io.Copy(io.NewOffsetWriter(f.spool, f.off), data)
			if err != nil {
				return fmt.Errorf("spooling hidden content: %w", err)
			}
			h.size = n
			f.off += n
		}
		f.hidden[p] = h
		return l.linkPending(p, p)
	}
	if e.HardLink != "" {
		// What links to p from above links to p's target.
		if err := l.addLink(e, l.rank); err != nil {
			return err
		}
		return l.linkPending(p, e.HardLink)
	}
	if err := l.b.Add(e, data); err != nil {
		return err
	}
	if e.IsDir() {
		return nil
	}
	return l.linkPending(p, p)
}

// takeBack removes from the image what the layer being read put at and
// below p before, where an upper layer has a directory at p and the layer
// now deletes or replaces it (flattener.takeBack).
func (l *tarLayer) takeBack(p string) error {
	remove, imply := l.flat.takeBack(p, l.rank)
	for _, q := range remove {
		if err := l.b.Remove(q); err != nil {
			return err
		}
	}
	for _, q := range imply {
		if err := l.b.Imply(q); err != nil {
			return err
		}
	}
	return nil
}

// addLink adds the hard link e of the layer of rank (the one being read,
// or an upper one whose link waited for it), or makes it pending when its
// target is in a lower layer.
func (l *tarLayer) addLink(e erofs.Entry, rank int) error {
	f := l.flat
	viaOwn := false
	if t, ok := f.hiddenLinkAt(e.HardLink); ok {
		e.HardLink = t
	} else if pl := f.ownPendingAt[e.HardLink]; rank == l.rank && pl != nil && f.own.still(pl.entry.Path, pl.step) {
		// A link to the layer's link to a lower file: to that file,
		// which that link found there.
		e.HardLink, viaOwn = pl.entry.HardLink, true
	}
	// The layer's step that put the link; an upper layer's link stays.
	step := 0
	if rank == l.rank {
		step = f.own.step
	}
	if h := f.hiddenAt(e.HardLink); h != nil {
		first, ok := f.first(h)
		h.linked = append(h.linked, linkedAt{e.Path, step})
		if ok {
			e.HardLink = first
			return l.b.Add(e, nil)
		}
		// The first link to a hidden file takes its content.
		he := h.entry
		he.Path = e.Path
		return l.b.Add(he, io.NewSectionReader(f.spool, h.off, h.size))
	}
	if f.listed(e.HardLink) != l.rank {
		pl := &pendingLink{entry: e, rank: rank, step: step}
		if rank == l.rank {
			if err := f.own.refuseLink(e.Path, e.HardLink); err != nil && !viaOwn {
				return err
			}
			f.ownPending = append(f.ownPending, pl)
			f.ownPendingAt[e.Path] = pl
		}
		f.pending[e.HardLink] = append(f.pending[e.HardLink], pl)
		return nil
	}
	return l.b.Add(e, nil)
}

// endLayer takes back the layer's pending links that it replaced or
// removed since (an entry or a whiteout at their path, or above it).
// Docker applied each when it was read, so its target must still come
// from a lower layer (need).
func (f *flattener) endLayer() {
	for _, pl := range f.ownPending {
		if !f.own.still(pl.entry.Path, pl.step) {
			pl.gone = true
			f.need(pl.entry.HardLink, pl.entry.Path, pl.rank)
		}
	}
}

// need records that a layer below the one of rank must give t, for the
// link at p. Of several, the lowest layer's stays: a layer that gives t
// below it gives it to the upper ones too.
func (f *flattener) need(t, p string, rank int) {
	if n, ok := f.needed[t]; !ok || n.rank < rank {
		f.needed[t] = neededLink{p, rank}
	}
}

// linkPending adds the links of upper layers waiting for p, which the layer
// being read has just given: as links to target (p, or what p links to).
// The layer's own links to p wait on: made before p, they link to a lower
// layer's p, as docker applies them.
func (l *tarLayer) linkPending(p, target string) error {
	f := l.flat
	if n, ok := f.needed[p]; ok && n.rank != l.rank {
		delete(f.needed, p)
	}
	links := f.pending[p]
	if links == nil {
		return nil
	}
	delete(f.pending, p)
	var own []*pendingLink
	for _, pl := range links {
		switch {
		case pl.gone:
		case pl.rank == l.rank:
			own = append(own, pl)
		default:
			e := pl.entry
			e.HardLink = target
			if err := l.addLink(e, pl.rank); err != nil {
				return err
			}
		}
	}
	if own != nil {
		f.pending[p] = append(own, f.pending[p]...)
	}
	return nil
}

// stack lays the change sets of srcs (bottom first), read from the top,
// on one another: a stack whiteout.Tree.Apply refuses (a hard link to
// what no layer below has, there and then) is refused.
func (f *flattener) stack(srcs []layerSource) error {
	t := whiteout.NewTree()
	for i, s := range srcs {
		if err := t.Apply(f.layers[len(srcs)-1-i]); err != nil {
			return fmt.Errorf("layer %s: %w", s.desc.Digest, err)
		}
	}
	return nil
}

// flatUUID is the UUID of a flattened image: derived, like a layer's, from
// its input — the list of source diffIDs.
func flatUUID(diffIDs []v1.Hash) [16]byte {
	h := sha256.New()
	for _, d := range diffIDs {
		h.Write([]byte(d.String() + "\n"))
	}
	return LayerUUID("sha256:" + hex.EncodeToString(h.Sum(nil)))
}

// flattenLayers is the job that converts all of srcs (bottom first) into
// one EROFS layer.
func (c *Converter) flattenLayers(ctx context.Context, j *layerJob, srcs []layerSource) error {
	var digests []string
	var size int64
	for _, s := range srcs {
		if !isTarLayer(s.desc.MediaType) || isNondistributable(s.desc.MediaType) {
			return fmt.Errorf("layer %s: cannot flatten a layer of media type %s", s.desc.Digest, s.desc.MediaType)
		}
		digests = append(digests, s.desc.Digest.String())
		size += s.desc.Size
	}
	j.report = LayerReport{Source: strings.Join(digests, ","), SourceSize: size, MediaType: string(srcs[len(srcs)-1].desc.MediaType)}
	start := time.Now()
	var fl *fileLayer
	var err error
	for attempt := 1; ; attempt++ {
		fl, err = c.buildFlat(ctx, srcs)
		if err == nil || attempt == 4 || !errors.As(err, new(*downloadError)) {
			break
		}
		c.logf("flatten: a download broke (%v); starting over (%d/3)", err, attempt)
		select {
		case <-time.After(time.Duration(attempt) * 500 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if err != nil {
		return err
	}
	fl.convertSeconds = time.Since(start).Seconds()
	c.logf("flattened %d layers in %.2fs (%d → %d bytes, %d entries)", len(srcs), fl.convertSeconds, size, fl.size, fl.entries)
	return c.publish(ctx, j, fl)
}

// buildFlat writes the merged image of srcs, reading the top layer first.
func (c *Converter) buildFlat(ctx context.Context, srcs []layerSource) (_ *fileLayer, err error) {
	top := srcs[len(srcs)-1].desc.Digest
	// Images with the same top layer over different lower ones flatten
	// at once: each its own file.
	f, err := os.CreateTemp(c.tmp, fmt.Sprintf("flat-%.12s-*.erofs", top.Hex))
	if err != nil {
		return nil, err
	}
	raw := f.Name()
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			os.Remove(raw)
		}
	}()
	opt := c.opt.Layer
	opt.Erofs.TempDir = c.tmp
	if opt.Erofs.UUID == ([16]byte{}) && !opt.KeepUUID {
		var ids []v1.Hash
		for _, s := range srcs {
			ids = append(ids, s.diffID)
		}
		opt.Erofs.UUID = flatUUID(ids)
	}
	b, err := erofs.NewBuilder(f, opt.Erofs)
	if err != nil {
		return nil, err
	}
	defer b.Close()
	fla, err := newFlattener(c.tmp)
	if err != nil {
		return nil, err
	}
	defer fla.close()
	var entries int
	var warnings []string
	var read, total int64
	var digests []string
	for _, s := range srcs {
		total += s.desc.Size
		digests = append(digests, s.desc.Digest.String())
	}
	source := strings.Join(digests, ",")
	for rank := 0; rank < len(srcs); rank++ {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		s := srcs[len(srcs)-1-rank]
		tl := &tarLayer{b: b, wt: whiteout.NewTranslator(whiteout.Overlay), flat: fla, rank: rank}
		tl.progress = func(n int64) {
			c.progress(Progress{Source: source, Stage: StageConverting, Read: n, Total: total})
		}
		if err := flatLayer(ctx, tl, s, read, opt.MaxTarSize); err != nil {
			return nil, fmt.Errorf("layer %s: %w", s.desc.Digest, err)
		}
		read += s.desc.Size
		entries += tl.entries
		warnings = append(warnings, tl.warnings...)
	}
	if err := fla.stack(srcs); err != nil {
		return nil, err
	}
	if err := fla.unresolved(); err != nil {
		return nil, err
	}
	if err := b.Finish(); err != nil {
		return nil, err
	}
	return c.fileLayer(raw, top, entries, warnings)
}

// flatLayer reads one layer into a flattened image; maxTar, if positive,
// bounds its uncompressed tar (Options.MaxTarSize).
func flatLayer(ctx context.Context, tl *tarLayer, s layerSource, base, maxTar int64) error {
	rc, err := s.layer.Compressed()
	if err != nil {
		if oci.Transient(err) {
			return &downloadError{err}
		}
		return fmt.Errorf("download: %w", err)
	}
	defer rc.Close()
	in := &watchReader{r: rc, ctx: ctx, report: func(n int64) { tl.progress(base + n) }}
	broken := func(err error) error {
		if in.err != nil && in.err == ctx.Err() {
			return in.err
		}
		if in.err != nil && oci.Transient(in.err) {
			return &downloadError{fmt.Errorf("%w (stream error: %v)", err, in.err)}
		}
		return err
	}
	dec, comp, err := Decompress(in)
	if err != nil {
		return broken(err)
	}
	defer dec.Close()
	var tarStream io.Reader = dec
	if maxTar > 0 {
		tarStream = &capReader{r: dec, max: maxTar}
	}
	tl.maxTar = maxTar
	tl.flat.startLayer()
	h := sha256.New()
	if err := tl.addTar(tarStream, h, comp != Uncompressed); err != nil {
		return broken(err)
	}
	tl.flat.endLayer()
	res := &Result{DiffID: "sha256:" + hex.EncodeToString(h.Sum(nil))}
	if err := checkSource(in, res, s); err != nil {
		return broken(err)
	}
	return nil
}
