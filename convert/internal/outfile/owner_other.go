//go:build !unix

package outfile

import "io/fs"

// fileOwner reports no owner: this system has no uid and gid.
func fileOwner(fi fs.FileInfo) (uid, gid int, ok bool) { return 0, 0, false }
