package main

import (
	"crypto/sha256"
	"encoding/binary"
	"sort"

	"github.com/ocierofs/ocierofs/erofs"
)

// stats is what inspect counts in an image's tree (imageStats).
type stats struct {
	inodes, compact int
	byType          map[string]int
	byLayout        map[string]int
	fileBytes       int64
	dataBlockBytes  int64 // regular-file bytes that sit in data blocks
	inlineBytes     int64
	zFiles          int
	sharedFiles     int   // files whose data is another file's
	sharedBytes     int64 // their size
	zBytes, zStored int64 // compressed files: their size, their pcluster bytes
	// Chunk-based files: chunk references, the distinct chunks they point
	// to, the bytes of the references to a chunk already counted (stored
	// once, used again), holes; and the bytes on extra devices.
	chunkRefs, chunks      int
	chunkShared, holeBytes int64
	extra                  map[uint16]int64 // by device
	// Compressed extents that use a pcluster an earlier extent uses
	// (extent dedupe), and their bytes.
	zShared      int
	zSharedBytes int64
}

var layoutNames = map[uint8]string{
	erofs.LayoutFlatPlain:         "flat_plain",
	erofs.LayoutCompressedFull:    "compressed_full",
	erofs.LayoutFlatInline:        "flat_inline",
	erofs.LayoutCompressedCompact: "compressed_compact",
	erofs.LayoutChunkBased:        "chunk_based",
}

func typeName(mode uint32) string {
	switch mode & erofs.S_IFMT {
	case erofs.S_IFREG:
		return "regular"
	case erofs.S_IFDIR:
		return "directory"
	case erofs.S_IFLNK:
		return "symlink"
	case erofs.S_IFCHR:
		return "char device"
	case erofs.S_IFBLK:
		return "block device"
	case erofs.S_IFIFO:
		return "fifo"
	case erofs.S_IFSOCK:
		return "socket"
	}
	return "unknown"
}

// imageStats walks the whole tree once, counting each inode once.
func imageStats(img *erofs.Image) (*stats, error) {
	w := &statWalk{
		img: img, bs: int64(img.Super().BlockSize), seen: map[uint64]bool{}, data: map[dataKey]bool{},
		chunks: map[chunkKey]bool{}, pclusters: map[int64]bool{},
		st: &stats{byType: map[string]int{}, byLayout: map[string]int{}, extra: map[uint16]int64{}},
	}
	err := img.Walk(".", w.inode)
	w.sharedWithFlat()
	return w.st, err
}

// dataKey is where a regular file's data is: files with the same key are
// copies of one another (file dedupe).
type dataKey struct {
	addr, size int64
	frag       bool
	extents    [32]byte // compressed: the SHA-256 of its extent map
}

// chunkKey is a chunk of a chunk-based file.
type chunkKey struct {
	dev uint16
	blk uint32
}

// statWalk is the state of imageStats's walk: what it has counted, so
// that shared inodes, data, chunks and pclusters are counted once.
type statWalk struct {
	img    *erofs.Image
	bs     int64
	st     *stats
	seen   map[uint64]bool // by nid
	data   map[dataKey]bool
	chunks map[chunkKey]bool
	// Extent dedupe: a compressed extent shares when its pcluster is one
	// an earlier extent uses, or blocks of a flat file.
	pclusters map[int64]bool
	flat      [][2]int64     // [start, end) of flat files' blocks
	zexts     []erofs.Extent // first users of their pcluster
}

// inode counts one inode of the walk, and its data if it is a regular
// file.
func (w *statWalk) inode(_ string, ino *erofs.Inode) error {
	st := w.st
	if w.seen[ino.Nid] {
		return nil
	}
	w.seen[ino.Nid] = true
	st.inodes++
	if ino.Compact {
		st.compact++
	}
	st.byType[typeName(ino.Mode)]++
	st.byLayout[layoutNames[ino.Layout]]++
	if ino.Mode&erofs.S_IFMT != erofs.S_IFREG {
		return nil
	}
	st.fileBytes += ino.Size
	var xs []erofs.Extent
	if z := ino.Layout == erofs.LayoutCompressedFull || ino.Layout == erofs.LayoutCompressedCompact; z {
		if err := w.img.Extents(ino, func(x erofs.Extent) error { xs = append(xs, x); return nil }); err != nil {
			return err
		}
	}
	if w.isCopy(ino, xs) {
		st.sharedFiles++
		st.sharedBytes += ino.Size
		return nil // its blocks are counted once
	}
	switch ino.Layout {
	case erofs.LayoutFlatInline:
		w.flatInline(ino)
	case erofs.LayoutFlatPlain:
		return w.flatPlain(ino)
	case erofs.LayoutCompressedFull, erofs.LayoutCompressedCompact:
		w.compressed(ino, xs)
	case erofs.LayoutChunkBased:
		return w.chunkBased(ino)
	}
	return nil
}

// isCopy reports whether a regular file's data is that of a file counted
// before, and remembers it otherwise. With extent dedupe, files may share
// their first pcluster and no more: a compressed file (of extents xs) is
// another's copy only if every extent is the same (but where its inline
// tail is).
func (w *statWalk) isCopy(ino *erofs.Inode, xs []erofs.Extent) bool {
	addr, frag, ok := w.img.DataAddress(ino)
	if !ok {
		return false
	}
	k := dataKey{addr: addr, size: ino.Size, frag: frag}
	if xs != nil {
		h := sha256.New()
		for _, x := range xs {
			if x.Physical%w.bs != 0 || x.PhysLen%w.bs != 0 {
				// An inline tail: each copy has its own, after its
				// inode, as a flat file's tail.
				x.Physical = 0
			}
			binary.Write(h, binary.LittleEndian, x)
		}
		h.Sum(k.extents[:0])
	}
	if w.data[k] {
		return true
	}
	w.data[k] = true
	return false
}

// flatInline counts a file whose tail is inline after its inode.
func (w *statWalk) flatInline(ino *erofs.Inode) {
	st, bs := w.st, w.bs
	st.dataBlockBytes += ino.Size / bs * bs
	st.inlineBytes += ino.Size % bs
	if start := int64(ino.StartBlock()) * bs; ino.Size >= bs {
		w.flat = append(w.flat, [2]int64{start, start + ino.Size/bs*bs})
	}
}

// flatPlain counts a file in whole blocks, unless it is all a hole.
func (w *statWalk) flatPlain(ino *erofs.Inode) error {
	bs := w.bs
	if next, err := w.img.NextData(ino, 0); err != nil || next == ino.Size {
		return err // a file of one hole: no blocks
	}
	w.st.dataBlockBytes += (ino.Size + bs - 1) / bs * bs
	start := int64(ino.StartBlock()) * bs
	w.flat = append(w.flat, [2]int64{start, start + (ino.Size+bs-1)/bs*bs})
	return nil
}

// compressed counts a compressed file of extents xs, and the extents that
// use a pcluster an earlier one uses.
func (w *statWalk) compressed(ino *erofs.Inode, xs []erofs.Extent) {
	st := w.st
	blocks := int64(ino.CompressedBlocks())
	st.zFiles++
	st.zBytes += ino.Size
	st.zStored += blocks * w.bs
	st.dataBlockBytes += blocks * w.bs
	for _, x := range xs {
		switch {
		case x.Physical == 0:
		case w.pclusters[x.Physical]:
			st.zShared++
			st.zSharedBytes += x.Length
		default:
			w.pclusters[x.Physical] = true
			w.zexts = append(w.zexts, x)
		}
	}
}

// chunkBased counts a chunk-based file's chunks: holes, chunks used
// before, and new ones in the image or on an extra device.
func (w *statWalk) chunkBased(ino *erofs.Inode) error {
	st, bs := w.st, w.bs
	bits, refs, ok, err := w.img.ChunkRefs(ino)
	if err != nil || !ok {
		return err
	}
	cs := bs << bits
	for i, r := range refs {
		n := min(cs, ino.Size-int64(i)*cs)
		n = (n + bs - 1) / bs * bs
		k := chunkKey{r.Device, r.Block}
		switch {
		case r.Hole:
			st.holeBytes += n
			continue
		case w.chunks[k]:
			st.chunkShared += n
		case r.Device == 0:
			st.dataBlockBytes += n
		default:
			st.extra[r.Device] += n
		}
		st.chunkRefs++
		if !w.chunks[k] {
			st.chunks++
			w.chunks[k] = true
		}
	}
	return nil
}

// sharedWithFlat counts, once the walk is done, the compressed extents
// whose pcluster is blocks of a flat file.
func (w *statWalk) sharedWithFlat() {
	flat := w.flat
	sort.Slice(flat, func(i, j int) bool { return flat[i][0] < flat[j][0] })
	for _, x := range w.zexts {
		i := sort.Search(len(flat), func(i int) bool { return flat[i][1] > x.Physical })
		if i < len(flat) && flat[i][0] <= x.Physical {
			w.st.zShared++
			w.st.zSharedBytes += x.Length
		}
	}
}
