// Package erofs writes and reads EROFS filesystem images.
//
// A Builder turns a stream of entries (in tar order) into an image that the
// Linux kernel mounts. File data is written to the output as it arrives,
// block-aligned from block 1; inodes, directories and xattrs are kept in
// compact form and laid out after the data by Finish, which writes the
// superblock last.
//
//	b, err := erofs.NewBuilder(f, erofs.Options{})
//	err = b.Add(erofs.Entry{Path: "etc/hostname", Mode: erofs.S_IFREG | 0o644, Size: 5}, strings.NewReader("host\n"))
//	err = b.Finish()
//
// An Image reads an EROFS image through io/fs, with Lstat, Readlink and
// Xattrs for what io/fs cannot express.
//
// The package knows nothing of OCI or tar: callers map their entries to Entry.
package erofs
