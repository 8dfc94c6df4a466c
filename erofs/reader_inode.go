package erofs

import (
	"fmt"
	"io/fs"
	"math"
	"time"
)

// Bits of i_format beyond the version and layout.
const (
	// inodeFlagNlink1 (bit 4) on a non-directory compact inode: nlink is 1
	// and i_nb holds the high bits of the start block (6.15+). On a
	// directory it means "." is not stored (DOT_OMITTED).
	inodeFlagNlink1  = 0x10
	inodeFormatAll   = 0x1F
	chunkFormat48Bit = 0x0040
	chunkFormatAll   = ChunkFormatBlkBits | ChunkFormatIndexes | chunkFormat48Bit
	nullAddr48       = 1<<48 - 1
)

// Inode is a decoded on-disk inode.
type Inode struct {
	Nid uint64
	// Mode is the full st_mode: S_IFxxx type bits and permission bits
	// including setuid, setgid and sticky.
	Mode     uint32
	Uid, Gid uint32
	Size     int64
	// Mtime of a compact inode is the superblock epoch plus its i_mtime
	// offset, with the superblock's fixed nanoseconds (as Linux 6.15+ reads
	// it; older kernels ignore the offset, which writers keep at 0).
	Mtime              time.Time
	Nlink              uint32
	Devmajor, Devminor uint32
	// Layout is the data layout, LayoutFlatPlain … LayoutChunkBased.
	Layout  uint8
	Compact bool
	// XattrSize is the size in bytes of the inline xattr area.
	XattrSize int

	name       string // last path component, for FileInfo
	iloc       int64  // byte offset of the inode on the primary device
	isize      int    // CompactInodeSize or ExtendedInodeSize
	icount     uint16 // i_xattr_icount
	format     uint16 // i_format
	rawU       uint32 // i_u: startblk, rdev, chunk format or block count
	startBlk   uint64 // first data block of flat layouts (with 48-bit high bits)
	dotOmitted bool
}

// IsDir reports whether the inode is a directory.
func (ino *Inode) IsDir() bool { return ino.Mode&S_IFMT == S_IFDIR }

// IsRegular reports whether the inode is a regular file.
func (ino *Inode) IsRegular() bool { return ino.Mode&S_IFMT == S_IFREG }

// IsSymlink reports whether the inode is a symbolic link.
func (ino *Inode) IsSymlink() bool { return ino.Mode&S_IFMT == S_IFLNK }

// ChunkFormat returns the chunk format of a chunk-based inode (i_u's low 16
// bits), 0 for other layouts.
func (ino *Inode) ChunkFormat() uint16 {
	if ino.Layout != LayoutChunkBased {
		return 0
	}
	return uint16(ino.rawU)
}

// StartBlock returns the first data block of a flat (plain or inline)
// inode, 0 for other layouts.
func (ino *Inode) StartBlock() uint64 {
	if ino.Layout != LayoutFlatPlain && ino.Layout != LayoutFlatInline {
		return 0
	}
	return ino.startBlk
}

// CompressedBlocks is the number of pcluster blocks of a compressed file
// (i_u of layouts COMPRESSED_FULL and COMPRESSED_COMPACT), else 0.
func (ino *Inode) CompressedBlocks() uint32 {
	if ino.Layout != LayoutCompressedFull && ino.Layout != LayoutCompressedCompact {
		return 0
	}
	return ino.rawU
}

// Offset returns the byte offset of the inode in the image.
func (ino *Inode) Offset() int64 { return ino.iloc }

// tailOff is where the record's inline part begins: right after the inode
// core and its inline xattrs (inline data, chunk table, compression indexes).
func (ino *Inode) tailOff() int64 {
	return ino.iloc + int64(ino.isize) + int64(ino.XattrSize)
}

// decodeInode reads and checks the inode at nid. Layout-specific data
// (block ranges, chunk tables) is checked when the data is read.
func (img *Image) decodeInode(nid uint64) (*Inode, error) {
	if nid > uint64(math.MaxInt64-img.meta)/SlotSize {
		return nil, fmt.Errorf("erofs: nid %d out of range", nid)
	}
	iloc := img.meta + int64(nid)*SlotSize
	if iloc > img.size-CompactInodeSize {
		return nil, fmt.Errorf("erofs: nid %d: inode at %d beyond the image end", nid, iloc)
	}
	var b [ExtendedInodeSize]byte
	n := min(int64(len(b)), img.size-iloc)
	if err := img.readFull(b[:n], iloc); err != nil {
		return nil, fmt.Errorf("erofs: nid %d: %w", nid, err)
	}
	ifmt := le.Uint16(b[0:])
	if ifmt&^inodeFormatAll != 0 {
		return nil, fmt.Errorf("erofs: nid %d: unsupported i_format %#x", nid, ifmt)
	}
	ino := &Inode{
		Nid:     nid,
		iloc:    iloc,
		format:  ifmt,
		Compact: ifmt&1 == 0,
		Layout:  uint8(ifmt>>1) & 7,
		icount:  le.Uint16(b[2:]),
		Mode:    uint32(le.Uint16(b[4:])),
		rawU:    le.Uint32(b[0x10:]),
	}
	if ino.Layout > LayoutChunkBased {
		return nil, fmt.Errorf("erofs: nid %d: unknown data layout %d", nid, ino.Layout)
	}
	ino.XattrSize = xattrAreaSize(ino.icount)
	nb := le.Uint16(b[6:])
	var hi uint64 // high bits of the start block (48-bit layouts)
	if ino.Compact {
		ino.isize = CompactInodeSize
		ino.Size = int64(le.Uint32(b[8:]))
		ino.Uid = uint32(le.Uint16(b[0x18:]))
		ino.Gid = uint32(le.Uint16(b[0x1A:]))
		ino.Mtime = time.Unix(img.info.Epoch+int64(le.Uint32(b[0x0C:])), int64(img.info.FixedNsec))
		ino.Nlink = uint32(nb)
		if ifmt&inodeFlagNlink1 != 0 && ino.Mode&S_IFMT != S_IFDIR {
			ino.Nlink = 1
			hi = uint64(nb)
		}
	} else {
		if n < ExtendedInodeSize {
			return nil, fmt.Errorf("erofs: nid %d: extended inode at %d beyond the image end", nid, iloc)
		}
		ino.isize = ExtendedInodeSize
		size := le.Uint64(b[8:])
		if size > math.MaxInt64 {
			return nil, fmt.Errorf("erofs: nid %d: negative i_size %d", nid, int64(size))
		}
		ino.Size = int64(size)
		ino.Uid = le.Uint32(b[0x18:])
		ino.Gid = le.Uint32(b[0x1C:])
		ino.Mtime = time.Unix(int64(le.Uint64(b[0x20:])), int64(le.Uint32(b[0x28:])))
		ino.Nlink = le.Uint32(b[0x2C:])
		// Linux 6.15+ takes i_nb of every extended inode as the high bits.
		hi = uint64(nb)
	}
	if ino.Mode&S_IFMT == S_IFDIR && ifmt&inodeFlagNlink1 != 0 {
		ino.dotOmitted = true
	}

	switch ino.Mode & S_IFMT {
	case S_IFREG, S_IFDIR, S_IFLNK:
		ino.startBlk = uint64(ino.rawU) | hi<<32
		if ino.Layout == LayoutChunkBased {
			if f := uint16(ino.rawU); f&^chunkFormatAll != 0 || ino.rawU>>16 != 0 {
				return nil, fmt.Errorf("erofs: nid %d: unsupported chunk format %#x", nid, ino.rawU)
			}
		}
	case S_IFCHR, S_IFBLK:
		ino.Devmajor, ino.Devminor = decodeDev(ino.rawU)
	case S_IFIFO, S_IFSOCK:
	default:
		return nil, fmt.Errorf("erofs: nid %d: bad file type in mode %#o", nid, ino.Mode)
	}
	if ino.IsSymlink() && ino.Size > maxLinkTarget {
		return nil, fmt.Errorf("erofs: nid %d: symlink target of %d bytes", nid, ino.Size)
	}
	return ino, nil
}

// FileInfo returns the inode as an fs.FileInfo; Sys returns the *Inode.
func (ino *Inode) FileInfo() fs.FileInfo { return inodeInfo{ino} }

// FileMode converts the inode's st_mode into an fs.FileMode.
func (ino *Inode) FileMode() fs.FileMode { return unixToFileMode(ino.Mode) }

func unixToFileMode(m uint32) fs.FileMode {
	mode := fs.FileMode(m & 0o777)
	switch m & S_IFMT {
	case S_IFDIR:
		mode |= fs.ModeDir
	case S_IFLNK:
		mode |= fs.ModeSymlink
	case S_IFCHR:
		mode |= fs.ModeDevice | fs.ModeCharDevice
	case S_IFBLK:
		mode |= fs.ModeDevice
	case S_IFIFO:
		mode |= fs.ModeNamedPipe
	case S_IFSOCK:
		mode |= fs.ModeSocket
	}
	if m&0o4000 != 0 {
		mode |= fs.ModeSetuid
	}
	if m&0o2000 != 0 {
		mode |= fs.ModeSetgid
	}
	if m&0o1000 != 0 {
		mode |= fs.ModeSticky
	}
	return mode
}

// fileTypeMode maps a dirent file type to fs.FileMode type bits; ok is false
// for FTUnknown and values the format does not define.
func fileTypeMode(ft uint8) (mode fs.FileMode, ok bool) {
	switch ft {
	case FTRegFile:
		return 0, true
	case FTDir:
		return fs.ModeDir, true
	case FTChrdev:
		return fs.ModeDevice | fs.ModeCharDevice, true
	case FTBlkdev:
		return fs.ModeDevice, true
	case FTFifo:
		return fs.ModeNamedPipe, true
	case FTSock:
		return fs.ModeSocket, true
	case FTSymlink:
		return fs.ModeSymlink, true
	}
	return 0, false
}

type inodeInfo struct{ ino *Inode }

func (fi inodeInfo) Name() string       { return fi.ino.name }
func (fi inodeInfo) Size() int64        { return fi.ino.Size }
func (fi inodeInfo) Mode() fs.FileMode  { return fi.ino.FileMode() }
func (fi inodeInfo) ModTime() time.Time { return fi.ino.Mtime }
func (fi inodeInfo) IsDir() bool        { return fi.ino.IsDir() }
func (fi inodeInfo) Sys() any           { return fi.ino }

// InodeAt returns the inode with the given nid.
func (img *Image) InodeAt(nid uint64) (*Inode, error) {
	ino, err := img.loadInode(nid)
	if err != nil {
		return nil, err
	}
	c := *ino
	return &c, nil
}

// loadInode returns the shared, cached copy of an inode; callers must not
// modify it.
func (img *Image) loadInode(nid uint64) (*Inode, error) {
	img.mu.Lock()
	ino, ok := img.cache[nid]
	img.mu.Unlock()
	if ok {
		return ino, nil
	}
	ino, err := img.decodeInode(nid)
	if err != nil {
		return nil, err
	}
	img.mu.Lock()
	if len(img.cache) >= inodeCacheSize {
		// Dropping everything is crude but keeps memory bounded without
		// bookkeeping; walks revisit few inodes.
		clear(img.cache)
	}
	img.cache[nid] = ino
	img.mu.Unlock()
	return ino, nil
}
