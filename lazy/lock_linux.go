package lazy

import (
	"context"
	"time"

	"golang.org/x/sys/unix"
)

// lockByte takes the write lock of byte i of the blob's lock file: an open
// file description lock, which orders the processes sharing the cache
// (the goroutines of one process are ordered by Blob.flight before). While
// another holds it, done is asked whether that one's work made the wait
// pointless: then lockByte returns a nil unlock and no error.
func (b *Blob) lockByte(ctx context.Context, i int64, done func() bool) (unlock func(), err error) {
	lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: 0, Start: i, Len: 1}
	for {
		err := unix.FcntlFlock(b.lock.Fd(), unix.F_OFD_SETLK, &lk)
		if err == nil {
			return func() {
				un := unix.Flock_t{Type: unix.F_UNLCK, Whence: 0, Start: i, Len: 1}
				unix.FcntlFlock(b.lock.Fd(), unix.F_OFD_SETLK, &un)
			}, nil
		}
		if err != unix.EAGAIN && err != unix.EACCES {
			return nil, err
		}
		if done() {
			return nil, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}
