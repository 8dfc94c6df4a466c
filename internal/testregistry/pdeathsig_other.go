//go:build !linux

package testregistry

import "syscall"

// dieWithParent: only Linux has a parent-death signal; elsewhere Stop (or
// the test's cleanup) is all that ends the registry.
func dieWithParent() *syscall.SysProcAttr { return nil }
