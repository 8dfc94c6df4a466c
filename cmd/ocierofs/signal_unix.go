//go:build unix

package main

import (
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// signalName is the signal's name as a shell gives it: SIGINT, SIGTERM.
func signalName(sig syscall.Signal) string { return unix.SignalName(sig) }

// killSelf sends sig to this process (its handler reset by the caller).
func killSelf(sig syscall.Signal) { unix.Kill(os.Getpid(), sig) }
