package erofs

import (
	"encoding/binary"
	"hash/crc32"
)

// On-disk constants of EROFS (see shared/ref/erofs-format.md). All integers
// are little-endian.
const (
	// SuperMagic is the magic number at byte SuperOffset.
	SuperMagic uint32 = 0xE0F5E1E2
	// SuperOffset is where the superblock starts on the device.
	SuperOffset = 1024
	// SuperSize is the size of the base superblock.
	SuperSize = 128

	// SlotSize is the granularity of nid addressing: iloc(nid) = meta_blkaddr*bs + nid*32.
	SlotSize = 32

	CompactInodeSize  = 32
	ExtendedInodeSize = 64

	DirentSize = 12
	// MaxNameLen is the longest file name a dirent may carry.
	MaxNameLen = 255

	// NullAddr marks a hole in a chunk block map or a chunk index.
	NullAddr uint32 = 0xFFFFFFFF
)

// Feature bits.
const (
	FeatureCompatSBChksum    uint32 = 0x01
	FeatureCompatMtime       uint32 = 0x02
	FeatureCompatXattrFilter uint32 = 0x04

	FeatureIncompatZeroPadding   uint32 = 0x001
	FeatureIncompatComprCfgs     uint32 = 0x002 // also BIG_PCLUSTER
	FeatureIncompatChunkedFile   uint32 = 0x004
	FeatureIncompatDeviceTable   uint32 = 0x008 // also COMPR_HEAD2
	FeatureIncompatZTailPacking  uint32 = 0x010
	FeatureIncompatFragments     uint32 = 0x020 // also DEDUPE
	FeatureIncompatXattrPrefixes uint32 = 0x040
	FeatureIncompat48Bit         uint32 = 0x080
	FeatureIncompatMetabox       uint32 = 0x100
)

// Data layouts (bits 1-3 of i_format).
const (
	LayoutFlatPlain         = 0
	LayoutCompressedFull    = 1
	LayoutFlatInline        = 2
	LayoutCompressedCompact = 3
	LayoutChunkBased        = 4
)

// Chunk format bits (low 16 bits of i_u for LayoutChunkBased).
const (
	ChunkFormatBlkBits uint16 = 0x001F
	ChunkFormatIndexes uint16 = 0x0020
)

// Dirent file types (the generic FT_* codes).
const (
	FTUnknown = 0
	FTRegFile = 1
	FTDir     = 2
	FTChrdev  = 3
	FTBlkdev  = 4
	FTFifo    = 5
	FTSock    = 6
	FTSymlink = 7
)

// Unix file type bits of i_mode.
const (
	S_IFMT   = 0o170000
	S_IFSOCK = 0o140000
	S_IFLNK  = 0o120000
	S_IFREG  = 0o100000
	S_IFBLK  = 0o060000
	S_IFDIR  = 0o040000
	S_IFCHR  = 0o020000
	S_IFIFO  = 0o010000
)

// Xattr name indexes.
const (
	XattrIndexUser            = 1
	XattrIndexPosixACLAccess  = 2
	XattrIndexPosixACLDefault = 3
	XattrIndexTrusted         = 4
	XattrIndexLustre          = 5
	XattrIndexSecurity        = 6
	xattrIbodyHeaderSize      = 12
	xattrEntryHeaderSize      = 4
	maxXattrValueSize         = 0xFFFF
	xattrIndexLongPrefixFlag  = 0x80
	maxSharedXattrsPerInode   = 255
	maxInlineXattrAreaIcount  = 0xFFFF
	maxXattrNameLen           = 255 // the whole name: Linux's XATTR_NAME_MAX
	xattrPrefixUser           = "user."
	xattrPrefixTrusted        = "trusted."
	xattrPrefixSecurity       = "security."
	xattrNamePosixACLAccess   = "system.posix_acl_access"
	xattrNamePosixACLDefault  = "system.posix_acl_default"
	xattrPrefixLustre         = "lustre."
)

var le = binary.LittleEndian

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// superBlock is the decoded form of struct erofs_super_block (base 128 bytes).
type superBlock struct {
	Magic            uint32
	Checksum         uint32
	FeatureCompat    uint32
	BlkSzBits        uint8
	ExtSlots         uint8
	RootNid          uint16
	Inos             uint64
	Epoch            uint64
	FixedNsec        uint32
	Blocks           uint32
	MetaBlkAddr      uint32
	XattrBlkAddr     uint32
	UUID             [16]byte
	VolumeName       [16]byte
	FeatureIncompat  uint32
	U1               uint16 // available_compr_algs or lz4_max_distance
	ExtraDevices     uint16
	DevtSlotOff      uint16
	DirBlkBits       uint8
	XattrPrefixCount uint8
	XattrPrefixStart uint32
	PackedNid        uint64
	XattrFilterRes   uint8
	BuildTime        uint32
}

func (s *superBlock) marshal(b []byte) {
	_ = b[SuperSize-1]
	clear(b[:SuperSize])
	le.PutUint32(b[0x00:], s.Magic)
	le.PutUint32(b[0x04:], s.Checksum)
	le.PutUint32(b[0x08:], s.FeatureCompat)
	b[0x0C] = s.BlkSzBits
	b[0x0D] = s.ExtSlots
	le.PutUint16(b[0x0E:], s.RootNid)
	le.PutUint64(b[0x10:], s.Inos)
	le.PutUint64(b[0x18:], s.Epoch)
	le.PutUint32(b[0x20:], s.FixedNsec)
	le.PutUint32(b[0x24:], s.Blocks)
	le.PutUint32(b[0x28:], s.MetaBlkAddr)
	le.PutUint32(b[0x2C:], s.XattrBlkAddr)
	copy(b[0x30:0x40], s.UUID[:])
	copy(b[0x40:0x50], s.VolumeName[:])
	le.PutUint32(b[0x50:], s.FeatureIncompat)
	le.PutUint16(b[0x54:], s.U1)
	le.PutUint16(b[0x56:], s.ExtraDevices)
	le.PutUint16(b[0x58:], s.DevtSlotOff)
	b[0x5A] = s.DirBlkBits
	b[0x5B] = s.XattrPrefixCount
	le.PutUint32(b[0x5C:], s.XattrPrefixStart)
	le.PutUint64(b[0x60:], s.PackedNid)
	b[0x68] = s.XattrFilterRes
	le.PutUint32(b[0x6C:], s.BuildTime)
}

func (s *superBlock) unmarshal(b []byte) {
	_ = b[SuperSize-1]
	s.Magic = le.Uint32(b[0x00:])
	s.Checksum = le.Uint32(b[0x04:])
	s.FeatureCompat = le.Uint32(b[0x08:])
	s.BlkSzBits = b[0x0C]
	s.ExtSlots = b[0x0D]
	s.RootNid = le.Uint16(b[0x0E:])
	s.Inos = le.Uint64(b[0x10:])
	s.Epoch = le.Uint64(b[0x18:])
	s.FixedNsec = le.Uint32(b[0x20:])
	s.Blocks = le.Uint32(b[0x24:])
	s.MetaBlkAddr = le.Uint32(b[0x28:])
	s.XattrBlkAddr = le.Uint32(b[0x2C:])
	copy(s.UUID[:], b[0x30:0x40])
	copy(s.VolumeName[:], b[0x40:0x50])
	s.FeatureIncompat = le.Uint32(b[0x50:])
	s.U1 = le.Uint16(b[0x54:])
	s.ExtraDevices = le.Uint16(b[0x56:])
	s.DevtSlotOff = le.Uint16(b[0x58:])
	s.DirBlkBits = b[0x5A]
	s.XattrPrefixCount = b[0x5B]
	s.XattrPrefixStart = le.Uint32(b[0x5C:])
	s.PackedNid = le.Uint64(b[0x60:])
	s.XattrFilterRes = b[0x68]
	s.BuildTime = le.Uint32(b[0x6C:])
}

// superChecksum computes the value stored at byte 1028: CRC-32C with the
// register seeded to ~0 and no final inversion, over the region that starts at
// the superblock and runs to the end of its block (the 4 checksum bytes taken
// as zero). block0 is the first block of the image.
func superChecksum(block0 []byte, blockSize int) uint32 {
	end := blockSize
	if blockSize <= SuperOffset {
		end = SuperOffset + blockSize
	}
	region := block0[SuperOffset:end]
	var zero [4]byte
	crc := crc32.Update(0, castagnoli, region[:4])
	crc = crc32.Update(crc, castagnoli, zero[:])
	crc = crc32.Update(crc, castagnoli, region[8:])
	return ^crc
}

// inodeCore is the decoded form of both inode forms; Compact says which one.
type inodeCore struct {
	Compact    bool
	Layout     uint8
	XattrCount uint16 // i_xattr_icount
	Mode       uint16
	Nlink      uint32
	Size       uint64
	U          uint32 // startblk / rdev / chunk format / compressed blocks
	Ino        uint32
	Uid        uint32
	Gid        uint32
	Mtime      int64
	MtimeNsec  uint32
}

func (c *inodeCore) size() int {
	if c.Compact {
		return CompactInodeSize
	}
	return ExtendedInodeSize
}

func (c *inodeCore) format() uint16 {
	f := uint16(c.Layout) << 1
	if !c.Compact {
		f |= 1
	}
	return f
}

// marshal writes the inode core into b (which must hold c.size() bytes).
// Compact inodes carry no time of their own: the writer uses them only when the
// mtime equals the superblock epoch (old kernels read the epoch for every
// compact inode), so i_mtime stays 0.
func (c *inodeCore) marshal(b []byte) {
	n := c.size()
	clear(b[:n])
	le.PutUint16(b[0x00:], c.format())
	le.PutUint16(b[0x02:], c.XattrCount)
	le.PutUint16(b[0x04:], c.Mode)
	if c.Compact {
		le.PutUint16(b[0x06:], uint16(c.Nlink))
		le.PutUint32(b[0x08:], uint32(c.Size))
		le.PutUint32(b[0x10:], c.U)
		le.PutUint32(b[0x14:], c.Ino)
		le.PutUint16(b[0x18:], uint16(c.Uid))
		le.PutUint16(b[0x1A:], uint16(c.Gid))
		return
	}
	le.PutUint64(b[0x08:], c.Size)
	le.PutUint32(b[0x10:], c.U)
	le.PutUint32(b[0x14:], c.Ino)
	le.PutUint32(b[0x18:], c.Uid)
	le.PutUint32(b[0x1C:], c.Gid)
	le.PutUint64(b[0x20:], uint64(c.Mtime))
	le.PutUint32(b[0x28:], c.MtimeNsec)
	le.PutUint32(b[0x2C:], c.Nlink)
}

// xattrAreaSize returns the inline xattr area size for an i_xattr_icount.
func xattrAreaSize(icount uint16) int {
	if icount == 0 {
		return 0
	}
	return xattrIbodyHeaderSize + 4*(int(icount)-1)
}

// encodeDev packs a device number the way the kernel's new_encode_dev does.
func encodeDev(major, minor uint32) uint32 {
	return (minor & 0xFF) | (major << 8) | ((minor &^ 0xFF) << 12)
}

// decodeDev is the inverse of encodeDev.
func decodeDev(d uint32) (major, minor uint32) {
	major = (d & 0xFFF00) >> 8
	minor = (d & 0xFF) | ((d >> 12) & 0xFFF00)
	return
}

// fileTypeOf maps an i_mode to a dirent file type.
func fileTypeOf(mode uint32) uint8 {
	switch mode & S_IFMT {
	case S_IFREG:
		return FTRegFile
	case S_IFDIR:
		return FTDir
	case S_IFCHR:
		return FTChrdev
	case S_IFBLK:
		return FTBlkdev
	case S_IFIFO:
		return FTFifo
	case S_IFSOCK:
		return FTSock
	case S_IFLNK:
		return FTSymlink
	}
	return FTUnknown
}
