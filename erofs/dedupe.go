package erofs

import (
	"fmt"
)

// Whole-file dedupe: a regular file whose content equals an earlier one's
// shares its data blocks (or pclusters, inline tail and fragment) instead
// of storing them again. The content is known only once it has been read,
// so the data is written as usual and the output rewound over it when it
// turns out to be a duplicate; a file read in one piece (one compression
// segment) is never written at all.
//
// A file's key is a fast non-cryptographic hash of its content and its
// size: equal keys only make candidates, and a file shares a candidate's
// data only once their contents compared equal (dupverify.go). Colliding
// files with different contents are all kept as candidates, up to
// maxDupCandidates per key (TestDedupeCollisions).
//
// Memory: one entry (key and pointer) per distinct file.

// dupKey names a file's content within one build: the xxhash64 of its
// bytes, or of its parts' hashes for a file hashed in parts (compression
// segments, zpipe.dupOf), and its size.
type dupKey struct{ sum, size uint64 }

// maxDupCandidates bounds the files with different contents kept under
// one key, so crafted collisions cost at most that many comparisons per
// file.
const maxDupCandidates = 8

// forceDupCollisions gives every file the same key: tests set it to show
// that only the byte comparison decides (TestDedupeCollisions).
var forceDupCollisions = false

func newDupKey(sum, size uint64) dupKey {
	if forceDupCollisions {
		return dupKey{}
	}
	return dupKey{sum, size}
}

// dupOrig is the first file with some content, and the inline room its
// inode had: a later file shares its layout only if it has as much room,
// so that whatever inline tail the first one got fits it too.
type dupOrig struct {
	ino                 *inode
	inlineZ, inlineFlat int
}

// dedupes reports whether whole-file dedupe is on: the output must be
// readable (the comparison) and truncatable (the rewind).
func (b *Builder) dedupes() bool {
	return !b.opt.NoDedupe && b.trunc != nil && b.rdr != nil
}

// dupOf returns the earlier file with the key k and the content of ino,
// content, that a file with the given inline room can share, or nil;
// otherwise it records the file as the first with k if there is none yet,
// or as one more candidate if its content differs from every one's.
func (b *Builder) dupOf(k dupKey, ino *inode, inlineZ, inlineFlat int, content pieces) (*inode, error) {
	if !b.dedupes() {
		return nil, nil
	}
	if b.dups == nil {
		b.dups = map[dupKey]dupOrig{}
	}
	first, ok := b.dups[k]
	if !ok {
		b.dups[k] = dupOrig{ino, inlineZ, inlineFlat}
		return nil, nil
	}
	more := b.dupMore[k]
	differ := true
	for i := -1; i < len(more); i++ {
		o := first
		if i >= 0 {
			o = more[i]
		}
		if o.ino.size != ino.size {
			continue
		}
		same, err := sameContent(b.storedPieces(o.ino), content)
		if err != nil {
			return nil, err
		}
		if !same {
			continue
		}
		if inlineZ < o.inlineZ || inlineFlat < o.inlineFlat {
			// A copy, but with less room: stored again, and not a
			// candidate, as the first copy serves those with the room.
			differ = false
			continue
		}
		return o.ino, nil
	}
	if differ && len(more)+1 < maxDupCandidates {
		if b.dupMore == nil {
			b.dupMore = map[dupKey][]dupOrig{}
		}
		b.dupMore[k] = append(more, dupOrig{ino, inlineZ, inlineFlat})
	}
	return nil, nil
}

// chunkDupOf is dupOf for chunk-based files, whose key is made of their
// chunks' SHA-256s (chunk.go): chunk dedupe trusts those, and so does the
// file's.
func (b *Builder) chunkDupOf(k chunkKey, ino *inode, inlineFlat int) *inode {
	if !b.dedupes() {
		return nil
	}
	if b.chunkDups == nil {
		b.chunkDups = map[chunkKey]dupOrig{}
	}
	o, ok := b.chunkDups[k]
	if !ok {
		b.chunkDups[k] = dupOrig{ino, 0, inlineFlat}
		return nil
	}
	if inlineFlat < o.inlineFlat {
		return nil
	}
	return o.ino
}

// share gives ino the data of orig, whose content is the same.
func (b *Builder) share(ino, orig *inode) {
	ino.layout, ino.startBlk, ino.tail, ino.z = orig.layout, orig.startBlk, orig.tail, orig.z
	ino.setChunks(orig.chunks, orig.nchunks, orig.chunkBits)
	b.dedupedBytes += int64(ino.size)
}

// promoteTail moves the inline tail that copies of a file share into a
// block of its own once that costs less: an inline tail is written into
// every sharer's inode record, so n copies cost n tails, a block costs one
// block. A file under one block becomes FLAT_PLAIN in that block; a longer
// one becomes CHUNK_BASED in one-block chunks, its full blocks where they
// are and its tail in the new block (Linux 5.15+). dup is the newest copy.
func (b *Builder) promoteTail(orig, dup *inode) error {
	bs := uint64(b.bs)
	tail, full := orig.size&(bs-1), orig.size>>b.blkbits
	if orig.layout != LayoutFlatInline || orig.z != nil || tail == 0 {
		return nil
	}
	if full > 0 && (b.opt.MinKernel.before(kernelChunked) || full+1 > maxChunks) {
		return nil
	}
	if b.tailSharers == nil {
		b.tailSharers = map[*inode][]*inode{}
	}
	sharers := append(b.tailSharers[orig], dup)
	b.tailSharers[orig] = sharers
	if uint64(len(sharers)+1)*tail < bs || b.outBlk+1 >= 1<<32 {
		return nil
	}
	p := b.scratch[:tail]
	if err := b.spool.readAt(p, orig.tail.off()); err != nil {
		return fmt.Errorf("tail spool: %w", err)
	}
	blk := uint32(b.outBlk)
	if err := b.writePadded(p); err != nil {
		return err
	}
	orig.tail = 0
	if full == 0 || uint64(orig.startBlk)+full == uint64(blk) {
		if full == 0 {
			orig.startBlk = blk
		}
		orig.layout = LayoutFlatPlain
	} else {
		start := orig.startBlk
		orig.layout = LayoutChunkBased
		orig.setChunks(nil, full+1, 0)
		orig.addChunk(0, 0, start)
		for l := uint64(1); l < full; l++ {
			orig.addChunk(l, 0, start+uint32(l))
		}
		orig.addChunk(full, 0, blk)
		orig.widenChunks()
		b.chunked = true
	}
	for _, ino := range sharers {
		ino.layout, ino.startBlk, ino.tail = orig.layout, orig.startBlk, orig.tail
		ino.setChunks(orig.chunks, orig.nchunks, orig.chunkBits)
	}
	delete(b.tailSharers, orig)
	return nil
}

// DedupedBytes is the size of the files that share an earlier file's data.
func (b *Builder) DedupedBytes() int64 { return b.dedupedBytes }
