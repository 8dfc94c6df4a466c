package main

import (
	"context"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
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

// interrupted reports the signal that interrupted the command, if one did.
func interrupted() (syscall.Signal, bool) {
	sig, ok := interruptedBy.Load().(syscall.Signal)
	return sig, ok
}
