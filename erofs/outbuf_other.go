//go:build !linux

package erofs

import "errors"

type iovecs = struct{}

const havePwritev = false

func pwritev(int, [][]byte, int64, *iovecs) (int, error) { return 0, errors.ErrUnsupported }
