package erofs

import (
	"slices"
	"strings"
)

// dirent is one directory entry as laid out: "." and ".." included.
type dirent struct {
	name   string
	target *node
}

// sortedDirents returns n's entries in the on-disk order: bytewise by name,
// "." and ".." sorted like any other name.
func sortedDirents(n *node) []dirent {
	parent := n.parent
	if parent == nil {
		parent = n
	}
	ents := make([]dirent, 0, len(n.children)+2)
	ents = append(ents, dirent{".", n}, dirent{"..", parent})
	for name, c := range n.children {
		ents = append(ents, dirent{name, c})
	}
	slices.SortFunc(ents, func(a, b dirent) int { return strings.Compare(a.name, b.name) })
	return ents
}

// dirSize is i_size of a directory: entries are packed block by block, an
// entry (dirent + name) never crossing into the next block.
func dirSize(ents []dirent, bs int) uint64 {
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
func encodeDirBlocks(ents []dirent, bs int, buf []byte, emit func([]byte) error) error {
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
			le.PutUint64(d[0:], ents[i].target.ino.nid())
			le.PutUint16(d[8:], uint16(nameoff))
			d[10] = fileTypeOf(ents[i].target.ino.mode)
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
