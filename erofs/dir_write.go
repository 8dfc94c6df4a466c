package erofs

import (
	"slices"
	"strings"
)

// sortedDirents returns the entries of directory n, whose parent is
// parent, in the on-disk order: bytewise by name, "." and ".." sorted like
// any other name. They are n's own list, sorted in place.
func sortedDirents(n, parent *node) []*node {
	ents := append(n.dir.entries(), &node{name: ".", ino: n.ino}, &node{name: "..", ino: parent.ino})
	slices.SortFunc(ents, func(a, b *node) int { return strings.Compare(a.name, b.name) })
	return ents
}

// dirSize is i_size of a directory: entries are packed block by block, an
// entry (dirent + name) never crossing into the next block.
func dirSize(ents []*node, bs int) uint64 {
	var pos uint64
	for i := range ents {
		l := uint64(DirentSize + len(ents[i].name))
		if pos%uint64(bs)+l > uint64(bs) {
			pos = (pos + uint64(bs) - 1) &^ (uint64(bs) - 1)
		}
		pos += l
	}
	return pos
}

// encodeDirBlocks calls emit for each directory block in order; every block
// but the last is bs bytes (zero-padded), the last ends at i_size.
func encodeDirBlocks(ents []*node, bs int, buf []byte, emit func([]byte) error) error {
	for len(ents) > 0 {
		// Take as many entries as fit this block.
		n, used := 0, 0
		for n < len(ents) && used+DirentSize+len(ents[n].name) <= bs {
			used += DirentSize + len(ents[n].name)
			n++
		}
		blk := buf[:bs]
		clear(blk)
		nameoff := n * DirentSize
		for i := 0; i < n; i++ {
			d := blk[i*DirentSize:]
			le.PutUint64(d[0:], ents[i].ino.nid())
			le.PutUint16(d[8:], uint16(nameoff))
			d[10] = fileTypeOf(uint32(ents[i].ino.mode))
			nameoff += copy(blk[nameoff:], ents[i].name)
		}
		ents = ents[n:]
		if len(ents) == 0 {
			blk = blk[:used]
		}
		if err := emit(blk); err != nil {
			return err
		}
	}
	return nil
}
