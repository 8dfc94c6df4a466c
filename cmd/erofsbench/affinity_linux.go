package main

import "golang.org/x/sys/unix"

// allowedCPUs lists the CPUs this process may run on.
func allowedCPUs() ([]int, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil, err
	}
	var cpus []int
	for c := 0; c < 1024 && len(cpus) < set.Count(); c++ {
		if set.IsSet(c) {
			cpus = append(cpus, c)
		}
	}
	return cpus, nil
}

// pinThread keeps the calling OS thread on CPU c.
func pinThread(c int) error {
	var one unix.CPUSet
	one.Set(c)
	return unix.SchedSetaffinity(0, &one)
}
