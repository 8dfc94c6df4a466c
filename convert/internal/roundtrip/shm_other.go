//go:build !linux

package roundtrip

// probeShm reports false: /dev/shm as a tmpfs is Linux's.
func probeShm() bool { return false }
