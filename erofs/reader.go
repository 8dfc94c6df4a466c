package erofs

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"strings"
	"sync"
)

// Limits that keep a hostile image from making the reader loop or allocate
// without bound. Every other size is checked against the image size.
const (
	// maxLinkHops is the number of symbolic links one path lookup may follow
	// (Linux's MAXSYMLINKS).
	maxLinkHops = 40
	// maxLinkTarget is the longest symlink target the reader accepts
	// (PATH_MAX); the kernel refuses longer ones too.
	maxLinkTarget = 4096
	// maxWalkDepth bounds how many directories deep a lookup may go: a
	// PATH_MAX path has at most 2048 components.
	maxWalkDepth = 2048
	// inodeCacheSize is how many decoded inodes an Image keeps.
	inodeCacheSize = 4096
	// readFileFloor is the least ReadFile will allocate for a file larger
	// than the image itself (a sparse file).
	readFileFloor = 64 << 20
)

// Image is an EROFS image opened for reading. It implements fs.FS,
// fs.ReadDirFS, fs.StatFS and fs.ReadFileFS, and is safe for concurrent use.
//
// Path names follow io/fs rules ("." is the root, "a/b", no leading slash).
// Symbolic links are resolved inside the image as a chroot would: an absolute
// target starts again at the image root and ".." never climbs above it. Open,
// Stat, ReadDir and ReadFile follow every link; Lstat, Readlink and Xattrs
// follow the links in the leading components but not the final one, like
// lstat(2).
//
// Open does not reject an image whose superblock checksum does not match,
// so that damaged images can still be inspected; see SuperInfo.ChecksumOK.
type Image struct {
	r     io.ReaderAt
	size  int64
	sb    superBlock
	info  SuperInfo
	bs    int64
	bits  uint
	meta  int64 // byte offset of nid 0
	total int64 // bytes addressable on all devices, bounds directory sizes
	devs  []imgDevice
	flat  bool
	root  *Inode

	prefixOnce sync.Once
	prefixes   []longPrefix
	prefixErr  error

	mu    sync.Mutex
	cache map[uint64]*Inode

	blockBufs sync.Pool // *[]byte of one block, for directory reads

	packedOnce sync.Once
	packed     *packedInode
	packedErr  error
}

// SuperInfo is the decoded superblock of an image.
type SuperInfo struct {
	BlockSize        int
	FeatureCompat    uint32
	FeatureIncompat  uint32
	RootNid          uint64
	Inos             uint64
	Epoch            int64
	FixedNsec        uint32
	Blocks           uint64
	MetaBlkAddr      uint32
	XattrBlkAddr     uint32
	UUID             [16]byte
	VolumeName       string
	ExtraDevices     uint16
	DevtSlotOff      uint16
	XattrPrefixCount uint8
	XattrPrefixStart uint32
	Checksum         uint32
	// ChecksumOK is true when the image has no superblock checksum or the
	// stored one matches.
	ChecksumOK bool
	BuildTime  uint32
	PackedNid  uint64
	// U1 is available_compr_algs with FeatureIncompatComprCfgs, else
	// lz4_max_distance.
	U1 uint16
}

// DeviceSlot is one entry of the device table.
type DeviceSlot struct {
	// Tag identifies the device (a path, a blob digest); it may be empty.
	Tag string
	// Blocks is the size of the device in blocks.
	Blocks uint64
	// UniAddr is the first block of the device in the unified address
	// space, where flat mode finds it inside the primary device.
	UniAddr uint64
}

// imgDevice is a device data can be read from: index 0 is the image itself,
// index n is extra device n. r is nil when the caller did not supply it.
type imgDevice struct {
	DeviceSlot
	r    io.ReaderAt
	size int64
}

// OpenOption configures Open.
type OpenOption func(*openConfig)

type openConfig struct {
	devs []imgDevice
	flat bool
}

// WithDevice supplies the next extra device (blob) of a multi-device image:
// the first call is device 1. The number supplied must equal the image's
// device count, as for mount -o device=.
func WithDevice(r io.ReaderAt, size int64) OpenOption {
	return func(c *openConfig) {
		c.devs = append(c.devs, imgDevice{r: r, size: size})
	}
}

// WithFlatDevices reads extra devices from the image itself, at the
// positions their device slots give (UniAddr), the way Linux 6.4+ mounts a
// multi-device image given no device= option: this suits an image that was
// concatenated with its blobs.
func WithFlatDevices() OpenOption {
	return func(c *openConfig) { c.flat = true }
}

// Incompatible features this reader understands. Compressed layouts are
// recognised in inodes (their data is not readable yet) so the rest of a
// compressed image can still be listed.
const readerIncompat = FeatureIncompatZeroPadding | FeatureIncompatComprCfgs |
	FeatureIncompatChunkedFile | FeatureIncompatDeviceTable |
	FeatureIncompatZTailPacking | FeatureIncompatFragments |
	FeatureIncompatXattrPrefixes | FeatureIncompat48Bit

const featureCompatPlainXattrPfx uint32 = 0x10

const (
	deviceSlotSize = 128
	deviceTagSize  = 64
)

// Open reads the superblock and root inode of an image of the given size.
// Extra devices of a multi-device image are given with WithDevice or
// WithFlatDevices; without them, reading data that lives on an extra device
// fails.
func Open(r io.ReaderAt, size int64, opts ...OpenOption) (*Image, error) {
	var cfg openConfig
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.flat && len(cfg.devs) > 0 {
		return nil, errors.New("erofs: WithDevice and WithFlatDevices exclude each other")
	}
	img, err := openSuper(r, size, cfg)
	if err != nil {
		return nil, err
	}
	if err := img.initDevices(cfg.devs); err != nil {
		return nil, err
	}
	root, err := img.loadInode(img.info.RootNid)
	if err != nil {
		return nil, err
	}
	if !root.IsDir() {
		return nil, fmt.Errorf("erofs: root nid %d is not a directory", root.Nid)
	}
	img.root = root
	return img, nil
}

// ReadSuper decodes the superblock of an image of the given size alone,
// without its root inode: what can be told of an image too damaged (cut
// short, say) to open.
func ReadSuper(r io.ReaderAt, size int64) (SuperInfo, error) {
	img, err := openSuper(r, size, openConfig{})
	if err != nil {
		return SuperInfo{}, err
	}
	return img.info, nil
}

// openSuper reads and checks the superblock: Open without devices and root.
// ErrNotImage is the error of opening what is not an EROFS image.
var ErrNotImage = errors.New("not an EROFS image")

func openSuper(r io.ReaderAt, size int64, cfg openConfig) (*Image, error) {
	if size < SuperOffset+SuperSize {
		return nil, fmt.Errorf("erofs: image of %d bytes is too small for a superblock", size)
	}
	img := &Image{r: r, size: size, flat: cfg.flat, cache: make(map[uint64]*Inode)}
	raw := make([]byte, SuperSize)
	if err := img.readFull(raw, SuperOffset); err != nil {
		return nil, fmt.Errorf("erofs: reading superblock: %w", err)
	}
	sb := &img.sb
	sb.unmarshal(raw)
	if sb.Magic != SuperMagic {
		return nil, fmt.Errorf("%w (no EROFS magic at byte %d)", ErrNotImage, SuperOffset)
	}
	// The kernel accepts 9..PAGE_SHIFT; 16 covers 64 KiB pages and keeps
	// block buffers small.
	if sb.BlkSzBits < 9 || sb.BlkSzBits > 16 {
		return nil, fmt.Errorf("erofs: unsupported block size 2^%d", sb.BlkSzBits)
	}
	if sb.DirBlkBits != 0 {
		return nil, fmt.Errorf("erofs: unsupported dirblkbits %d", sb.DirBlkBits)
	}
	if sb.FeatureIncompat&FeatureIncompatMetabox != 0 {
		return nil, errors.New("erofs: metabox images are not supported")
	}
	if bad := sb.FeatureIncompat &^ readerIncompat; bad != 0 {
		return nil, fmt.Errorf("erofs: unsupported incompatible features %#x", bad)
	}
	img.bits = uint(sb.BlkSzBits)
	img.bs = 1 << img.bits
	img.meta = int64(sb.MetaBlkAddr) << img.bits

	info := SuperInfo{
		BlockSize:        int(img.bs),
		FeatureCompat:    sb.FeatureCompat,
		FeatureIncompat:  sb.FeatureIncompat,
		RootNid:          uint64(sb.RootNid),
		Inos:             sb.Inos,
		Epoch:            int64(sb.Epoch),
		FixedNsec:        sb.FixedNsec,
		Blocks:           uint64(sb.Blocks),
		MetaBlkAddr:      sb.MetaBlkAddr,
		XattrBlkAddr:     sb.XattrBlkAddr,
		UUID:             sb.UUID,
		VolumeName:       cString(sb.VolumeName[:]),
		DevtSlotOff:      sb.DevtSlotOff,
		XattrPrefixCount: sb.XattrPrefixCount,
		XattrPrefixStart: sb.XattrPrefixStart,
		Checksum:         sb.Checksum,
		ChecksumOK:       true,
		BuildTime:        sb.BuildTime,
		PackedNid:        sb.PackedNid,
		U1:               sb.U1,
	}
	if sb.FeatureIncompat&FeatureIncompat48Bit != 0 {
		// rootnid_8b, when set, replaces the 16-bit root nid, whose bytes
		// then carry the high bits of the block count.
		if nid := le.Uint64(raw[0x70:]); nid != 0 {
			info.RootNid = nid
			info.Blocks |= uint64(sb.RootNid) << 32
		}
	}
	if sb.FeatureCompat&FeatureCompatSBChksum != 0 {
		info.ChecksumOK = img.checksumOK()
	}
	if sb.FeatureIncompat&FeatureIncompatDeviceTable != 0 {
		info.ExtraDevices = sb.ExtraDevices
	}
	img.info = info
	return img, nil
}

// checksumOK verifies the superblock checksum. A region that runs past the
// image end cannot match.
func (img *Image) checksumOK() bool {
	end := img.bs
	if img.bs <= SuperOffset {
		end = SuperOffset + img.bs
	}
	if end > img.size {
		return false
	}
	block0 := make([]byte, end)
	if err := img.readFull(block0, 0); err != nil {
		return false
	}
	return superChecksum(block0, int(img.bs)) == img.sb.Checksum
}

// Super returns the decoded superblock.
func (img *Image) Super() SuperInfo { return img.info }

// Root returns the root directory inode.
func (img *Image) Root() *Inode { c := *img.root; return &c }

// readFull reads exactly len(p) bytes at off of the primary device, refusing
// ranges that leave the image before touching the reader.
func (img *Image) readFull(p []byte, off int64) error {
	if off < 0 || off > img.size || int64(len(p)) > img.size-off {
		return fmt.Errorf("range %d+%d outside the image (%d bytes)", off, len(p), img.size)
	}
	return readFullAt(img.r, p, off)
}

// readFullAt is io.ReadFull for an io.ReaderAt: a short read is an error
// even if the reader says io.EOF.
func readFullAt(r io.ReaderAt, p []byte, off int64) error {
	n, err := r.ReadAt(p, off)
	if n == len(p) {
		return nil
	}
	if err == nil || err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return err
}

// blkOff converts a block address into a byte offset, or fails if that does
// not fit an int64.
func (img *Image) blkOff(blk uint64) (int64, error) {
	if blk > uint64(math.MaxInt64)>>img.bits {
		return 0, fmt.Errorf("block address %#x out of range", blk)
	}
	return int64(blk) << img.bits, nil
}

// cString returns b up to its first NUL.
func cString(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}

// Open opens the named file, following symbolic links. Directories
// implement fs.ReadDirFile; other files implement io.ReaderAt and io.Seeker.
func (img *Image) Open(name string) (fs.File, error) {
	ino, err := img.walk("open", name, true)
	if err != nil {
		return nil, err
	}
	return img.openInode("open", name, ino)
}

// Stat returns a FileInfo for the named file, following symbolic links.
func (img *Image) Stat(name string) (fs.FileInfo, error) {
	ino, err := img.walk("stat", name, true)
	if err != nil {
		return nil, err
	}
	return ino.FileInfo(), nil
}

// Lstat returns the inode of the named file; a final symbolic link is not
// followed.
func (img *Image) Lstat(name string) (*Inode, error) {
	return img.walk("lstat", name, false)
}

// ReadFile returns the content of the named file, following symbolic links.
// It refuses a file larger than both the image and 64 MiB (a sparse file or a
// hostile size): stream such files through Open instead.
func (img *Image) ReadFile(name string) ([]byte, error) {
	ino, err := img.walk("readfile", name, true)
	if err != nil {
		return nil, err
	}
	if ino.IsDir() {
		return nil, &fs.PathError{Op: "readfile", Path: name, Err: errIsDir}
	}
	size := dataSize(ino)
	if size > max(img.total, readFileFloor) {
		return nil, &fs.PathError{Op: "readfile", Path: name,
			Err: fmt.Errorf("erofs: nid %d: file of %d bytes is too large for ReadFile", ino.Nid, size)}
	}
	ra, err := img.dataReader(ino)
	if err != nil {
		return nil, &fs.PathError{Op: "readfile", Path: name, Err: err}
	}
	buf := make([]byte, size)
	if err := readFullAt(ra, buf, 0); err != nil {
		return nil, &fs.PathError{Op: "readfile", Path: name, Err: err}
	}
	return buf, nil
}

// Readlink returns the target of the named symbolic link.
func (img *Image) Readlink(name string) (string, error) {
	ino, err := img.walk("readlink", name, false)
	if err != nil {
		return "", err
	}
	if !ino.IsSymlink() {
		return "", &fs.PathError{Op: "readlink", Path: name, Err: fs.ErrInvalid}
	}
	t, err := img.readlink(ino)
	if err != nil {
		return "", &fs.PathError{Op: "readlink", Path: name, Err: err}
	}
	return t, nil
}

// Xattrs returns the extended attributes of the named file (a final
// symbolic link is not followed), sorted by name.
func (img *Image) Xattrs(name string) ([]Xattr, error) {
	ino, err := img.walk("xattrs", name, false)
	if err != nil {
		return nil, err
	}
	xs, err := img.InodeXattrs(ino)
	if err != nil {
		return nil, &fs.PathError{Op: "xattrs", Path: name, Err: err}
	}
	return xs, nil
}

// LinkFS returns the image as an fs.ReadLinkFS, for io/fs helpers that
// handle symbolic links (fs.ReadLink, fs.Lstat, os.CopyFS). It is a separate
// value because Image.Lstat returns an *Inode rather than an fs.FileInfo.
func (img *Image) LinkFS() fs.ReadLinkFS { return linkFS{img} }

type linkFS struct{ *Image }

func (l linkFS) ReadLink(name string) (string, error) { return l.Readlink(name) }

func (l linkFS) Lstat(name string) (fs.FileInfo, error) {
	ino, err := l.Image.Lstat(name)
	if err != nil {
		return nil, err
	}
	return ino.FileInfo(), nil
}

var (
	errIsDir    = errors.New("is a directory")
	errNotDir   = errors.New("not a directory")
	errLinkLoop = errors.New("too many levels of symbolic links")
)

// ValidPath reports whether name is a path that Image's methods take:
// fs.ValidPath's rules ("." or slash-separated names, none empty, "." or
// ".."), but for UTF-8. EROFS names are bytes, as Linux's are, and a tar
// may carry names in any encoding.
func ValidPath(name string) bool {
	if name == "." {
		return true
	}
	for {
		elem, rest, more := strings.Cut(name, "/")
		if elem == "" || elem == "." || elem == ".." {
			return false
		}
		if !more {
			return true
		}
		name = rest
	}
}

// walk resolves name to an inode. Each step of the walk keeps the chain of
// directories from the root, which gives ".." in link targets its meaning and
// catches corrupt images whose directories contain an ancestor.
func (img *Image) walk(op, name string, followLast bool) (*Inode, error) {
	if !ValidPath(name) {
		return nil, &fs.PathError{Op: op, Path: name, Err: fs.ErrInvalid}
	}
	fail := func(err error) (*Inode, error) {
		return nil, &fs.PathError{Op: op, Path: name, Err: err}
	}
	chain := []*Inode{img.root}
	var rest []string
	if name != "." {
		rest = strings.Split(name, "/")
	}
	hops := 0
	for len(rest) > 0 {
		c := rest[0]
		rest = rest[1:]
		// Like Linux, "file/", "file/." and "file/.." are not directories.
		dir := chain[len(chain)-1]
		if !dir.IsDir() {
			return fail(errNotDir)
		}
		switch c {
		case "", ".":
			continue
		case "..":
			if len(chain) > 1 {
				chain = chain[:len(chain)-1]
			}
			continue
		}
		ent, ok, err := img.lookup(dir, c)
		if err != nil {
			return fail(err)
		}
		if !ok {
			return fail(fs.ErrNotExist)
		}
		ino, err := img.loadInode(ent.Nid)
		if err != nil {
			return fail(err)
		}
		if ino.IsSymlink() && (len(rest) > 0 || followLast) {
			hops++
			if hops > maxLinkHops {
				return fail(errLinkLoop)
			}
			target, err := img.readlink(ino)
			if err != nil {
				return fail(err)
			}
			if target == "" {
				return fail(fs.ErrNotExist)
			}
			if target[0] == '/' {
				chain = chain[:1]
			}
			rest = append(strings.Split(target, "/"), rest...)
			continue
		}
		if ino.IsDir() {
			for _, a := range chain {
				if a.Nid == ino.Nid {
					return fail(fmt.Errorf("erofs: nid %d: directory contains its ancestor nid %d as %q", dir.Nid, ino.Nid, c))
				}
			}
		}
		if len(chain) >= maxWalkDepth {
			return fail(fmt.Errorf("erofs: path deeper than %d directories", maxWalkDepth))
		}
		chain = append(chain, ino)
	}
	last := *chain[len(chain)-1]
	last.name = baseName(name)
	return &last, nil
}

// baseName is path.Base for a valid io/fs name.
func baseName(name string) string {
	if i := strings.LastIndexByte(name, '/'); i >= 0 {
		return name[i+1:]
	}
	return name
}
