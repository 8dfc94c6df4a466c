//go:build !unix

package convert

import "os"

// makeTemp makes a temp directory in parent. There is no flock here to
// tell an abandoned directory from one in use: none is locked, and none is
// swept.
func makeTemp(parent string) (string, *os.File, error) {
	dir, err := os.MkdirTemp(parent, tempPrefix)
	return dir, nil, err
}
