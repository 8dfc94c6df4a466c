package erofs

import (
	"hash/maphash"
	"slices"
)

// dirIndex holds a directory's entries while the tree is built, in the
// order they came. Past a few entries an open-addressing table of their
// positions finds a name: 8 to 16 bytes an entry, where a Go map took
// about 40, and a layer has one entry per file. Entries are replaced;
// removing one (rare: Builder.Remove) rebuilds the table. Finish sorts the
// list into the directory's dirents.
type dirIndex struct {
	list  []*node
	table []uint32 // 1 + position in list; 0 is a free slot
}

// dirIndexLinear is the most entries searched one by one, without a table.
const dirIndexLinear = 8

var dirIndexSeed = maphash.MakeSeed()

// get returns the entry named name, or nil.
func (d *dirIndex) get(name string) *node {
	if d.table == nil {
		for _, n := range d.list {
			if n.name == name {
				return n
			}
		}
		return nil
	}
	mask := uint64(len(d.table) - 1)
	for h := maphash.String(dirIndexSeed, name) & mask; ; h = (h + 1) & mask {
		i := d.table[h]
		if i == 0 {
			return nil
		}
		if n := d.list[i-1]; n.name == name {
			return n
		}
	}
}

// put adds n, or puts it in the place of the entry with its name, which
// it returns.
func (d *dirIndex) put(n *node) (old *node) {
	if d.table == nil {
		for i, o := range d.list {
			if o.name == n.name {
				d.list[i] = n
				return o
			}
		}
		d.list = append(d.list, n)
		if len(d.list) > dirIndexLinear {
			d.rehash(4 * dirIndexLinear)
		}
		return nil
	}
	mask := uint64(len(d.table) - 1)
	h := maphash.String(dirIndexSeed, n.name) & mask
	for ; d.table[h] != 0; h = (h + 1) & mask {
		if i := d.table[h]; d.list[i-1].name == n.name {
			old, d.list[i-1] = d.list[i-1], n
			return old
		}
	}
	d.list = append(d.list, n)
	d.table[h] = uint32(len(d.list))
	// At most half full: a new name, the usual case, then probes about
	// two slots.
	if 2*len(d.list) > len(d.table) {
		d.rehash(2 * len(d.table))
	}
	return nil
}

// rehash makes a table of size slots (a power of two) for the list.
func (d *dirIndex) rehash(size int) {
	d.table = make([]uint32, size)
	mask := uint64(size - 1)
	for i, n := range d.list {
		h := maphash.String(dirIndexSeed, n.name) & mask
		for d.table[h] != 0 {
			h = (h + 1) & mask
		}
		d.table[h] = uint32(i + 1)
	}
}

// remove takes the entry named name out, keeping the order of the others,
// and returns it (nil if there was none).
func (d *dirIndex) remove(name string) *node {
	for i, n := range d.list {
		if n.name == name {
			d.list = slices.Delete(d.list, i, i+1)
			if d.table != nil {
				d.rehash(len(d.table))
			}
			return n
		}
	}
	return nil
}
