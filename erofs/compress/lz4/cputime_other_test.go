//go:build !unix

package lz4

import "time"

// cpuTime is not measured here: the CPU rate is left out.
func cpuTime() time.Duration { return 0 }
