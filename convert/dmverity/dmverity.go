// Package dmverity appends a dm-verity hash tree to a file, in the layout
// veritysetup writes with --hash-offset (its superblock, then the tree, in
// the same file after the data), and checks such a file.
//
// containerd's EROFS snapshotter opens a layer blob that has a sidecar
// (<blob>.dmverity, JSON with the root hash and the superblock's offset) as
// a dm-verity device over the blob itself, so that every block a container
// reads is checked against the root hash; with dmverity_mode "on" it
// refuses layers without one. The parameters are containerd's (SHA-256,
// 4 KiB hash blocks, hash type 1, a zero salt of 32 bytes), but for the
// data block size, which is the filesystem's up to 4 KiB: the device has
// the data block size as its logical block size, and EROFS cannot mount
// an image of 512-byte blocks on a device of 4 KiB ones. The superblock's
// UUID is derived from the root hash, so the same data gives the same
// bytes.
//
// The tree is a Merkle tree of SHA-256 digests, each of salt || block. Its
// level 0 holds a digest per data block, 128 to a hash block; each level
// above holds a digest per block of the level below, up to a level of one
// block, whose digest is the root hash (one data block alone has no tree:
// the root is its digest). The levels are stored top first, as the kernel
// looks them up. The superblock goes at the data's size rounded up to a
// hash block, and the tree after the superblock's block.
package dmverity

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"

	"github.com/ocierofs/ocierofs/internal/atomicfile"
)

const (
	// BlockSize is the size of hash blocks, and the largest data block.
	BlockSize = 4096
	// MinDataBlockSize is the smallest data block.
	MinDataBlockSize = 512
	// hashesPerBlock digests of 32 bytes fill a hash block.
	hashesPerBlock = BlockSize / sha256.Size
	// superblockSize is what the superblock uses of its block.
	superblockSize = 512
	// batch is how many blocks are hashed from one read.
	batch = 256
)

// salt is containerd's default: 32 zero bytes.
var salt = make([]byte, 32)

// Metadata is the sidecar's content, as containerd reads it.
type Metadata struct {
	// RootHash is the tree's root, in hex.
	RootHash string `json:"roothash"`
	// HashOffset is where the superblock is: the data's size rounded up
	// to a hash block.
	HashOffset uint64 `json:"hashoffset"`
}

// SidecarPath is the sidecar of the blob at p.
func SidecarPath(p string) string { return p + ".dmverity" }

// File is what Format writes to: an *os.File.
type File interface {
	io.ReaderAt
	io.WriterAt
	Truncate(size int64) error
}

// levels returns the number of hash blocks of each level, level 0 (the
// digests of the data) first, for n data blocks.
func levels(n uint64) []uint64 {
	var ls []uint64
	for n > 1 {
		n = (n + hashesPerBlock - 1) / hashesPerBlock
		ls = append(ls, n)
	}
	return ls
}

// layout is where each level starts, in blocks from the tree's start (the
// block after the superblock): the top level first.
func layout(ls []uint64) []uint64 {
	start := make([]uint64, len(ls))
	var pos uint64
	for i := len(ls) - 1; i >= 0; i-- {
		start[i] = pos
		pos += ls[i]
	}
	return start
}

// TreeSize is the bytes Format appends after dataSize rounded up to a hash
// block: the superblock's block and the tree.
func TreeSize(dataSize int64, dataBlockSize int) int64 {
	var n uint64
	for _, b := range levels(dataBlocks(dataSize, dataBlockSize)) {
		n += b
	}
	return int64(n+1) * BlockSize
}

func dataBlocks(size int64, bs int) uint64 { return uint64((size + int64(bs) - 1) / int64(bs)) }

func hashOffset(size int64) int64 { return (size + BlockSize - 1) / BlockSize * BlockSize }

func validDataBlockSize(bs int) bool {
	return bs >= MinDataBlockSize && bs <= BlockSize && bs&(bs-1) == 0
}

// Format appends the superblock and hash tree of f's first dataSize bytes,
// in data blocks of dataBlockSize bytes (512 to 4096, a power of two), to
// f, and returns the sidecar's metadata. What f holds after dataSize is
// replaced: the last data block is padded with zeros. f ends up HashOffset
// + TreeSize bytes long. Memory does not grow with the data: each level is
// read back from f to hash the next.
func Format(f File, dataSize int64, dataBlockSize int) (Metadata, error) {
	if dataSize <= 0 {
		return Metadata{}, fmt.Errorf("dm-verity: no data to hash")
	}
	if !validDataBlockSize(dataBlockSize) {
		return Metadata{}, fmt.Errorf("dm-verity: data block size %d is not a power of two from %d to %d", dataBlockSize, MinDataBlockSize, BlockSize)
	}
	n := dataBlocks(dataSize, dataBlockSize)
	hashOff := hashOffset(dataSize)
	if err := f.Truncate(dataSize); err != nil {
		return Metadata{}, err
	}
	if err := f.Truncate(hashOff + TreeSize(dataSize, dataBlockSize)); err != nil {
		return Metadata{}, err
	}
	root, err := hashTree(f, hashOff, n, dataBlockSize, func(hb []byte, _ uint64, at, _ int64) error {
		_, err := f.WriteAt(hb, at)
		return err
	})
	if err != nil {
		return Metadata{}, err
	}
	if _, err := f.WriteAt(superblock(n, dataBlockSize, root), hashOff); err != nil {
		return Metadata{}, err
	}
	return Metadata{RootHash: hex.EncodeToString(root[:]), HashOffset: uint64(hashOff)}, nil
}

// hashTree hashes the tree of n data blocks of dbs bytes of r whose
// superblock is at hashOff, level by level from level 0, each from the
// level below as r holds it, and hands put each hash block it makes, its
// index k in its level, where it goes (at) and where the blocks it covers
// start (from); it returns the root hash.
func hashTree(r io.ReaderAt, hashOff int64, n uint64, dbs int, put func(hb []byte, k uint64, at, from int64) error) ([sha256.Size]byte, error) {
	ls := levels(n)
	start := layout(ls)
	tree := hashOff + BlockSize
	// Level i hashes the blocks of level i-1 (the data for level 0).
	inOff, inBlocks, inSize := int64(0), n, dbs
	for i, count := range ls {
		outOff := tree + int64(start[i])*BlockSize
		if err := hashLevel(r, inOff, inBlocks, inSize, func(hb []byte, k uint64) error {
			return put(hb, k, outOff+int64(k)*BlockSize, inOff+int64(k)*hashesPerBlock*int64(inSize))
		}); err != nil {
			return [sha256.Size]byte{}, fmt.Errorf("dm-verity: level %d: %w", i, err)
		}
		inOff, inBlocks, inSize = outOff, count, BlockSize
	}
	return topDigest(r, hashOff, n, dbs)
}

// topDigest is the root hash of the tree of n data blocks of dbs bytes
// whose superblock is at hashOff: the digest of the top level's one block
// (stored first, after the superblock), or of the one data block where
// there is no tree.
func topDigest(r io.ReaderAt, hashOff int64, n uint64, dbs int) ([sha256.Size]byte, error) {
	off, size := int64(0), dbs
	if n > 1 {
		off, size = hashOff+BlockSize, BlockSize
	}
	b := make([]byte, size)
	if _, err := r.ReadAt(b, off); err != nil {
		return [sha256.Size]byte{}, fmt.Errorf("dm-verity: read the block at offset %d: %w", off, err)
	}
	return digest(b), nil
}

// hashLevel hashes blocks blocks of size bytes of r from off, and hands
// each hash block (k: its index in the level) to put as it fills, the last
// one padded with zeros.
func hashLevel(r io.ReaderAt, off int64, blocks uint64, size int, put func(hb []byte, k uint64) error) error {
	per := uint64(batch * BlockSize / size) // blocks per read
	in := make([]byte, min(per, blocks)*uint64(size))
	hb := make([]byte, BlockSize)
	h := sha256.New() // reused: a block's digest allocates nothing
	var k uint64
	fill := 0
	for done := uint64(0); done < blocks; {
		m := min(per, blocks-done)
		b := in[:m*uint64(size)]
		at := off + int64(done)*int64(size)
		if _, err := r.ReadAt(b, at); err != nil {
			return fmt.Errorf("read %d bytes at offset %d: %w", len(b), at, err)
		}
		for j := uint64(0); j < m; j++ {
			sum(h, hb[fill:fill], b[j*uint64(size):(j+1)*uint64(size)])
			fill += sha256.Size
			if fill == BlockSize {
				if err := put(hb, k); err != nil {
					return err
				}
				k, fill = k+1, 0
			}
		}
		done += m
	}
	if fill > 0 {
		clear(hb[fill:])
		return put(hb, k)
	}
	return nil
}

// sum appends to dst the digest of a block of the tree (hash type 1: the
// salt first), with h.
func sum(h hash.Hash, dst, block []byte) []byte {
	h.Reset()
	h.Write(salt)
	h.Write(block)
	return h.Sum(dst)
}

func digest(block []byte) (d [sha256.Size]byte) {
	sum(sha256.New(), d[:0], block)
	return d
}

// superblock is veritysetup's superblock (version 1, little-endian) for n
// data blocks of dbs bytes; its UUID is taken from the root hash.
func superblock(n uint64, dbs int, root [sha256.Size]byte) []byte {
	sb := make([]byte, superblockSize)
	copy(sb[0:8], "verity")
	binary.LittleEndian.PutUint32(sb[8:], 1)  // version
	binary.LittleEndian.PutUint32(sb[12:], 1) // hash type: salt first
	id := sha256.Sum256(append([]byte("ocierofs dm-verity uuid "), root[:]...))
	id[6] = id[6]&0x0f | 0x50 // a name-based UUID (RFC 9562 version 5 bits)
	id[8] = id[8]&0x3f | 0x80
	copy(sb[16:32], id[:16])
	copy(sb[32:64], "sha256")
	binary.LittleEndian.PutUint32(sb[64:], uint32(dbs))
	binary.LittleEndian.PutUint32(sb[68:], BlockSize)
	binary.LittleEndian.PutUint64(sb[72:], n)
	binary.LittleEndian.PutUint16(sb[80:], uint16(len(salt)))
	copy(sb[88:], salt)
	return sb
}

// CheckLayout checks, reading two blocks, that a file of fileSize bytes is
// its first dataSize bytes and a tree Format appended with data blocks of
// dataBlockSize, as m describes: the offsets, the sizes, the superblock,
// and the root hash against the top level. Verify checks every block.
func CheckLayout(r io.ReaderAt, fileSize, dataSize int64, dataBlockSize int, m Metadata) error {
	sb, err := readSuperblock(r, m)
	if err != nil {
		return err
	}
	n := dataBlocks(dataSize, dataBlockSize)
	switch {
	case int64(m.HashOffset) != hashOffset(dataSize):
		return fmt.Errorf("dm-verity: hash offset %d, want %d for %d bytes of data", m.HashOffset, hashOffset(dataSize), dataSize)
	case sb.blocks != n || sb.blockSize != dataBlockSize:
		return fmt.Errorf("dm-verity: superblock at offset %d: %d data blocks of %d bytes, want %d of %d", m.HashOffset, sb.blocks, sb.blockSize, n, dataBlockSize)
	case fileSize != int64(m.HashOffset)+TreeSize(dataSize, dataBlockSize):
		return fmt.Errorf("dm-verity: %d bytes, want the data, superblock and tree's %d", fileSize, int64(m.HashOffset)+TreeSize(dataSize, dataBlockSize))
	}
	root, err := topDigest(r, int64(m.HashOffset), n, dataBlockSize)
	if err != nil {
		return err
	}
	return checkRoot(root, m)
}

// params are what a superblock says of the data.
type params struct {
	blocks    uint64
	blockSize int
}

// readSuperblock checks m's root hash and offset, reads the superblock at
// the offset and returns what it says of the data.
func readSuperblock(r io.ReaderAt, m Metadata) (params, error) {
	if d, err := hex.DecodeString(m.RootHash); err != nil || len(d) != sha256.Size {
		return params{}, fmt.Errorf("dm-verity: root hash %q is not a SHA-256 digest in hex", m.RootHash)
	}
	if m.HashOffset == 0 || m.HashOffset%BlockSize != 0 || m.HashOffset > 1<<62 {
		return params{}, fmt.Errorf("dm-verity: hash offset %d is not a whole number of %d-byte blocks", m.HashOffset, BlockSize)
	}
	b := make([]byte, superblockSize)
	if _, err := r.ReadAt(b, int64(m.HashOffset)); err != nil {
		return params{}, fmt.Errorf("dm-verity: superblock at offset %d: %w", m.HashOffset, err)
	}
	sb, err := checkSuperblock(b)
	if err != nil {
		return params{}, fmt.Errorf("dm-verity: superblock at offset %d: %w", m.HashOffset, err)
	}
	if sb.blocks > m.HashOffset/uint64(sb.blockSize) {
		return params{}, fmt.Errorf("dm-verity: superblock at offset %d: %d data blocks run past it", m.HashOffset, sb.blocks)
	}
	return sb, nil
}

// Verify checks r against m: the superblock at m.HashOffset, every block
// of the tree, and the root hash. The error names the first block found
// wrong.
func Verify(r io.ReaderAt, m Metadata) error {
	sb, err := readSuperblock(r, m)
	if err != nil {
		return err
	}
	stored := make([]byte, BlockSize)
	root, err := hashTree(r, int64(m.HashOffset), sb.blocks, sb.blockSize, func(hb []byte, k uint64, at, from int64) error {
		if _, err := r.ReadAt(stored, at); err != nil {
			return fmt.Errorf("read hash block %d at offset %d: %w", k, at, err)
		}
		if !bytes.Equal(stored, hb) {
			return fmt.Errorf("hash block %d at offset %d does not match the blocks it covers (from offset %d)", k, at, from)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return checkRoot(root, m)
}

// checkRoot compares a root hash with m's.
func checkRoot(root [sha256.Size]byte, m Metadata) error {
	if hex.EncodeToString(root[:]) != m.RootHash {
		return fmt.Errorf("dm-verity: the tree's root hash is %x, its metadata (sidecar or annotation) says %s", root, m.RootHash)
	}
	return nil
}

// checkSuperblock returns what a superblock with the parameters Format
// writes says of the data, or why it is not one.
func checkSuperblock(sb []byte) (params, error) {
	le := binary.LittleEndian
	p := params{blocks: le.Uint64(sb[72:]), blockSize: int(le.Uint32(sb[64:]))}
	switch {
	case string(sb[0:8]) != "verity\x00\x00":
		return p, errors.New("no verity signature")
	case le.Uint32(sb[8:]) != 1:
		return p, fmt.Errorf("version %d, want 1", le.Uint32(sb[8:]))
	case le.Uint32(sb[12:]) != 1:
		return p, fmt.Errorf("hash type %d, want 1", le.Uint32(sb[12:]))
	case bytes.Equal(sb[16:32], make([]byte, 16)):
		return p, errors.New("no UUID (containerd refuses it)")
	case string(bytes.TrimRight(sb[32:64], "\x00")) != "sha256":
		return p, fmt.Errorf("hash algorithm %q, want sha256", bytes.TrimRight(sb[32:64], "\x00"))
	case !validDataBlockSize(int(le.Uint32(sb[64:]))) || le.Uint32(sb[68:]) != BlockSize:
		return p, fmt.Errorf("data and hash block sizes %d and %d, want %d to %d and %d", le.Uint32(sb[64:]), le.Uint32(sb[68:]), MinDataBlockSize, BlockSize, BlockSize)
	case le.Uint16(sb[80:]) != uint16(len(salt)) || !bytes.Equal(sb[88:88+len(salt)], salt):
		return p, errors.New("not the zero salt of 32 bytes")
	case p.blocks == 0:
		return p, errors.New("no data blocks")
	}
	return p, nil
}

// ReadSidecar reads the sidecar of the blob at p.
func ReadSidecar(p string) (Metadata, error) {
	raw, err := os.ReadFile(SidecarPath(p))
	if err != nil {
		return Metadata{}, err
	}
	var m Metadata
	if err := json.Unmarshal(raw, &m); err != nil {
		return Metadata{}, fmt.Errorf("%s: %w", SidecarPath(p), err)
	}
	if m.RootHash == "" {
		return Metadata{}, fmt.Errorf("%s: no root hash", SidecarPath(p))
	}
	return m, nil
}

// WriteSidecar writes the sidecar of the blob at p, whole or not at all
// (synced; the caller syncs the directory).
func WriteSidecar(p string, m Metadata) error {
	raw, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(SidecarPath(p), append(raw, '\n'))
}

// Tree locates the blocks of a tree as Format lays it out, for a reader
// that checks data blocks one at a time against the root hash: the data
// is the Blocks blocks of DataBlockSize bytes before HashOffset.
type Tree struct {
	HashOffset    int64
	DataBlockSize int
	Blocks        uint64
	levels, start []uint64
}

// NewTree is the tree of the data before hashOffset, in data blocks of
// dataBlockSize bytes.
func NewTree(hashOffset int64, dataBlockSize int) (*Tree, error) {
	if hashOffset <= 0 || hashOffset%BlockSize != 0 || !validDataBlockSize(dataBlockSize) {
		return nil, fmt.Errorf("dm-verity: hash offset %d and data block size %d: want a multiple of %d and a power of two from %d to %d", hashOffset, dataBlockSize, BlockSize, MinDataBlockSize, BlockSize)
	}
	n := dataBlocks(hashOffset, dataBlockSize)
	ls := levels(n)
	return &Tree{HashOffset: hashOffset, DataBlockSize: dataBlockSize, Blocks: n, levels: ls, start: layout(ls)}, nil
}

// Levels is the number of hash levels; 0 where one data block is the
// whole data (its digest is the root hash).
func (t *Tree) Levels() int { return len(t.levels) }

// HashBlock is the offset of the hash block of level i (0: the data
// blocks' digests) that holds the digest of block k of the level below
// (of the data, for level 0), and the digest's byte offset in it.
func (t *Tree) HashBlock(i int, k uint64) (off int64, at int) {
	blk := t.start[i] + k/hashesPerBlock
	return t.HashOffset + BlockSize + int64(blk)*BlockSize, int(k%hashesPerBlock) * sha256.Size
}

// Digest is the digest of a block of the data or of the tree, as the tree
// and the root hash hold it (the salt first).
func Digest(block []byte) [sha256.Size]byte { return digest(block) }
