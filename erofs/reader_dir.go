package erofs

import (
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"path"
	"slices"
	"strings"
)

// Dirent is a directory entry as stored: Name, the nid of its inode and the
// FT* file type the directory claims for it.
type Dirent struct {
	Name     string
	Nid      uint64
	FileType uint8
}

// dirBlock is the valid bytes of one directory block whose first nameoff
// has been checked; entries are decoded and checked one by one, so that a
// lookup only pays for the entries it visits.
type dirBlock struct {
	b []byte
	n int // number of dirents
}

func newDirBlock(b []byte) (dirBlock, error) {
	if len(b) < DirentSize {
		return dirBlock{}, fmt.Errorf("%d bytes hold no dirent", len(b))
	}
	nameoff0 := int(le.Uint16(b[8:]))
	if nameoff0 < DirentSize || nameoff0%DirentSize != 0 || nameoff0 >= len(b) {
		return dirBlock{}, fmt.Errorf("bad first nameoff %d", nameoff0)
	}
	return dirBlock{b: b, n: nameoff0 / DirentSize}, nil
}

// name returns the name of dirent i, checked as the kernel does and also
// for what a path component cannot hold.
func (db dirBlock) name(i int) ([]byte, error) {
	b := db.b
	off := int(le.Uint16(b[i*DirentSize+8:]))
	if off < db.n*DirentSize || off >= len(b) {
		return nil, fmt.Errorf("dirent %d: nameoff %d outside the names", i, off)
	}
	var end int
	if i+1 < db.n {
		end = int(le.Uint16(b[(i+1)*DirentSize+8:]))
	} else if j := bytes.IndexByte(b[off:], 0); j >= 0 {
		// The last name ends at the first NUL or with the block.
		end = off + j
	} else {
		end = len(b)
	}
	if end <= off || end > len(b) || end-off > MaxNameLen {
		return nil, fmt.Errorf("dirent %d: bad name bounds [%d,%d)", i, off, end)
	}
	name := b[off:end]
	if bytes.IndexByte(name, '/') >= 0 || bytes.IndexByte(name, 0) >= 0 {
		return nil, fmt.Errorf("dirent %d: name %q holds '/' or NUL", i, name)
	}
	return name, nil
}

// entry returns dirent i's nid and file type.
func (db dirBlock) entry(i int) (nid uint64, ft uint8) {
	de := db.b[i*DirentSize:]
	return le.Uint64(de), de[10]
}

// dirData reads a directory one block at a time into one buffer.
type dirData struct {
	img     *Image
	ino     *Inode
	ra      io.ReaderAt
	nblocks int64
	buf     []byte
}

func (img *Image) openDirData(ino *Inode) (*dirData, error) {
	if !ino.IsDir() {
		return nil, fmt.Errorf("erofs: nid %d: %w", ino.Nid, errNotDir)
	}
	// Directory data lives on the devices (holes make no sense in it),
	// which bounds what listing a directory may allocate.
	if ino.Size > img.total {
		return nil, fmt.Errorf("erofs: nid %d: directory of %d bytes is larger than the image", ino.Nid, ino.Size)
	}
	ra, err := img.dataReader(ino)
	if err != nil {
		return nil, err
	}
	return &dirData{
		img:     img,
		ino:     ino,
		ra:      ra,
		nblocks: (ino.Size + img.bs - 1) >> img.bits,
		buf:     img.getBlockBuf(),
	}, nil
}

// getBlockBuf returns a block-sized buffer from the pool.
func (img *Image) getBlockBuf() []byte {
	if p, ok := img.blockBufs.Get().(*[]byte); ok {
		return *p
	}
	return make([]byte, img.bs)
}

// release returns the block buffer; d must not be used afterwards.
func (d *dirData) release() {
	buf := d.buf
	d.buf = nil
	d.img.blockBufs.Put(&buf)
}

// block reads directory block i; it stays valid until the next call.
func (d *dirData) block(i int64) (dirBlock, error) {
	start := i << d.img.bits
	b := d.buf[:min(d.img.bs, d.ino.Size-start)]
	if err := readFullAt(d.ra, b, start); err != nil {
		return dirBlock{}, d.errorf(i, err)
	}
	db, err := newDirBlock(b)
	if err != nil {
		return dirBlock{}, d.errorf(i, err)
	}
	return db, nil
}

func (d *dirData) errorf(block int64, err error) error {
	return fmt.Errorf("erofs: nid %d: directory block %d: %w", d.ino.Nid, block, err)
}

// ReadDirInode returns the entries of a directory in stored order, "." and
// ".." included when stored.
func (img *Image) ReadDirInode(ino *Inode) ([]Dirent, error) {
	d, err := img.openDirData(ino)
	if err != nil {
		return nil, err
	}
	defer d.release()
	var out []Dirent
	for i := range d.nblocks {
		db, err := d.block(i)
		if err != nil {
			return nil, err
		}
		out = slices.Grow(out, db.n)
		for j := range db.n {
			name, err := db.name(j)
			if err != nil {
				return nil, d.errorf(i, err)
			}
			nid, ft := db.entry(j)
			out = append(out, Dirent{Name: string(name), Nid: nid, FileType: ft})
		}
	}
	return out, nil
}

// lookup finds name in dir the way the kernel does: a binary search over the
// blocks by their first name, then one inside the block. It relies on the
// directory being sorted, as the format requires.
func (img *Image) lookup(dir *Inode, name string) (Dirent, bool, error) {
	d, err := img.openDirData(dir)
	if err != nil {
		return Dirent{}, false, err
	}
	defer d.release()
	// Find the last block whose first name is not after name.
	lo, hi := int64(0), d.nblocks
	for lo < hi {
		mid := lo + (hi-lo)/2
		db, err := d.block(mid)
		if err != nil {
			return Dirent{}, false, err
		}
		first, err := db.name(0)
		if err != nil {
			return Dirent{}, false, d.errorf(mid, err)
		}
		if string(first) <= name {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	if lo == 0 {
		return Dirent{}, false, nil
	}
	db, err := d.block(lo - 1)
	if err != nil {
		return Dirent{}, false, err
	}
	l, h := 0, db.n
	for l < h {
		m := l + (h-l)/2
		n, err := db.name(m)
		if err != nil {
			return Dirent{}, false, d.errorf(lo-1, err)
		}
		switch {
		case string(n) == name:
			nid, ft := db.entry(m)
			return Dirent{Name: name, Nid: nid, FileType: ft}, true, nil
		case string(n) < name:
			l = m + 1
		default:
			h = m
		}
	}
	return Dirent{}, false, nil
}

// ReadDir lists the named directory, following symbolic links, sorted by
// name and without "." and "..".
func (img *Image) ReadDir(name string) ([]fs.DirEntry, error) {
	ino, err := img.walk("readdir", name, true)
	if err != nil {
		return nil, err
	}
	if !ino.IsDir() {
		return nil, &fs.PathError{Op: "readdir", Path: name, Err: errNotDir}
	}
	ents, err := img.dirEntries(ino)
	if err != nil {
		return nil, &fs.PathError{Op: "readdir", Path: name, Err: err}
	}
	return ents, nil
}

func (img *Image) dirEntries(ino *Inode) ([]fs.DirEntry, error) {
	raw, err := img.ReadDirInode(ino)
	if err != nil {
		return nil, err
	}
	out := make([]fs.DirEntry, 0, len(raw))
	for _, e := range raw {
		if e.Name == "." || e.Name == ".." {
			continue
		}
		de := &imgDirEntry{img: img, name: e.Name, nid: e.Nid}
		mode, ok := fileTypeMode(e.FileType)
		if !ok {
			// The directory does not say: ask the inode, as readdir(3)
			// users do on DT_UNKNOWN.
			child, err := img.loadInode(e.Nid)
			if err != nil {
				return nil, fmt.Errorf("%q: %w", e.Name, err)
			}
			mode = child.FileMode().Type()
		}
		de.typ = mode
		out = append(out, de)
	}
	slices.SortFunc(out, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	return out, nil
}

// imgDirEntry is an fs.DirEntry whose inode is read on demand.
type imgDirEntry struct {
	img  *Image
	name string
	nid  uint64
	typ  fs.FileMode
}

func (e *imgDirEntry) Name() string      { return e.name }
func (e *imgDirEntry) IsDir() bool       { return e.typ.IsDir() }
func (e *imgDirEntry) Type() fs.FileMode { return e.typ }
func (e *imgDirEntry) String() string    { return fs.FormatDirEntry(e) }

func (e *imgDirEntry) Info() (fs.FileInfo, error) {
	ino, err := e.img.InodeAt(e.nid)
	if err != nil {
		return nil, err
	}
	ino.name = e.name
	return ino.FileInfo(), nil
}

// imgDir is an open directory.
type imgDir struct {
	img    *Image
	ino    *Inode
	name   string
	ents   []fs.DirEntry
	loaded bool
	closed bool
}

func (d *imgDir) Stat() (fs.FileInfo, error) { return d.ino.FileInfo(), nil }

func (d *imgDir) Read([]byte) (int, error) {
	return 0, &fs.PathError{Op: "read", Path: d.name, Err: errIsDir}
}

func (d *imgDir) Close() error {
	if d.closed {
		return &fs.PathError{Op: "close", Path: d.name, Err: fs.ErrClosed}
	}
	d.closed = true
	return nil
}

// ReadDir implements fs.ReadDirFile: the entries are read once, on the
// first call, and handed out in name order.
func (d *imgDir) ReadDir(n int) ([]fs.DirEntry, error) {
	if d.closed {
		return nil, &fs.PathError{Op: "readdir", Path: d.name, Err: fs.ErrClosed}
	}
	if !d.loaded {
		ents, err := d.img.dirEntries(d.ino)
		if err != nil {
			return nil, &fs.PathError{Op: "readdir", Path: d.name, Err: err}
		}
		d.ents, d.loaded = ents, true
	}
	if n <= 0 {
		rest := d.ents
		d.ents = nil
		return rest, nil
	}
	if len(d.ents) == 0 {
		return nil, io.EOF
	}
	n = min(n, len(d.ents))
	out := d.ents[:n:n]
	d.ents = d.ents[n:]
	return out, nil
}

// WalkFunc is what Walk calls for each file: p is its path (root, then
// root/a, root/a/b…; "a" rather than "./a"), ino its inode. As with
// fs.WalkDir, returning fs.SkipDir skips a directory's contents (for a
// file, the rest of its directory) and fs.SkipAll the rest of the walk;
// any other error stops the walk, and Walk returns it.
type WalkFunc func(p string, ino *Inode) error

// Walk calls fn for root (an io/fs name: "." for the whole image; a final
// symbolic link is not followed) and every file below it, depth first,
// each directory before its entries and those in name order, as
// fs.WalkDir does. Unlike fs.WalkDir over the image, it goes by each
// inode's type, never by what
// its directory entry says (an entry typed as a directory that is a
// symbolic link is not descended into), and it fails on a directory
// reached a second time, or on a name listed twice in one directory:
// Linux gives a directory one parent, and a walk of directories that
// share children multiplies (48 directories each listing the next one
// twice make 2^48 paths). It holds one path per directory.
func (img *Image) Walk(root string, fn WalkFunc) error {
	ino, err := img.Lstat(root)
	if err != nil {
		return err
	}
	w := walker{img: img, fn: fn, dirs: map[uint64]string{}}
	if err := w.walk(root, ino); err != fs.SkipAll && err != fs.SkipDir {
		return err
	}
	return nil
}

type walker struct {
	img  *Image
	fn   WalkFunc
	dirs map[uint64]string // directory nid → the path it was reached by
}

func (w *walker) walk(p string, ino *Inode) error {
	if ino.IsDir() {
		if first, ok := w.dirs[ino.Nid]; ok {
			return fmt.Errorf("erofs: nid %d: directory %s is also %s: a directory has one parent", ino.Nid, p, first)
		}
		w.dirs[ino.Nid] = p
	}
	if err := w.fn(p, ino); err != nil {
		if err == fs.SkipDir && ino.IsDir() {
			return nil
		}
		return err
	}
	if !ino.IsDir() {
		return nil
	}
	ents, err := w.img.ReadDirInode(ino)
	if err != nil {
		return fmt.Errorf("%s: %w", p, err)
	}
	ents = slices.DeleteFunc(ents, func(e Dirent) bool { return e.Name == "." || e.Name == ".." })
	slices.SortFunc(ents, func(a, b Dirent) int { return strings.Compare(a.Name, b.Name) })
	for i, e := range ents {
		if i > 0 && ents[i-1].Name == e.Name {
			return fmt.Errorf("erofs: nid %d: directory %s lists %q twice", ino.Nid, p, e.Name)
		}
		child, err := w.img.InodeAt(e.Nid)
		if err != nil {
			return fmt.Errorf("%s: %w", path.Join(p, e.Name), err)
		}
		if err := w.walk(path.Join(p, e.Name), child); err != nil {
			if err == fs.SkipDir {
				return nil // from a file: the rest of this directory
			}
			return err
		}
	}
	return nil
}
