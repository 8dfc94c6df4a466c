//go:build !linux

package outfile

import (
	"errors"
	"os"
)

// Unnamed files (O_TMPFILE) are Linux's: elsewhere an output is built in a
// named temp file beside it, which a killed run leaves behind.

// CreateUnnamed makes a named temp file (prefix*) in dir; unnamed is
// always false.
func CreateUnnamed(dir, prefix string) (f *os.File, unnamed bool, err error) {
	f, err = os.CreateTemp(dir, prefix+"*")
	return f, false, err
}

// canLinkUnnamed reports false: there are no unnamed files to link.
func canLinkUnnamed() bool { return false }

// LinkUnnamed is never called here, as CreateUnnamed makes no unnamed file.
func LinkUnnamed(f *os.File, name string) error {
	return &os.LinkError{Op: "link", Old: f.Name(), New: name, Err: errors.New("unnamed files need Linux")}
}
