package main

import (
	"context"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// interruptedBy is the signal that interrupted the command, if any.
var interruptedBy atomic.Value // syscall.Signal

// interruptible returns a context done at the first SIGINT or SIGTERM, so
// that the command stops and removes what it made (extract, convert,
// cache). A second signal kills the process as usual.
func interruptible(parent context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(parent)
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		select {
		case sig := <-sigs:
			interruptedBy.Store(sig.(syscall.Signal))
			signal.Stop(sigs)
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, func() {
		signal.Stop(sigs)
		cancel()
	}
}

// interrupted reports the signal that interrupted the command and the
// exit code a shell gives a process it ends (128 + its number).
func interrupted() (name string, code int, ok bool) {
	sig, ok := interruptedBy.Load().(syscall.Signal)
	if !ok {
		return "", 0, false
	}
	return unix.SignalName(sig), 128 + int(sig), true
}
