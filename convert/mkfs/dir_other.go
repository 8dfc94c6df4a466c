//go:build !linux

package mkfs

import (
	"errors"

	"github.com/ocierofs/ocierofs/erofs"
)

// errDirNeedsLinux is BuildDir's error elsewhere: it reads modes, owners,
// device numbers and xattrs as Linux gives them.
var errDirNeedsLinux = errors.New("building an image from a directory needs Linux")

func lstatFile(p string) (fileStat, error) { return fileStat{}, errDirNeedsLinux }

func readXattrs(p string) ([]erofs.Xattr, error) { return nil, errDirNeedsLinux }
