package erofs

import (
	"hash/maphash"
	"slices"
)

// dirIndex holds a directory's entries while the tree is built, in the
// order they came. Past a few entries an open-addressing table of their
// positions finds a name: 8 to 16 bytes an entry, a fraction of a Go
// map's, and a layer has one entry per file. Entries are replaced in
// place; a removed one (Builder.Remove, rare) leaves a nil in the list,
// so that the table's positions hold, until the list is compacted. Finish
// sorts the list into the directory's dirents.
type dirIndex struct {
	list  []*node
	table []uint32 // 1 + position in list; 0 is a free slot
	dead  int      // nils in list
}

// dirIndexLinear is the most entries searched one by one, without a table.
const dirIndexLinear = 8

var dirIndexSeed = maphash.MakeSeed()

// get returns the entry named name, or nil.
func (d *dirIndex) get(name string) *node {
	if d.table == nil {
		for _, n := range d.list {
			if n != nil && n.name == name {
				return n
			}
		}
		return nil
	}
	if _, i := d.slot(name); i >= 0 {
		return d.list[i]
	}
	return nil
}

// slot finds name in the table: its slot and its position in the list (-1
// if missing: then h is the free slot that ends the probe).
func (d *dirIndex) slot(name string) (h uint64, i int) {
	mask := uint64(len(d.table) - 1)
	for h = maphash.String(dirIndexSeed, name) & mask; d.table[h] != 0; h = (h + 1) & mask {
		if n := d.list[d.table[h]-1]; n != nil && n.name == name {
			return h, int(d.table[h] - 1)
		}
	}
	return h, -1
}

// put adds n, or puts it in the place of the entry with its name, which
// it returns.
func (d *dirIndex) put(n *node) (old *node) {
	if d.table == nil {
		for i, o := range d.list {
			if o != nil && o.name == n.name {
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
	h, i := d.slot(n.name)
	if i >= 0 {
		old, d.list[i] = d.list[i], n
		return old
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

// remove takes the entry named name out, keeping the order of the others,
// and returns it (nil if there was none).
func (d *dirIndex) remove(name string) *node {
	if d.table == nil {
		for i, n := range d.list {
			if n != nil && n.name == name {
				d.list = slices.Delete(d.list, i, i+1)
				return n
			}
		}
		return nil
	}
	_, i := d.slot(name)
	if i < 0 {
		return nil
	}
	n := d.list[i]
	d.list[i] = nil // its slot still leads the probes past it
	if d.dead++; 2*d.dead > len(d.list) {
		d.rehash(len(d.table))
	}
	return n
}

// entries returns the list without removed entries.
func (d *dirIndex) entries() []*node {
	if d.dead > 0 {
		d.rehash(len(d.table))
	}
	return d.list
}

// rehash makes a table of size slots (a power of two) for the list, which
// it compacts first.
func (d *dirIndex) rehash(size int) {
	if d.dead > 0 {
		d.list = slices.DeleteFunc(d.list, func(n *node) bool { return n == nil })
		d.dead = 0
	}
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
