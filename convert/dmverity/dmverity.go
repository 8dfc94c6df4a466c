// Package dmverity appends a dm-verity hash tree to a file, in the layout
// veritysetup writes with --hash-offset (its superblock, then the tree, in
// the same file after the data), and checks such a file.
//
// containerd's EROFS snapshotter opens a layer blob that has a sidecar
// (<blob>.dmverity, JSON with the root hash and the superblock's offset) as
// a dm-verity device over the blob itself, so that every block a container
// reads is checked against the root hash; with dmverity_mode "on" it
// refuses layers without one. The parameters are containerd's: SHA-256,
// 4 KiB data and hash blocks, hash type 1, a zero salt of 32 bytes. The
// superblock's UUID is derived from the root hash, so the same data gives
// the same bytes.
//
// The tree is a Merkle tree of SHA-256 digests, each of salt || block. Its
// level 0 holds a digest per data block, 128 to a hash block; each level
// above holds a digest per block of the level below, up to a level of one
// block, whose digest is the root hash (one data block alone has no tree:
// the root is its digest). The levels are stored top first, as the kernel
// looks them up.
package dmverity

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

const (
	// BlockSize is the size of data and hash blocks.
	BlockSize = 4096
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
	// to a block.
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

// TreeSize is the bytes Format appends after dataSize rounded up to a
// block: the superblock's block and the tree.
func TreeSize(dataSize int64) int64 {
	var n uint64
	for _, b := range levels(dataBlocks(dataSize)) {
		n += b
	}
	return int64(n+1) * BlockSize
}

func dataBlocks(size int64) uint64 { return uint64((size + BlockSize - 1) / BlockSize) }

// Format appends the superblock and hash tree of f's first dataSize bytes
// (the last block padded with zeros) to f, and returns the sidecar's
// metadata. f ends up HashOffset + TreeSize(dataSize) bytes long. Memory
// does not grow with the data: each level is read back from f to hash the
// next.
func Format(f File, dataSize int64) (Metadata, error) {
	if dataSize <= 0 {
		return Metadata{}, fmt.Errorf("dm-verity: no data to hash")
	}
	n := dataBlocks(dataSize)
	hashOffset := int64(n) * BlockSize
	ls := levels(n)
	start := layout(ls)
	tree := hashOffset + BlockSize
	if err := f.Truncate(hashOffset + TreeSize(dataSize)); err != nil {
		return Metadata{}, err
	}
	var root [sha256.Size]byte
	if len(ls) == 0 {
		b := make([]byte, BlockSize)
		if _, err := f.ReadAt(b, 0); err != nil && err != io.EOF {
			return Metadata{}, fmt.Errorf("dm-verity: read data: %w", err)
		}
		root = digest(b)
	}
	// Level i hashes the blocks of level i-1 (the data for level 0).
	inOff, inBlocks := int64(0), n
	for i, count := range ls {
		outOff := tree + int64(start[i])*BlockSize
		if err := hashLevel(f, inOff, inBlocks, func(hb []byte, k uint64) error {
			_, err := f.WriteAt(hb, outOff+int64(k)*BlockSize)
			return err
		}); err != nil {
			return Metadata{}, fmt.Errorf("dm-verity: level %d: %w", i, err)
		}
		inOff, inBlocks = outOff, count
	}
	if len(ls) > 0 {
		top := make([]byte, BlockSize)
		if _, err := f.ReadAt(top, inOff); err != nil {
			return Metadata{}, fmt.Errorf("dm-verity: read top level: %w", err)
		}
		root = digest(top)
	}
	if _, err := f.WriteAt(superblock(n, root), hashOffset); err != nil {
		return Metadata{}, err
	}
	return Metadata{RootHash: hex.EncodeToString(root[:]), HashOffset: uint64(hashOffset)}, nil
}

// hashLevel hashes blocks blocks of r from off, and hands each hash block
// (k: its index in the level) to put as it fills, the last one padded.
func hashLevel(r io.ReaderAt, off int64, blocks uint64, put func(hb []byte, k uint64) error) error {
	in := make([]byte, min(batch, blocks)*BlockSize)
	hb := make([]byte, BlockSize)
	h := sha256.New()
	var k uint64
	fill := 0
	for done := uint64(0); done < blocks; {
		m := min(uint64(batch), blocks-done)
		b := in[:m*BlockSize]
		got, err := r.ReadAt(b, off+int64(done)*BlockSize)
		if err != nil && !(err == io.EOF && got > 0) {
			return fmt.Errorf("read block %d: %w", done+uint64(got)/BlockSize, err)
		}
		clear(b[got:]) // the last data block's tail
		for j := uint64(0); j < m; j++ {
			h.Reset()
			h.Write(salt)
			h.Write(b[j*BlockSize : (j+1)*BlockSize])
			h.Sum(hb[fill:fill])
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

func digest(block []byte) [sha256.Size]byte {
	h := sha256.New()
	h.Write(salt)
	h.Write(block)
	var d [sha256.Size]byte
	h.Sum(d[:0])
	return d
}

// superblock is veritysetup's superblock (version 1, little-endian) for n
// data blocks; its UUID is taken from the root hash.
func superblock(n uint64, root [sha256.Size]byte) []byte {
	sb := make([]byte, superblockSize)
	copy(sb[0:8], "verity")
	binary.LittleEndian.PutUint32(sb[8:], 1)  // version
	binary.LittleEndian.PutUint32(sb[12:], 1) // hash type: salt first
	id := sha256.Sum256(append([]byte("ocierofs dm-verity uuid "), root[:]...))
	id[6] = id[6]&0x0f | 0x50 // a name-based UUID (RFC 9562 version 5 bits)
	id[8] = id[8]&0x3f | 0x80
	copy(sb[16:32], id[:16])
	copy(sb[32:64], "sha256")
	binary.LittleEndian.PutUint32(sb[64:], BlockSize)
	binary.LittleEndian.PutUint32(sb[68:], BlockSize)
	binary.LittleEndian.PutUint64(sb[72:], n)
	binary.LittleEndian.PutUint16(sb[80:], uint16(len(salt)))
	copy(sb[88:], salt)
	return sb
}

// CheckLayout checks, without hashing, that a file of fileSize bytes is
// its first dataSize bytes and a tree Format appended, as m describes: the
// offsets, the sizes and the superblock. Verify checks the hashes too.
func CheckLayout(r io.ReaderAt, fileSize, dataSize int64, m Metadata) error {
	n, err := readSuperblock(r, m)
	if err != nil {
		return err
	}
	switch {
	case int64(m.HashOffset) != int64(dataBlocks(dataSize))*BlockSize:
		return fmt.Errorf("dm-verity: hash offset %d, want %d for %d bytes of data", m.HashOffset, int64(dataBlocks(dataSize))*BlockSize, dataSize)
	case n != dataBlocks(dataSize):
		return fmt.Errorf("dm-verity: superblock at offset %d: %d data blocks, want %d", m.HashOffset, n, dataBlocks(dataSize))
	case fileSize != int64(m.HashOffset)+TreeSize(dataSize):
		return fmt.Errorf("dm-verity: %d bytes, want %d (data, superblock and tree)", fileSize, int64(m.HashOffset)+TreeSize(dataSize))
	}
	return nil
}

// readSuperblock checks m's root hash and offset, reads the superblock at
// the offset and returns its data block count.
func readSuperblock(r io.ReaderAt, m Metadata) (uint64, error) {
	if d, err := hex.DecodeString(m.RootHash); err != nil || len(d) != sha256.Size {
		return 0, fmt.Errorf("dm-verity: root hash %q is not a SHA-256 digest in hex", m.RootHash)
	}
	if m.HashOffset == 0 || m.HashOffset%BlockSize != 0 || m.HashOffset > 1<<62 {
		return 0, fmt.Errorf("dm-verity: hash offset %d is not a whole number of %d-byte blocks", m.HashOffset, BlockSize)
	}
	sb := make([]byte, superblockSize)
	if _, err := r.ReadAt(sb, int64(m.HashOffset)); err != nil {
		return 0, fmt.Errorf("dm-verity: superblock at offset %d: %w", m.HashOffset, err)
	}
	n, err := checkSuperblock(sb)
	if err != nil {
		return 0, fmt.Errorf("dm-verity: superblock at offset %d: %w", m.HashOffset, err)
	}
	if n > m.HashOffset/BlockSize {
		return 0, fmt.Errorf("dm-verity: superblock at offset %d: %d data blocks run past it", m.HashOffset, n)
	}
	return n, nil
}

// Verify checks r against m: the superblock at m.HashOffset, every block
// of the tree, and the root hash. The error names the first block found
// wrong.
func Verify(r io.ReaderAt, m Metadata) error {
	n, err := readSuperblock(r, m)
	if err != nil {
		return err
	}
	want, _ := hex.DecodeString(m.RootHash)
	ls := levels(n)
	start := layout(ls)
	tree := int64(m.HashOffset) + BlockSize
	stored := make([]byte, BlockSize)
	inOff, inBlocks := int64(0), n
	for i, count := range ls {
		outOff := tree + int64(start[i])*BlockSize
		if err := hashLevel(r, inOff, inBlocks, func(hb []byte, k uint64) error {
			at := outOff + int64(k)*BlockSize
			if _, err := r.ReadAt(stored, at); err != nil {
				return fmt.Errorf("read hash block at offset %d: %w", at, err)
			}
			if !bytes.Equal(stored, hb) {
				return fmt.Errorf("hash block %d at offset %d does not match the blocks it covers (from offset %d)", k, at, inOff+int64(k)*hashesPerBlock*BlockSize)
			}
			return nil
		}); err != nil {
			return fmt.Errorf("dm-verity: level %d: %w", i, err)
		}
		inOff, inBlocks = outOff, count
	}
	top := make([]byte, BlockSize)
	if _, err := r.ReadAt(top, inOff); err != nil && !(err == io.EOF && len(ls) == 0) {
		return fmt.Errorf("dm-verity: read block at offset %d: %w", inOff, err)
	}
	root := digest(top)
	if !bytes.Equal(root[:], want) {
		return fmt.Errorf("dm-verity: root hash %x, the sidecar says %s", root, m.RootHash)
	}
	return nil
}

// checkSuperblock returns the data block count of a superblock with the
// parameters Format writes, or why it is not one.
func checkSuperblock(sb []byte) (uint64, error) {
	le := binary.LittleEndian
	switch {
	case string(sb[0:8]) != "verity\x00\x00":
		return 0, errors.New("no verity signature")
	case le.Uint32(sb[8:]) != 1:
		return 0, fmt.Errorf("version %d, want 1", le.Uint32(sb[8:]))
	case le.Uint32(sb[12:]) != 1:
		return 0, fmt.Errorf("hash type %d, want 1", le.Uint32(sb[12:]))
	case string(bytes.TrimRight(sb[32:64], "\x00")) != "sha256":
		return 0, fmt.Errorf("hash algorithm %q, want sha256", bytes.TrimRight(sb[32:64], "\x00"))
	case le.Uint32(sb[64:]) != BlockSize || le.Uint32(sb[68:]) != BlockSize:
		return 0, fmt.Errorf("block sizes %d and %d, want %d", le.Uint32(sb[64:]), le.Uint32(sb[68:]), BlockSize)
	case le.Uint16(sb[80:]) != uint16(len(salt)) || !bytes.Equal(sb[88:88+len(salt)], salt):
		return 0, errors.New("not the zero salt of 32 bytes")
	}
	n := le.Uint64(sb[72:])
	if n == 0 {
		return 0, errors.New("no data blocks")
	}
	return n, nil
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
// (a temp file renamed into place).
func WriteSidecar(p string, m Metadata) error {
	raw, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	dst := SidecarPath(p)
	tmp, err := os.CreateTemp(filepath.Dir(dst), ".tmp-"+filepath.Base(dst)+"-")
	if err != nil {
		return err
	}
	_, err = tmp.Write(append(raw, '\n'))
	if err == nil {
		err = tmp.Chmod(0o644)
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), dst)
	}
	if err != nil {
		os.Remove(tmp.Name())
	}
	return err
}
