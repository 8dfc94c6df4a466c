//go:build !linux

package main

import "errors"

// errAffinity: CPU affinity (sched_setaffinity) is Linux's, and erofsbench
// pins its single-worker builds and its CPU calibration to one CPU.
var errAffinity = errors.New("timing each CPU needs Linux (sched_setaffinity)")

func allowedCPUs() ([]int, error) { return nil, errAffinity }

func pinThread(c int) error { return errAffinity }
