package erofs

import (
	"time"
)

// Xattr is one extended attribute, by its full name ("user.foo").
type Xattr struct {
	Name  string
	Value []byte
}

// Entry describes one filesystem object given to Builder.Add.
type Entry struct {
	// Path is slash-separated and relative to the root; "" or "." is the root.
	// The Builder cleans it ("./a//b" → "a/b") and rejects names that escape
	// the root or hold NUL.
	Path string
	// Mode is a full st_mode: file type bits (S_IFREG, S_IFDIR, …) and the
	// permission bits including setuid, setgid and sticky.
	Mode     uint32
	Uid, Gid uint32
	Mtime    time.Time
	// Size is the length of a regular file's data; the reader given to Add
	// must yield exactly that many bytes.
	Size int64
	// Linkname is the target of a symbolic link.
	Linkname string
	// HardLink, when set, makes this entry another name for the inode at that
	// earlier path; every other field is ignored.
	HardLink string
	// Devmajor and Devminor are the device number of a char or block device.
	Devmajor, Devminor uint32
	// Xattrs are the entry's extended attributes, in any order.
	Xattrs []Xattr
	// Sparse marks a file whose all-zero blocks are holes: they are not
	// written, and read back as zeros.
	Sparse bool
}

// IsDir reports whether the entry is a directory.
func (e *Entry) IsDir() bool { return e.Mode&S_IFMT == S_IFDIR }
