package erofs

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
)

// failAt is an in-memory io.WriterAt that fails writes reaching past limit.
type failAt struct {
	memWriterAt
	limit int64
}

func (f *failAt) WriteAt(p []byte, off int64) (int, error) {
	if off+int64(len(p)) > f.limit {
		return 0, errors.New("disk full")
	}
	return f.memWriterAt.WriteAt(p, off)
}

// TestOutBuf writes random pieces, with ReadFrom and a move back over
// written bytes, and checks the result byte for byte; then that a failed
// write surfaces at the next Flush and stays.
func TestOutBuf(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	var want []byte
	dst := &failAt{limit: 1 << 40}
	o := newOutBuf(dst, 0)
	for i := 0; len(want) < 5*outBufSize; i++ {
		p := make([]byte, rng.IntN(3*outBufSize/2))
		for k := range p {
			p[k] = byte(i)
		}
		if i%3 == 0 {
			if n, err := o.ReadFrom(bytes.NewReader(p)); err != nil || n != int64(len(p)) {
				t.Fatalf("ReadFrom: %d, %v", n, err)
			}
		} else if _, err := o.Write(p); err != nil {
			t.Fatal(err)
		}
		want = append(want, p...)
		if o.Buffered() > outBufCount*outBufSize {
			t.Fatalf("%d bytes unwritten, more than the buffers", o.Buffered())
		}
	}
	// Back over the last 1000 bytes, as a rewind does.
	if err := o.Reset(int64(len(want) - 1000)); err == nil {
		t.Fatal("Reset with unwritten bytes succeeded")
	}
	if err := o.Flush(); err != nil {
		t.Fatal(err)
	}
	if o.Buffered() != 0 {
		t.Fatalf("%d bytes unwritten after Flush", o.Buffered())
	}
	if err := o.Reset(int64(len(want) - 1000)); err != nil {
		t.Fatal(err)
	}
	o.Write([]byte(strings.Repeat("z", 1000)))
	copy(want[len(want)-1000:], strings.Repeat("z", 1000))
	if err := o.Flush(); err != nil {
		t.Fatal(err)
	}
	o.Close()
	if !bytes.Equal(dst.b, want) {
		t.Fatalf("output of %d bytes differs from the %d written at %d", len(dst.b), len(want), firstDiff(dst.b, want))
	}

	bad := &failAt{limit: 3 * outBufSize}
	o = newOutBuf(bad, 0)
	defer o.Close()
	big := make([]byte, 5*outBufSize)
	_, werr := o.Write(big)
	ferr := o.Flush()
	if werr == nil && ferr == nil {
		t.Fatal("a failed write went unreported")
	}
	if err := o.Flush(); err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("the error did not stay: %v", err)
	}
}

// TestOutBufRefs mixes copied bytes with bytes given by reference, many
// small pieces (more than a pwritev takes) and a few big ones, to a file
// (pwritev) and to another WriterAt (piece by piece). A referenced piece
// is overwritten as soon as Written reaches LastRef: the output must hold
// what it was before.
func TestOutBufRefs(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, dst := range []io.WriterAt{f, &memWriterAt{}} {
		rng := rand.New(rand.NewPCG(7, 8))
		var want []byte
		o := newOutBuf(dst, 0)
		type held struct {
			p    []byte
			mark int64
		}
		var refs []held
		for i := 0; len(want) < 6*outBufSize; i++ {
			n := 1 + rng.IntN(300)
			if i%97 == 0 {
				n = rng.IntN(2 * outBufSize)
			}
			p := make([]byte, n)
			for k := range p {
				p[k] = byte(i + k)
			}
			want = append(want, p...)
			switch i % 3 {
			case 0:
				if _, err := o.Write(p); err != nil {
					t.Fatal(err)
				}
				continue
			case 1:
				if err := o.WriteRef(p); err != nil {
					t.Fatal(err)
				}
			case 2:
				if err := o.WriteRef(p); err != nil {
					t.Fatal(err)
				}
				// Wait for some, as the ring does when it needs room.
				if i%10 == 2 {
					if err := o.WaitWritten(o.LastRef()); err != nil {
						t.Fatal(err)
					}
					if o.Written() < o.LastRef() {
						t.Fatalf("WaitWritten returned at %d of %d", o.Written(), o.LastRef())
					}
				}
			}
			refs = append(refs, held{p, o.LastRef()})
			o.Collect()
			for len(refs) > 0 && refs[0].mark <= o.Written() {
				clear(refs[0].p) // the ring reuses it
				refs = refs[1:]
			}
		}
		if err := o.Flush(); err != nil {
			t.Fatal(err)
		}
		if o.Written() != int64(len(want)) || o.Buffered() != 0 {
			t.Fatalf("%T: written %d of %d, %d buffered", dst, o.Written(), len(want), o.Buffered())
		}
		o.Close()
		got := make([]byte, len(want))
		if m, ok := dst.(*memWriterAt); ok {
			got = m.b
		} else if _, err := f.ReadAt(got, 0); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("%T: output of %d bytes differs from the %d written at %d", dst, len(got), len(want), firstDiff(got, want))
		}
	}
}
