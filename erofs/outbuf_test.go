package erofs

import (
	"bytes"
	"errors"
	"math/rand/v2"
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
