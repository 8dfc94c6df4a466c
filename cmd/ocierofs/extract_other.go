//go:build !unix

package main

import (
	"errors"
	"time"
)

// errExtract: an image's modes, owners, device nodes, xattrs and symbolic
// links are a Unix system's.
var errExtract = errors.New("extract needs a Unix system (Linux): modes, owners, devices and xattrs have no equivalent here")

func extractSupported() error { return errExtract }

func chmodPath(p string, mode uint32) error           { return errExtract }
func mknod(p string, mode, major, minor uint32) error { return errExtract }
func lsetxattr(p, name string, value []byte) error    { return errExtract }
func xattrRefused(err error) bool                     { return false }
func lutimes(p string, mtime time.Time) error         { return errExtract }
