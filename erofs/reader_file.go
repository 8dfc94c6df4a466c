package erofs

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
)

// DataReader returns a reader of the inode's data: file content, directory
// blocks or symlink target. Holes read as zeros.
func (img *Image) DataReader(ino *Inode) (*io.SectionReader, error) {
	ra, err := img.dataReader(ino)
	if err != nil {
		return nil, err
	}
	return io.NewSectionReader(ra, 0, dataSize(ino)), nil
}

// dataSize is how much data an inode has: i_size, except for devices, fifos
// and sockets, which have none whatever i_size says.
func dataSize(ino *Inode) int64 {
	switch ino.Mode & S_IFMT {
	case S_IFREG, S_IFDIR, S_IFLNK:
		return ino.Size
	}
	return 0
}

// dataReader is where each data layout gets its reader. Its ReadAt maps
// logical offsets below ino.Size only; callers bound their reads by it.
func (img *Image) dataReader(ino *Inode) (io.ReaderAt, error) {
	switch ino.Mode & S_IFMT {
	case S_IFREG, S_IFDIR, S_IFLNK:
	default:
		return zeroReader{}, nil
	}
	switch ino.Layout {
	case LayoutFlatPlain, LayoutFlatInline:
		return img.flatReader(ino)
	case LayoutChunkBased:
		return img.chunkReader(ino)
	case LayoutCompressedFull, LayoutCompressedCompact:
		if ino.Mode&S_IFMT != S_IFREG {
			return nil, fmt.Errorf("erofs: nid %d: compressed layout for a non-regular inode", ino.Nid)
		}
		return img.zReader(ino)
	}
	return nil, fmt.Errorf("erofs: nid %d: unknown data layout %d", ino.Nid, ino.Layout)
}

// zeroReader reads as zeros; callers bound it by i_size.
type zeroReader struct{}

func (zeroReader) ReadAt(p []byte, off int64) (int, error) {
	clear(p)
	return len(p), nil
}

// flatData maps a FLAT_PLAIN or FLAT_INLINE inode: bytes below split are
// contiguous from blocks (on the unified device 0 address space), the rest
// come from the inline tail on the primary device.
type flatData struct {
	img    *Image
	nid    uint64
	size   int64
	blocks int64 // byte offset of the first data block; -1 for a hole
	split  int64 // first logical byte of the inline tail (= size if none)
	tail   int64 // byte offset of the inline tail
}

func (img *Image) flatReader(ino *Inode) (*flatData, error) {
	d := &flatData{img: img, nid: ino.Nid, size: ino.Size, split: ino.Size}
	nblocks := (ino.Size + img.bs - 1) >> img.bits
	if ino.Layout == LayoutFlatInline && nblocks > 0 {
		// As the kernel does, the last block — even a full one — is inline
		// and must not cross a block boundary.
		d.split = (nblocks - 1) << img.bits
		d.tail = ino.tailOff()
		n := ino.Size - d.split
		if d.tail&(img.bs-1)+n > img.bs {
			return nil, fmt.Errorf("erofs: nid %d: inline data at %d (%d bytes) crosses a block boundary", ino.Nid, d.tail, n)
		}
		if d.tail > img.size-n {
			return nil, fmt.Errorf("erofs: nid %d: inline data at %d beyond the image end", ino.Nid, d.tail)
		}
	}
	if d.split == 0 {
		return d, nil
	}
	null := uint64(NullAddr)
	if img.info.FeatureIncompat&FeatureIncompat48Bit != 0 {
		null = nullAddr48
	}
	if ino.Layout == LayoutFlatPlain && ino.startBlk&null == null {
		// Linux 6.15+: a FLAT_PLAIN start block with every address bit
		// set is a file made of one hole.
		d.blocks = -1
		return d, nil
	}
	off, err := img.blkOff(ino.startBlk)
	if err != nil {
		return nil, fmt.Errorf("erofs: nid %d: %w", ino.Nid, err)
	}
	// Check the whole block range now so that a huge i_size fails here,
	// before anyone allocates for it.
	if _, _, err := img.mapDevice(0, off, d.split); err != nil {
		return nil, fmt.Errorf("erofs: nid %d: data blocks: %w", ino.Nid, err)
	}
	d.blocks = off
	return d, nil
}

func (d *flatData) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, errors.New("erofs: negative offset")
	}
	if off >= d.size {
		return 0, io.EOF
	}
	want := len(p)
	if int64(want) > d.size-off {
		p = p[:d.size-off]
	}
	done := 0
	if off < d.split {
		n := int(min(int64(len(p)), d.split-off))
		if d.blocks < 0 {
			clear(p[:n])
		} else if err := d.img.readDev(0, d.blocks+off, p[:n]); err != nil {
			return 0, fmt.Errorf("erofs: nid %d: %w", d.nid, err)
		}
		done, off = n, off+int64(n)
	}
	if done < len(p) {
		if err := d.img.readFull(p[done:], d.tail+off-d.split); err != nil {
			return done, fmt.Errorf("erofs: nid %d: inline data: %w", d.nid, err)
		}
		done = len(p)
	}
	if done < want {
		return done, io.EOF
	}
	return done, nil
}

// chunkData maps a CHUNK_BASED inode through its block map (4-byte block
// addresses on device 0) or chunk indexes (8 bytes, with a device id).
type chunkData struct {
	img   *Image
	nid   uint64
	size  int64
	bits  uint  // log2 of the chunk size
	table int64 // byte offset of the first table entry
	unit  int64 // 4 or 8
	count int64
	fmt   uint16
}

func (img *Image) chunkReader(ino *Inode) (*chunkData, error) {
	f := uint16(ino.rawU)
	d := &chunkData{img: img, nid: ino.Nid, size: ino.Size, fmt: f, unit: 4,
		bits: img.bits + uint(f&ChunkFormatBlkBits)}
	if f&ChunkFormatIndexes != 0 {
		d.unit = 8
	}
	d.count = ino.Size >> d.bits
	if ino.Size&(1<<d.bits-1) != 0 {
		d.count++
	}
	d.table = (ino.tailOff() + d.unit - 1) &^ (d.unit - 1)
	// count is below 2^63/2^9, so count*unit cannot overflow.
	if d.table > img.size || d.count > (img.size-d.table)/d.unit {
		return nil, fmt.Errorf("erofs: nid %d: chunk table of %d entries at %d beyond the image end", ino.Nid, d.count, d.table)
	}
	return d, nil
}

// chunk returns where chunk i lives: its device and the byte offset of its
// first block, or hole.
func (d *chunkData) chunk(i int64) (dev uint16, off int64, hole bool, err error) {
	var b [8]byte
	e := b[:d.unit]
	if err := d.img.readFull(e, d.table+i*d.unit); err != nil {
		return 0, 0, false, fmt.Errorf("erofs: nid %d: chunk %d: %w", d.nid, i, err)
	}
	var blk uint64
	if d.unit == 4 {
		blk = uint64(le.Uint32(e))
		if blk == uint64(NullAddr) {
			return 0, 0, true, nil
		}
	} else {
		blk = uint64(le.Uint32(e[4:]))
		if d.fmt&chunkFormat48Bit != 0 {
			blk |= uint64(le.Uint16(e[0:])) << 32
			if blk == nullAddr48 {
				return 0, 0, true, nil
			}
		} else if blk == uint64(NullAddr) {
			return 0, 0, true, nil
		}
		dev = le.Uint16(e[2:]) & d.img.deviceMask()
	}
	off, err = d.img.blkOff(blk)
	if err != nil {
		return 0, 0, false, fmt.Errorf("erofs: nid %d: chunk %d: %w", d.nid, i, err)
	}
	return dev, off, false, nil
}

func (d *chunkData) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, errors.New("erofs: negative offset")
	}
	if off >= d.size {
		return 0, io.EOF
	}
	want := len(p)
	if int64(want) > d.size-off {
		p = p[:d.size-off]
	}
	done := 0
	for done < len(p) {
		i := off >> d.bits
		in := off - i<<d.bits
		n := int(min(int64(len(p)-done), 1<<d.bits-in))
		dev, base, hole, err := d.chunk(i)
		if err != nil {
			return done, err
		}
		if hole {
			clear(p[done : done+n])
		} else if err := d.img.readDev(dev, base+in, p[done:done+n]); err != nil {
			return done, fmt.Errorf("erofs: nid %d: chunk %d: %w", d.nid, i, err)
		}
		done += n
		off += int64(n)
	}
	if done < want {
		return done, io.EOF
	}
	return done, nil
}

// deviceMask is the kernel's mask for chunk index device ids: the device
// count rounded up to a power of two, minus one.
func (img *Image) deviceMask() uint16 {
	n := uint32(img.info.ExtraDevices) + 1
	m := uint32(1)
	for m < n {
		m <<= 1
	}
	return uint16(m - 1)
}

// mapDevice resolves n bytes at byte offset off of device dev (a chunk
// index's device id, 0 for the primary device and its unified address space)
// to a device index and an offset on it, the way the kernel's erofs_map_dev
// does, and checks that the range lies on that device.
func (img *Image) mapDevice(dev uint16, off, n int64) (int, int64, error) {
	d := int(dev)
	switch {
	case d >= len(img.devs):
		return 0, 0, fmt.Errorf("device %d does not exist (image has %d extra)", d, len(img.devs)-1)
	case d > 0 && img.flat:
		base, err := img.blkOff(img.devs[d].UniAddr)
		if err != nil {
			return 0, 0, err
		}
		off += base
		d = 0
	case d == 0 && len(img.devs) > 1 && !img.flat:
		for i, x := range img.devs[1:] {
			if x.UniAddr == 0 {
				continue
			}
			start := int64(x.UniAddr) << img.bits
			end := start + int64(x.Blocks)<<img.bits
			if off >= start && off < end {
				d, off = i+1, off-start
				break
			}
		}
	}
	dv := &img.devs[d]
	if dv.r == nil {
		return 0, 0, fmt.Errorf("needs extra device %d (tag %q), which was not given", d, dv.Tag)
	}
	if off < 0 || off > dv.size || n > dv.size-off {
		return 0, 0, fmt.Errorf("range %d+%d beyond the end of device %d (%d bytes)", off, n, d, dv.size)
	}
	return d, off, nil
}

// readDev fills p from device dev at byte offset off.
func (img *Image) readDev(dev uint16, off int64, p []byte) error {
	d, off, err := img.mapDevice(dev, off, int64(len(p)))
	if err != nil {
		return err
	}
	return readFullAt(img.devs[d].r, p, off)
}

// NextData is lseek's SEEK_DATA for a regular file as the image stores
// it: the first offset at or after off that is not in a hole, or the
// file's size if only holes follow. Holes are what the image does not
// store: chunks without a block, a FLAT_PLAIN file that is one hole.
// Stored zeros, and any part of a compressed file, are data.
func (img *Image) NextData(ino *Inode, off int64) (int64, error) {
	if off >= ino.Size {
		return ino.Size, nil
	}
	switch ino.Layout {
	case LayoutFlatPlain:
		d, err := img.flatReader(ino)
		if err != nil {
			return 0, err
		}
		if d.blocks < 0 {
			return ino.Size, nil
		}
	case LayoutChunkBased:
		d, err := img.chunkReader(ino)
		if err != nil {
			return 0, err
		}
		for i := off >> d.bits; i < d.count; i++ {
			_, _, hole, err := d.chunk(i)
			if err != nil {
				return 0, err
			}
			if !hole {
				return max(off, i<<d.bits), nil
			}
		}
		return ino.Size, nil
	}
	return off, nil
}

// ReadlinkInode returns the target of a symbolic link's inode.
func (img *Image) ReadlinkInode(ino *Inode) (string, error) {
	if !ino.IsSymlink() {
		return "", fmt.Errorf("erofs: nid %d: not a symbolic link", ino.Nid)
	}
	return img.readlink(ino)
}

// readlink returns a symlink's target.
func (img *Image) readlink(ino *Inode) (string, error) {
	if ino.Size > maxLinkTarget {
		return "", fmt.Errorf("erofs: nid %d: symlink target of %d bytes", ino.Nid, ino.Size)
	}
	ra, err := img.dataReader(ino)
	if err != nil {
		return "", err
	}
	b := make([]byte, ino.Size)
	if err := readFullAt(ra, b, 0); err != nil {
		return "", fmt.Errorf("erofs: nid %d: symlink: %w", ino.Nid, err)
	}
	return string(b), nil
}

// openInode makes the fs.File for a resolved inode.
func (img *Image) openInode(op, name string, ino *Inode) (fs.File, error) {
	if ino.IsDir() {
		return &imgDir{img: img, ino: ino, name: name}, nil
	}
	ra, err := img.dataReader(ino)
	if err != nil {
		return nil, &fs.PathError{Op: op, Path: name, Err: err}
	}
	return &imgFile{ino: ino, name: name, SectionReader: io.NewSectionReader(ra, 0, dataSize(ino))}, nil
}

// imgFile is an open non-directory: it reads, seeks and reads at offsets.
type imgFile struct {
	*io.SectionReader
	ino    *Inode
	name   string
	closed bool
}

func (f *imgFile) Stat() (fs.FileInfo, error) { return f.ino.FileInfo(), nil }

func (f *imgFile) Read(p []byte) (int, error) {
	if f.closed {
		return 0, &fs.PathError{Op: "read", Path: f.name, Err: fs.ErrClosed}
	}
	return f.SectionReader.Read(p)
}

func (f *imgFile) ReadAt(p []byte, off int64) (int, error) {
	if f.closed {
		return 0, &fs.PathError{Op: "read", Path: f.name, Err: fs.ErrClosed}
	}
	return f.SectionReader.ReadAt(p, off)
}

func (f *imgFile) Seek(offset int64, whence int) (int64, error) {
	if f.closed {
		return 0, &fs.PathError{Op: "seek", Path: f.name, Err: fs.ErrClosed}
	}
	return f.SectionReader.Seek(offset, whence)
}

func (f *imgFile) Close() error {
	if f.closed {
		return &fs.PathError{Op: "close", Path: f.name, Err: fs.ErrClosed}
	}
	f.closed = true
	return nil
}

// initDevices reads the device table and pairs it with the devices given.
func (img *Image) initDevices(given []imgDevice) error {
	img.devs = []imgDevice{{r: img.r, size: img.size, DeviceSlot: DeviceSlot{Blocks: img.info.Blocks}}}
	img.total = img.size
	n := int(img.info.ExtraDevices)
	if n == 0 {
		if len(given) > 0 {
			return fmt.Errorf("erofs: %d extra devices given, image has none", len(given))
		}
		return nil
	}
	if len(given) > 0 && len(given) != n {
		return fmt.Errorf("erofs: image has %d extra devices, %d given", n, len(given))
	}
	off := int64(img.sb.DevtSlotOff) * deviceSlotSize
	if off < SuperOffset+SuperSize || off+int64(n)*deviceSlotSize > img.size {
		return fmt.Errorf("erofs: device table at %d (%d slots) outside the image", off, n)
	}
	table := make([]byte, n*deviceSlotSize)
	if err := img.readFull(table, off); err != nil {
		return fmt.Errorf("erofs: device table: %w", err)
	}
	for i := range n {
		slot := table[i*deviceSlotSize:]
		// Only the low 32 bits of blocks and uniaddr: the 48-bit layouts of
		// the slot disagree and Linux 6.18 reads just these.
		d := imgDevice{DeviceSlot: DeviceSlot{
			Tag:     cString(slot[:deviceTagSize]),
			Blocks:  uint64(le.Uint32(slot[64:])),
			UniAddr: uint64(le.Uint32(slot[68:])),
		}}
		if len(given) > 0 {
			g := given[i]
			if g.r == nil || g.size < 0 {
				return fmt.Errorf("erofs: extra device %d: no reader", i+1)
			}
			d.r, d.size = g.r, g.size
			if img.total > math.MaxInt64-g.size {
				return fmt.Errorf("erofs: extra device %d: size overflows", i+1)
			}
			img.total += g.size
		}
		img.devs = append(img.devs, d)
	}
	return nil
}

// Devices returns the device table of a multi-device image (nil if none).
func (img *Image) Devices() []DeviceSlot {
	if len(img.devs) <= 1 {
		return nil
	}
	out := make([]DeviceSlot, 0, len(img.devs)-1)
	for _, d := range img.devs[1:] {
		out = append(out, d.DeviceSlot)
	}
	return out
}

// DataAddress is where a regular file's stored data begins: the byte
// address of its first data block (flat layouts) or of its first pcluster
// (compressed; for a file that is one fragment, its offset in the packed
// inode, with frag set). ok is false for a file with no data blocks.
// Files that share their data (whole-file dedupe) have the same address.
func (img *Image) DataAddress(ino *Inode) (addr int64, frag, ok bool) {
	if !ino.IsRegular() || ino.Size == 0 {
		return 0, false, false
	}
	switch ino.Layout {
	case LayoutFlatPlain, LayoutFlatInline:
		if ino.Size < img.bs && ino.Layout == LayoutFlatInline {
			return 0, false, false
		}
		return int64(ino.startBlk) * img.bs, false, true
	case LayoutCompressedFull, LayoutCompressedCompact:
		d, err := img.zReader(ino)
		if err != nil {
			return 0, false, false
		}
		if d.whole {
			return d.fragOff, true, true
		}
		e, err := d.mapExtent(0)
		if err != nil || e.kind == zInline {
			return 0, false, false
		}
		if e.kind == zFragment {
			return d.fragOff, true, true
		}
		return e.pa, false, true
	}
	return 0, false, false
}

// ChunkRefs returns where a regular file's data is stored, in the form
// AddChunks takes: a FLAT_PLAIN file as one chunk covering it, a
// CHUNK_BASED file as its index (device ids as this image numbers them).
// ok is false for data that cannot be referenced in place: inline tails
// and compressed files (read those with Open).
func (img *Image) ChunkRefs(ino *Inode) (chunkBits uint8, refs []ChunkRef, ok bool, err error) {
	if !ino.IsRegular() || ino.Size == 0 {
		return 0, nil, false, nil
	}
	switch ino.Layout {
	case LayoutFlatPlain:
		nblk := (ino.Size + img.bs - 1) >> img.bits
		if ino.startBlk+uint64(nblk) > uint64(NullAddr) {
			return 0, nil, false, fmt.Errorf("erofs: nid %d: blocks beyond 2^32", ino.Nid)
		}
		for int64(1)<<chunkBits < nblk {
			chunkBits++
		}
		return chunkBits, []ChunkRef{{Block: uint32(ino.startBlk)}}, true, nil
	case LayoutChunkBased:
		d, err := img.chunkReader(ino)
		if err != nil {
			return 0, nil, false, err
		}
		if d.fmt&chunkFormat48Bit != 0 {
			return 0, nil, false, nil
		}
		if d.count > maxChunks {
			return 0, nil, false, fmt.Errorf("erofs: nid %d: %d chunks, more than %d", ino.Nid, d.count, maxChunks)
		}
		table := make([]byte, d.count*d.unit)
		if err := img.readFull(table, d.table); err != nil {
			return 0, nil, false, fmt.Errorf("erofs: nid %d: chunk table: %w", ino.Nid, err)
		}
		refs = make([]ChunkRef, d.count)
		for i := range refs {
			e := table[int64(i)*d.unit:]
			if d.unit == 4 {
				refs[i] = ChunkRef{Block: le.Uint32(e)}
			} else {
				refs[i] = ChunkRef{Device: le.Uint16(e[2:]) & img.deviceMask(), Block: le.Uint32(e[4:])}
			}
			refs[i].Hole = refs[i].Block == NullAddr
		}
		return uint8(d.bits - img.bits), refs, true, nil
	}
	return 0, nil, false, nil
}
