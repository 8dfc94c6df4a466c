package convtest

import (
	"archive/tar"
	"bytes"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ocierofs/ocierofs/convert/internal/roundtrip"
)

var must = roundtrip.Must

// T0 is the common mtime of crafted entries, so that most inodes of the
// images made of them are compact.
var T0 = time.Unix(1700000000, 0)

// Content returns n deterministic pseudo-random bytes named by seed.
func Content(seed string, n int) []byte {
	var key [32]byte
	copy(key[:], seed)
	b := make([]byte, n)
	rand.NewChaCha8(key).Read(b)
	return b
}

// TarEntry is one entry of a crafted tar, written as it is (its header's
// format included) by TarOf.
type TarEntry struct {
	Hdr  tar.Header
	Data string
}

// TarDir is a directory entry.
func TarDir(name string, mode int64, mt time.Time) TarEntry {
	return TarEntry{Hdr: tar.Header{Typeflag: tar.TypeDir, Name: name, Mode: mode, ModTime: mt, Format: tar.FormatPAX}}
}

// TarFile is a regular file holding data.
func TarFile(name, data string, mode int64, mt time.Time) TarEntry {
	return TarEntry{Hdr: tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, ModTime: mt, Format: tar.FormatPAX}, Data: data}
}

// TarSym is a symbolic link to target.
func TarSym(name, target string, mt time.Time) TarEntry {
	return TarEntry{Hdr: tar.Header{Typeflag: tar.TypeSymlink, Name: name, Linkname: target, Mode: 0o777, ModTime: mt, Format: tar.FormatPAX}}
}

// TarLink is a hard link to target.
func TarLink(name, target string) TarEntry {
	return TarEntry{Hdr: tar.Header{Typeflag: tar.TypeLink, Name: name, Linkname: target, Mode: 0o644, ModTime: T0, Format: tar.FormatPAX}}
}

// Own sets the entry's owner.
func (e TarEntry) Own(uid, gid int) TarEntry { e.Hdr.Uid, e.Hdr.Gid = uid, gid; return e }

// PAX adds the PAX record k=v.
func (e TarEntry) PAX(k, v string) TarEntry {
	r := map[string]string{}
	for k0, v0 := range e.Hdr.PAXRecords {
		r[k0] = v0
	}
	r[k] = v
	e.Hdr.PAXRecords = r
	return e
}

// Format sets the tar format the entry is written in.
func (e TarEntry) Format(f tar.Format) TarEntry { e.Hdr.Format = f; return e }

// TarOf writes crafted entries into an in-memory tar with archive/tar; a
// regular file's size is its data's.
func TarOf(t testing.TB, entries ...TarEntry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := e.Hdr
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(e.Data))
		}
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatalf("crafted %s: %q: %v", t.Name(), h.Name, err)
		}
		if e.Data != "" {
			if _, err := tw.Write([]byte(e.Data)); err != nil {
				t.Fatalf("crafted %s: %q: %v", t.Name(), h.Name, err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}
