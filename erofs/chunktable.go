package erofs

import "encoding/binary"

// chunkTable maps the SHA-256 of every distinct chunk to where it is
// stored, in 32 bytes an entry plus a 4-byte index slot: a Go map with
// the whole hash as key costs about twice that. Entries live in slabs
// that never move (no doubling copies); the index is open addressing
// with linear probing, kept at most 3/4 full.
//
// An entry keeps 26 of the hash's 32 bytes: 208 bits, so that finding
// two chunks that collide still takes about 2^104 work.
type chunkTable struct {
	slabs [][]chunkEntry
	n     int
	index []uint32 // entry number + 1; 0 is empty
}

type chunkEntry struct {
	sum [26]byte
	dev uint16
	blk uint32
}

const chunkSlab = 4096 // entries per slab (128 KiB)

func (t *chunkTable) entry(i uint32) *chunkEntry {
	return &t.slabs[i/chunkSlab][i%chunkSlab]
}

// lookup returns where the chunk with hash k is stored, if it is.
func (t *chunkTable) lookup(k *chunkKey) (chunkLoc, bool) {
	if t.n == 0 {
		return chunkLoc{}, false
	}
	mask := uint64(len(t.index) - 1)
	for i := binary.LittleEndian.Uint64(k[:8]) & mask; ; i = (i + 1) & mask {
		s := t.index[i]
		if s == 0 {
			return chunkLoc{}, false
		}
		if e := t.entry(s - 1); [26]byte(k[:26]) == e.sum {
			return chunkLoc{e.dev, e.blk}, true
		}
	}
}

// add records a chunk that lookup did not find.
func (t *chunkTable) add(k *chunkKey, loc chunkLoc) {
	if 4*(t.n+1) > 3*len(t.index) {
		t.grow()
	}
	if t.n%chunkSlab == 0 {
		t.slabs = append(t.slabs, make([]chunkEntry, chunkSlab))
	}
	*t.entry(uint32(t.n)) = chunkEntry{sum: [26]byte(k[:26]), dev: loc.dev, blk: loc.blk}
	t.n++
	t.place(binary.LittleEndian.Uint64(k[:8]), uint32(t.n))
}

func (t *chunkTable) place(h uint64, slot uint32) {
	mask := uint64(len(t.index) - 1)
	i := h & mask
	for t.index[i] != 0 {
		i = (i + 1) & mask
	}
	t.index[i] = slot
}

func (t *chunkTable) grow() {
	t.index = make([]uint32, max(2*len(t.index), 1024))
	for s := 1; s <= t.n; s++ {
		e := t.entry(uint32(s - 1))
		t.place(binary.LittleEndian.Uint64(e.sum[:8]), uint32(s))
	}
}

// len is the number of distinct chunks.
func (t *chunkTable) len() int { return t.n }
