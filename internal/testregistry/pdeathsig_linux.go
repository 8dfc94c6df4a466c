package testregistry

import "syscall"

// dieWithParent has the kernel kill the registry when the test binary
// dies.
func dieWithParent() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
