//go:build !unix

package main

import "syscall"

// signalName is the signal's description: there are no SIG names here.
func signalName(sig syscall.Signal) string { return sig.String() }

// killSelf does nothing: a process cannot send itself a signal here, and
// main exits with 128 plus the signal's number instead.
func killSelf(sig syscall.Signal) {}
