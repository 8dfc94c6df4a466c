//go:build !linux

package fstree

import (
	"errors"
	"runtime"
)

// FromDir takes a snapshot of the tree at dir. It needs the Linux xattr and
// device-number calls, so elsewhere it only reports that.
func FromDir(dir string) (*Tree, error) {
	return nil, errors.New("fstree: FromDir is not supported on " + runtime.GOOS)
}
