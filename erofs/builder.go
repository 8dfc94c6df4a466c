package erofs

import (
	"bufio"
	"errors"
	"fmt"
	"hash"
	"io"
	"math/bits"
	"os"
	"path"
	"strings"
	"time"

	"github.com/ocierofs/ocierofs/internal/entrypath"
)

// Options control the image a Builder writes. The zero value is a 4 KiB-block
// image that every kernel since 5.4 mounts.
type Options struct {
	// BlockSize is 4096 by default; 512 … 65536, a power of two. Kernels
	// before 6.4 mount only images whose block size is the page size.
	BlockSize int
	// UUID is written to the superblock; it may also be set later with SetUUID.
	UUID [16]byte
	// BuildTime is recorded in the superblock and is the mtime of directories
	// the input implies but never lists. Zero means: the most common mtime.
	BuildTime time.Time
	// FixedMtime gives every inode BuildTime as its mtime (mkfs.erofs -T
	// without --mkfs-time); ClampMtime gives it to every inode whose mtime
	// is later (mkfs.erofs with $SOURCE_DATE_EPOCH). Both need BuildTime.
	FixedMtime, ClampMtime bool
	// ExtendedInodes writes every inode in the 64-byte extended form
	// (mkfs.erofs -Eforce-inode-extended); by default an inode whose
	// metadata fits the 32-byte compact form, its mtime the build time's,
	// takes that.
	ExtendedInodes bool
	// VolumeName is the label (at most 15 bytes).
	VolumeName string
	// NoInlineData stores every regular file FLAT_PLAIN (containerd's
	// -Enoinline_data): no tail is packed next to its inode.
	NoInlineData bool
	// TempDir holds the spool of inline tails (default os.TempDir()).
	TempDir string
	// Compression, if set, compresses regular files (see Compression).
	Compression *Compression
	// NoDedupe stores every regular file's data, even when an earlier file
	// has the same content (by default it shares that file's blocks).
	// Dedupe needs an output that can be read back and truncated (an
	// *os.File).
	NoDedupe bool
	// Workers is the number of goroutines that compress (0: GOMAXPROCS;
	// at most MaxWorkers). The image does not depend on it.
	Workers int
	// ChunkSize, if set, stores every regular file of at least ChunkSize
	// bytes CHUNK_BASED in chunks of that size (a power of two, at least the
	// block size): a chunk equal to one stored before, in any file, is
	// stored once, and all-zero chunks are holes. Uncompressed images only.
	ChunkSize int
	// Devices are the extra devices the image refers to: device n is
	// Devices[n-1]. UniAddr is computed (as if the devices followed the
	// image in order); Blocks must be set except for the Blob.
	Devices []DeviceSlot
	// Blob, if set, receives the data of every regular file, chunk-based
	// (in chunks of ChunkSize, or of one block), and the image holds
	// metadata only. It is extra device 1; Devices[0], if given, names it.
	// A Blob that is rewound over (chunks larger than 1 MiB turning out to
	// be duplicates) must be truncatable, as an *os.File is.
	Blob io.WriterAt
	// MinKernel, if set, is the oldest kernel that must mount the image:
	// options it cannot mount are refused, and sparse files are stored
	// plainly when it predates chunk-based files.
	MinKernel Kernel
}

// MaxWorkers bounds Options.Workers: each worker holds buffers, and far
// more workers than CPUs only cost memory.
const MaxWorkers = 1024

// Validate reports options no image can be built with.
func (o *Options) Validate() error {
	if bs := o.BlockSize; bs != 0 && (bs < 512 || bs > 65536 || bs&(bs-1) != 0) {
		return fmt.Errorf("erofs: block size %d: want a power of two from 512 to 65536", bs)
	}
	if o.Workers < 0 || o.Workers > MaxWorkers {
		return fmt.Errorf("erofs: %d workers: want 0 (one per CPU) to %d", o.Workers, MaxWorkers)
	}
	if (o.FixedMtime || o.ClampMtime) && o.BuildTime.IsZero() {
		return errors.New("erofs: a fixed or clamped mtime needs a build time")
	}
	if len(o.VolumeName) > 15 {
		return fmt.Errorf("erofs: volume name %q: longer than 15 bytes", o.VolumeName)
	}
	bs := o.BlockSize
	if bs == 0 {
		bs = 4096
	}
	if o.Compression != nil {
		if err := o.Compression.validate(bs); err != nil {
			return err
		}
	}
	if c := o.ChunkSize; c != 0 && (c < bs || c&(c-1) != 0 || uint64(c) > uint64(bs)<<maxChunkBits) {
		return fmt.Errorf("erofs: chunk size %d: want a power of two from the block size %d up", c, bs)
	}
	if (o.ChunkSize != 0 || o.Blob != nil) && o.Compression != nil {
		return errors.New("erofs: chunk-based files (chunk size, blob) are uncompressed: they exclude compression")
	}
	if len(o.Devices) > 0xFFFF {
		return fmt.Errorf("erofs: %d extra devices: at most 65535", len(o.Devices))
	}
	for i, d := range o.Devices {
		if len(d.Tag) > deviceTagSize {
			return fmt.Errorf("erofs: device %d: tag %q longer than %d bytes", i+1, d.Tag, deviceTagSize)
		}
		if d.Blocks >= 1<<32 {
			return fmt.Errorf("erofs: device %d: %d blocks exceed 2^32", i+1, d.Blocks)
		}
	}
	return o.checkKernel(bs)
}

// Builder writes an EROFS image from a stream of entries. It is not safe for
// concurrent use.
type Builder struct {
	blockWriter // the data area, from block firstBlk on
	opt         Options
	blkbits     uint
	root        *node
	ninodes     int
	chunked     bool
	spool       *tailSpool
	z           *zwriter // compression, if on
	zp          *zpipe   // its workers
	packed      *inode   // the packed inode of fragments, made by Finish
	scratch     []byte   // one block, reused
	finished    bool
	lastDir     string // the directory mkdirAll returned last, and its node
	lastDirNode *node
	dirents     map[*inode][]*node // of each directory, made by Finish
	devEnd      []uint64           // of each extra device of unknown size, where its chunks end (AddChunks)
	err         error              // sticky: after a failed Add the image is unusable

	// Whole-file dedupe (dedupe.go).
	dups         map[dupKey]dupOrig
	dupMore      map[dupKey][]dupOrig // further candidates of colliding keys
	chunkDups    map[chunkKey]dupOrig // chunk-based files
	dedupedBytes int64
	trunc        interface{ Truncate(int64) error } // w, if it can shrink
	rdr          io.ReaderAt                        // w, if it can be read back

	// Chunk dedupe (chunk.go).
	chunks     chunkTable
	chunkBuf   []byte
	chunkHash  hash.Hash
	chunkSaved int64
	blob       *blockWriter // Options.Blob, device 1
	// tailSharers are, per file with an inline tail, the later files with
	// the same content, until promoteTail moves the tail to a block. A
	// map beside the inodes: few files have copies.
	tailSharers map[*inode][]*inode
}

// node is a name in the tree; hard links are several nodes sharing an inode.
type node struct {
	name string
	ino  *inode
	dir  *dirIndex // the entries of a directory; nil for others
}

// inode is everything Finish needs to lay an inode out. It holds no file
// data: full blocks are already on the output, tails are in the spool.
type inode struct {
	// Fields are ordered by size, so that the struct has no padding: a
	// layer holds one per entry, and it stays in memory until Finish.
	mtime      int64
	size       uint64
	z          *zfile  // compressed layouts
	tail       tailRef // inline tail of a regular file, in the spool
	*inodeRare         // xattrs, symlink target, device, chunks: &noRare if none
	uid, gid   uint32
	nsec       uint32
	startBlk   uint32   // first data block of streamed data
	nlink      uint32   // set by Finish
	slot       uint32   // set by Finish: where the record is in the meta area, in slots
	meta       metaPlan // set by Finish
	mode       uint16   // st_mode: 4 bits of file type, 12 of permissions
	layout     uint8
	implied    bool // a directory no entry declared
}

// inodeRare holds what few entries of a layer have. Inodes without any
// share noRare, which is never written: rare gives an inode its own before
// a write, and Finish checks that noRare is still empty.
type inodeRare struct {
	xattrs    []Xattr    // sorted by name
	target    string     // symlink target
	chunks    []chunkRun // chunk-based file
	nchunks   uint64     // index entries of a chunk-based file
	rdev      uint32
	chunkBits uint8 // log2(blocks per chunk) of a chunk-based file
}

var noRare inodeRare

// rare returns ino's own inodeRare, to write to.
func (ino *inode) rare() *inodeRare {
	if ino.inodeRare == &noRare {
		ino.inodeRare = new(inodeRare)
	}
	return ino.inodeRare
}

// setChunks sets the chunk map of ino; an inode without one keeps noRare.
func (ino *inode) setChunks(chunks []chunkRun, n uint64, chunkBits uint8) {
	if chunks == nil && n == 0 && chunkBits == 0 && ino.inodeRare == &noRare {
		return
	}
	r := ino.rare()
	r.chunks, r.nchunks, r.chunkBits = chunks, n, chunkBits
}

// noRareWritten reports a write to the shared noRare: a bug that would
// give its fields to every inode without its own.
func noRareWritten() error {
	if noRare.xattrs != nil || noRare.target != "" || noRare.chunks != nil || noRare.nchunks != 0 || noRare.rdev != 0 || noRare.chunkBits != 0 {
		return errors.New("erofs: internal: the inodes' shared empty xattrs, target and chunks were written to")
	}
	return nil
}

// nid is the inode's number: where Finish placed its record, in slots.
func (ino *inode) nid() uint64 { return uint64(ino.slot) }

// pos is the byte offset of the inode's record from the meta area start.
func (ino *inode) pos() uint64 { return uint64(ino.slot) * SlotSize }

// NewBuilder returns a Builder writing to w, which is normally an *os.File.
// Bytes are written mostly in order, the superblock last. Finish writes
// the inode area from several goroutines at once, with parallel WriteAt
// calls on disjoint ranges, as io.WriterAt allows.
func NewBuilder(w io.WriterAt, opt Options) (*Builder, error) {
	if err := opt.Validate(); err != nil {
		return nil, err
	}
	bs := opt.BlockSize
	if bs == 0 {
		bs = 4096
	}
	b := &Builder{
		blockWriter: blockWriter{w: w, bs: bs},
		opt:         opt,
		blkbits:     uint(bits.TrailingZeros(uint(bs))),
		scratch:     make([]byte, bs),
	}
	b.trunc, _ = w.(interface{ Truncate(int64) error })
	b.rdr, _ = w.(io.ReaderAt)
	b.opt.BlockSize = bs
	b.opt.Devices = append([]DeviceSlot(nil), opt.Devices...)
	if opt.Blob != nil {
		if len(b.opt.Devices) == 0 {
			b.opt.Devices = []DeviceSlot{{}}
		}
		blob := newBlockWriter(opt.Blob, bs, 0)
		b.blob = &blob
	}
	if opt.ChunkSize > chunkBufSize && b.trunc == nil && opt.Blob == nil {
		return nil, errors.New("erofs: chunks larger than 1 MiB need an output that can be truncated")
	}
	if opt.Compression != nil {
		c := *opt.Compression // the caller may reuse its options
		z, err := newZwriter(&c, bs)
		if err != nil {
			return nil, err
		}
		b.z = z
		b.zp = newZpipe(z, bs, b.blkbits, opt.Workers)
	} else if b.dedupes() && opt.Blob == nil {
		// Uncompressed files go through the pipeline for their hashes
		// (writePlain), if there is more than one worker.
		if zp := newZpipe(nil, bs, b.blkbits, opt.Workers); zp.workers > 1 {
			b.zp = zp
		}
	}
	b.blockWriter = newBlockWriter(w, bs, b.firstBlk())
	b.root = &node{ino: b.impliedInode("."), dir: new(dirIndex)}
	b.ninodes = 1
	return b, nil
}

// firstBlk is the first block after the superblock's checksummed region
// and the device table.
func (b *Builder) firstBlk() uint64 {
	end := SuperOffset + b.bs
	if b.bs > SuperOffset {
		end = b.bs
	}
	if n := len(b.opt.Devices); n > 0 {
		end = max(end, b.devtOff()+n*deviceSlotSize)
	}
	return uint64((end + b.bs - 1) / b.bs)
}

// devtOff is the byte offset of the device table: after the superblock
// and the compression config records, 128-byte aligned.
func (b *Builder) devtOff() int {
	if b.opt.Compression != nil {
		return SuperOffset + SuperSize + 128 // room for the config records
	}
	return SuperOffset + SuperSize
}

// SetUUID sets the superblock UUID; callers that derive it from the input
// (containerd derives it from the layer's diffID) call it before Finish.
func (b *Builder) SetUUID(u [16]byte) { b.opt.UUID = u }

// BlockSize returns the image block size.
func (b *Builder) BlockSize() int { return b.bs }

// CleanPath reports the tree path the Builder uses for an entry name ("" is
// the root), or an error for a name that cannot be stored. A name that
// escapes the root ("../x") is an error: the Builder never silently
// re-roots it.
func CleanPath(name string) (string, error) {
	p, err := entrypath.Clean(name)
	if err != nil {
		return "", err
	}
	for start := 0; start < len(p); {
		end := strings.IndexByte(p[start:], '/')
		if end < 0 {
			end = len(p) - start
		}
		if end > MaxNameLen {
			return "", fmt.Errorf("name component longer than %d bytes", MaxNameLen)
		}
		start += end + 1
	}
	return p, nil
}

// EntryError is the error of an entry's data. Add returns it when the
// entry's data cannot be read or written, and a later Add or Finish for an
// earlier entry whose data turned out bad only when it was compressed or
// written (DataAt data that ends early, an output that fails); that error
// names the earlier entry alone.
type EntryError struct {
	Path string
	Err  error
}

func (e *EntryError) Error() string { return fmt.Sprintf("erofs: entry %q: %v", e.Path, e.Err) }
func (e *EntryError) Unwrap() error { return e.Err }

func (b *Builder) fail(err error) error {
	if b.err == nil {
		b.err = err
	}
	return err
}

// Add adds one entry. data supplies a regular file's Size bytes and is not
// read for other types. Parents that do not exist yet are created as implied
// directories. A later entry for an existing path replaces it, except that a
// directory over a directory only takes the new metadata.
func (b *Builder) Add(e Entry, data io.Reader) error {
	if e.HardLink != "" {
		return b.addHardLink(e.Path, e.HardLink)
	}
	ino, err := b.newFile(e, func(ino *inode) error {
		if ino.mode&S_IFMT == S_IFREG && e.Size > 0 {
			return b.writeData(ino, &e, data)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return b.putAt(e.Path, ino)
}

// A File is a regular file whose data the Builder has written (WriteFile,
// WriteChunks) and that Link names in the tree: a File linked at several
// paths is one inode with hard links, and one never linked is left out
// (its data stays in the image, unreferenced). A converter that learns
// only at the end of its input which entries remain writes their data
// as it streams by and links what remains.
type File struct{ ino *inode }

// WriteFile writes the data of e, a regular file (data supplies its Size
// bytes), and returns it unlinked.
func (b *Builder) WriteFile(e Entry, data io.Reader) (*File, error) {
	if e.Mode&S_IFMT != S_IFREG || e.HardLink != "" {
		return nil, fmt.Errorf("erofs: entry %q: WriteFile needs a regular file", e.Path)
	}
	ino, err := b.newFile(e, func(ino *inode) error {
		if e.Size > 0 {
			return b.writeData(ino, &e, data)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &File{ino: ino}, nil
}

// DataOffset is the byte offset in the image at which the data of the
// next file written goes, once the files written so far are laid out (it
// waits for their compression). The data written after it runs to the
// metadata, which follows the data: a converter that writes some files
// last (a prefetch list's) learns where their region begins.
func (b *Builder) DataOffset() (int64, error) {
	if err := b.usable(); err != nil {
		return 0, err
	}
	if b.zp != nil {
		if err := b.zp.drain(b); err != nil {
			return 0, b.fail(err)
		}
	}
	return int64(b.outBlk) << b.blkbits, nil
}

// Link names f at p, as Add would add it there.
func (b *Builder) Link(p string, f *File) error {
	return b.putAt(p, f.ino)
}

// newFile makes e's inode, which fill gives its data. A failed fill
// leaves the output out of step with the tree, so its error is sticky.
func (b *Builder) newFile(e Entry, fill func(*inode) error) (*inode, error) {
	if err := b.usable(); err != nil {
		return nil, err
	}
	if _, err := CleanPath(e.Path); err != nil {
		return nil, fmt.Errorf("erofs: entry %q: %w", e.Path, err)
	}
	ino, err := b.newInode(&e)
	if err != nil {
		return nil, fmt.Errorf("erofs: entry %q: %w", e.Path, err)
	}
	if err := fill(ino); err != nil {
		// An earlier entry's error, found when its data was compressed
		// or written, names that entry.
		if _, ok := err.(*EntryError); !ok {
			err = &EntryError{Path: e.Path, Err: err}
		}
		return nil, b.fail(err)
	}
	return ino, nil
}

// usable is the error that stops every Add: an earlier sticky one, or
// Finish having run.
func (b *Builder) usable() error {
	if b.err != nil {
		return b.err
	}
	if b.finished {
		return errors.New("erofs: Add after Finish")
	}
	return nil
}

// putAt puts ino at the path name in the tree.
func (b *Builder) putAt(name string, ino *inode) error {
	if err := b.usable(); err != nil {
		return err
	}
	p, err := CleanPath(name)
	if err != nil {
		return fmt.Errorf("erofs: entry %q: %w", name, err)
	}
	if p == "" {
		if !ino.isDir() {
			return fmt.Errorf("erofs: entry %q: the root must be a directory", name)
		}
		b.root.ino = ino
		return nil
	}
	parent, err := b.mkdirAll(path.Dir(p))
	if err != nil {
		return fmt.Errorf("erofs: entry %q: %w", name, err)
	}
	// A copy, so that the node does not keep the whole path alive.
	base := strings.Clone(path.Base(p))
	old := parent.dir.get(base)
	if old != nil && old.ino.isDir() && ino.isDir() {
		old.ino = ino
		return nil
	}
	if old != nil {
		b.lastDir = "" // it may be old or below it
	}
	n := &node{name: base, ino: ino}
	if ino.isDir() {
		n.dir = new(dirIndex)
	}
	parent.dir.put(n)
	b.ninodes++
	return nil
}

func (b *Builder) addHardLink(name, target string) error {
	if err := b.usable(); err != nil {
		return err
	}
	p, err := CleanPath(name)
	if err != nil {
		return fmt.Errorf("erofs: entry %q: %w", name, err)
	}
	tp, err := CleanPath(target)
	if err != nil {
		return fmt.Errorf("erofs: entry %q: hard link target %q: %w", p, target, err)
	}
	t := b.lookup(tp)
	if t == nil {
		return fmt.Errorf("erofs: entry %q: hard link to missing %q", p, target)
	}
	if t.ino.isDir() {
		return fmt.Errorf("erofs: entry %q: hard link to directory %q", p, target)
	}
	if p == "" {
		return fmt.Errorf("erofs: entry %q: hard link as the root", p)
	}
	if p == tp {
		return nil
	}
	parent, err := b.mkdirAll(path.Dir(p))
	if err != nil {
		return fmt.Errorf("erofs: entry %q: %w", p, err)
	}
	if parent.dir.put(&node{name: strings.Clone(path.Base(p)), ino: t.ino}) != nil {
		b.lastDir = "" // it may be the replaced node or below it
	}
	return nil
}

// SetXattr sets an xattr on the entry at p, creating p as an implied
// directory if it does not exist. Whiteout translation uses it for
// directory markers whose directory entry may come later in the stream.
func (b *Builder) SetXattr(p, name string, value []byte) error {
	cp, err := CleanPath(p)
	if err != nil {
		return fmt.Errorf("erofs: entry %q: %w", p, err)
	}
	if _, _, err := xattrPrefix(name); err != nil {
		return fmt.Errorf("erofs: entry %q: xattr %q: %w", p, name, err)
	}
	n, err := b.mkdirAll(cp)
	if err != nil {
		return fmt.Errorf("erofs: entry %q: %w", p, err)
	}
	n.ino.rare().xattrs = setXattr(n.ino.xattrs, Xattr{Name: name, Value: append([]byte(nil), value...)})
	return nil
}

// MkdirAll makes p and its missing parents implied directories: they
// exist, mode 0755, owned by root, with the image's time, until an Add
// gives them metadata.
func (b *Builder) MkdirAll(p string) error {
	cp, err := CleanPath(p)
	if err != nil {
		return fmt.Errorf("erofs: directory %q: %w", p, err)
	}
	if _, err := b.mkdirAll(cp); err != nil {
		return fmt.Errorf("erofs: directory %q: %w", p, err)
	}
	return nil
}

func (b *Builder) lookup(p string) *node {
	n := b.root
	if p == "" {
		return n
	}
	for c := range strings.SplitSeq(p, "/") {
		if n.dir == nil {
			return nil
		}
		if n = n.dir.get(c); n == nil {
			return nil
		}
	}
	return n
}

// mkdirAll returns the directory at p, creating implied directories on the
// way. A non-directory in the way is an error, as it is for tar extraction.
func (b *Builder) mkdirAll(p string) (*node, error) {
	n := b.root
	if p == "" || p == "." {
		return n, nil
	}
	if p == b.lastDir {
		return b.lastDirNode, nil
	}
	for i := 0; i < len(p); {
		j := strings.IndexByte(p[i:], '/')
		if j < 0 {
			j = len(p)
		} else {
			j += i
		}
		c := p[i:j]
		next := n.dir.get(c)
		if next != nil && !next.ino.isDir() {
			return nil, fmt.Errorf("parent %q is not a directory", p[:j])
		}
		if next == nil {
			c = strings.Clone(c)
			next = &node{name: c, ino: b.impliedInode(p[:j]), dir: new(dirIndex)}
			n.dir.put(next)
			b.ninodes++
		}
		n = next
		i = j + 1
	}
	// Entries come mostly directory by directory: the next one likely
	// has the same parent.
	b.lastDir, b.lastDirNode = strings.Clone(p), n
	return n, nil
}

// impliedInode is a directory the input needs but has not declared; its
// time is settled in Finish.
func (b *Builder) impliedInode(string) *inode {
	return &inode{mode: S_IFDIR | 0o755, implied: true, inodeRare: &noRare}
}

func (ino *inode) isDir() bool { return ino.mode&S_IFMT == S_IFDIR }

// newInode validates an entry and turns its metadata into an inode.
func (b *Builder) newInode(e *Entry) (*inode, error) {
	ino := &inode{
		mode:      uint16(e.Mode),
		uid:       e.Uid,
		gid:       e.Gid,
		inodeRare: &noRare,
	}
	mt := e.Mtime
	if o := &b.opt; o.FixedMtime || o.ClampMtime && mt.After(o.BuildTime) {
		mt = o.BuildTime.Truncate(time.Second)
	}
	if !mt.IsZero() {
		ino.mtime = mt.Unix()
		ino.nsec = uint32(mt.Nanosecond())
	}
	if e.Mode&^uint32(S_IFMT|0o7777) != 0 {
		return nil, fmt.Errorf("mode %#o has unknown bits", e.Mode)
	}
	switch e.Mode & S_IFMT {
	case S_IFREG:
		if e.Size < 0 {
			return nil, fmt.Errorf("negative size %d", e.Size)
		}
		ino.size = uint64(e.Size)
	case S_IFDIR, S_IFIFO, S_IFSOCK:
	case S_IFLNK:
		if e.Linkname == "" {
			return nil, errors.New("symlink with an empty target")
		}
		if len(e.Linkname) > 4095 {
			return nil, fmt.Errorf("symlink target of %d bytes: the limit is 4095", len(e.Linkname))
		}
		if strings.IndexByte(e.Linkname, 0) >= 0 {
			return nil, errors.New("symlink target contains NUL")
		}
		ino.rare().target = e.Linkname
		ino.size = uint64(len(e.Linkname))
	case S_IFCHR, S_IFBLK:
		if e.Devmajor > 0xFFF || e.Devminor > 0xFFFFF {
			return nil, fmt.Errorf("device %d:%d outside the 12-bit major, 20-bit minor range", e.Devmajor, e.Devminor)
		}
		ino.rare().rdev = encodeDev(e.Devmajor, e.Devminor)
	default:
		return nil, fmt.Errorf("mode %#o: unknown file type", e.Mode)
	}
	for _, x := range e.Xattrs {
		if _, _, err := xattrPrefix(x.Name); err != nil {
			return nil, fmt.Errorf("xattr %q: %w", x.Name, err)
		}
		if len(x.Value) > maxXattrValueSize {
			return nil, fmt.Errorf("xattr %q: value of %d bytes exceeds %d", x.Name, len(x.Value), maxXattrValueSize)
		}
		ino.rare().xattrs = setXattr(ino.xattrs, Xattr{Name: x.Name, Value: append([]byte(nil), x.Value...)})
	}
	return ino, nil
}

// Close releases temporary resources without writing the image; it is safe
// to call after Finish.
func (b *Builder) Close() error {
	// The output first: it may still read the pipeline's ring.
	if b.out != nil {
		b.out.Close()
	}
	if b.zp != nil {
		b.zp.stop()
	}
	if b.blob != nil {
		b.blob.out.Close()
	}
	var err error
	if b.spool != nil {
		err = b.spool.close()
		b.spool = nil
	}
	if b.z != nil && b.z.packed != nil {
		if e := b.z.packed.close(); err == nil {
			err = e
		}
		b.z.packed = nil
	}
	return err
}

// tailSpool keeps the inline tails of regular files until Finish lays them
// out next to their inodes. It is an unlinked temp file, so memory stays
// bounded by the number of entries, not by their data.
type tailSpool struct {
	f   *os.File
	w   *bufio.Writer
	off int64
}

// tailRef is where a tail is in the spool: its offset times 2^16 plus its
// length, which is under a block. An inode holds one: 8 bytes, not 16.
type tailRef uint64

// maxSpool is the most bytes the spool holds (offsets have 48 bits).
const maxSpool = 1 << 48

func (r tailRef) off() int64 { return int64(r >> 16) }
func (r tailRef) n() int     { return int(r & 0xFFFF) }

func (b *Builder) spoolTail(p []byte) (tailRef, error) {
	if b.spool == nil {
		f, err := os.CreateTemp(b.opt.TempDir, "ocierofs-tails-*")
		if err != nil {
			return 0, err
		}
		os.Remove(f.Name())
		b.spool = &tailSpool{f: f, w: bufio.NewWriterSize(f, 256<<10)}
	}
	s := b.spool
	if len(p) > 0xFFFF || s.off+int64(len(p)) > maxSpool {
		return 0, fmt.Errorf("internal: a tail of %d bytes at %d in the spool", len(p), s.off)
	}
	if _, err := s.w.Write(p); err != nil {
		return 0, fmt.Errorf("tail spool: %w", err)
	}
	r := tailRef(s.off<<16 | int64(len(p)))
	s.off += int64(len(p))
	return r, nil
}

func (s *tailSpool) readAt(p []byte, off int64) error {
	if s.w.Buffered() > 0 {
		if err := s.w.Flush(); err != nil {
			return err
		}
	}
	_, err := s.f.ReadAt(p, off)
	return err
}

func (s *tailSpool) close() error { return s.f.Close() }
