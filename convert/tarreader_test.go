package convert

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ocierofs/ocierofs/erofs"
	"github.com/ocierofs/ocierofs/internal/fuzzcorpus"
)

// tarEvent is one step of reading a tar: a header and the data read, or
// the error that ended it.
type tarEvent struct {
	hdr  string
	data string
	err  string
}

// readTarEvents reads every entry of a tar with next and read; the data of
// an entry is read when pick says so (else it is skipped, by Seek where the
// stream can), and in full or in half.
func readTarEvents(next func() (*tar.Header, error), read io.Reader, pick []byte) []tarEvent {
	var ev []tarEvent
	for i := 0; i < 10000; i++ {
		hdr, err := next()
		if err != nil {
			return append(ev, tarEvent{err: errClass(err)})
		}
		e := tarEvent{hdr: headerString(hdr)}
		how := byte(0)
		if len(pick) > 0 {
			how = pick[i%len(pick)] % 3
		}
		switch how {
		case 0: // all of it, up to 4 MiB (a sparse file's size is what its header says)
			b, err := io.ReadAll(io.LimitReader(read, 4<<20))
			e.data = string(b)
			if err != nil {
				e.err = errClass(err)
			}
		case 1: // half of it, the rest skipped by the next Next
			b := make([]byte, max(hdr.Size/2, 0)%(1<<20))
			n, err := io.ReadFull(read, b)
			e.data = string(b[:n])
			if err != nil && err != io.ErrUnexpectedEOF && err != io.EOF {
				e.err = errClass(err)
			}
		}
		ev = append(ev, e)
		if e.err != "" {
			return ev
		}
	}
	return ev
}

// errClass is what the two readers must agree on about an error: that there
// was one, and whether it is the end of the archive. tarReader's
// errEndAfterMeta has a class of its own: archive/tar may see the end there.
func errClass(err error) string {
	switch {
	case err == io.EOF:
		return "EOF"
	case errors.Is(err, errEndAfterMeta):
		return "end after meta"
	}
	return "error"
}

// sameTarEvent: tarReader's step got is archive/tar's want, or tarReader
// refuses an archive cut after a PAX header or GNU long name where
// archive/tar ends or fails (it must fail wherever archive/tar fails).
func sameTarEvent(got, want tarEvent) bool {
	if got.err == "end after meta" && (want.err == "EOF" || want.err == "error") {
		got.err = want.err
	}
	return got == want
}

func headerString(h *tar.Header) string {
	t := func(x time.Time) string {
		if x.IsZero() {
			return "0"
		}
		return fmt.Sprintf("%d.%09d", x.Unix(), x.Nanosecond())
	}
	var pax []string
	for _, k := range sortedKeys(h.PAXRecords) {
		pax = append(pax, k+"="+h.PAXRecords[k])
	}
	// Not the deprecated Xattrs, which tarReader leaves out: its records
	// are in PAXRecords.
	return fmt.Sprintf("%q %c size=%d mode=%o %d:%d %q:%q mtime=%s atime=%s ctime=%s link=%q dev=%d,%d pax=%q",
		h.Name, h.Typeflag, h.Size, h.Mode, h.Uid, h.Gid, h.Uname, h.Gname, t(h.ModTime), t(h.AccessTime), t(h.ChangeTime),
		h.Linkname, h.Devmajor, h.Devminor, pax)
}

func sortedKeys(m map[string]string) []string { return slices.Sorted(maps.Keys(m)) }

// noSeek hides a reader's Seek.
type noSeek struct{ io.Reader }

// checkTarReader compares tarReader with archive/tar on data, with a
// seekable stream and a plain one.
func checkTarReader(t *testing.T, data, pick []byte) []tarEvent {
	t.Helper()
	ref := tar.NewReader(bytes.NewReader(data))
	want := readTarEvents(ref.Next, ref, pick)
	for _, src := range []io.Reader{bytes.NewReader(data), noSeek{bytes.NewReader(data)}} {
		tr := newTarReader(src)
		got := readTarEvents(tr.Next, tr, pick)
		if len(got) != len(want) {
			t.Fatalf("%T: %d steps, archive/tar %d:\n got %q\nwant %q", src, len(got), len(want), got, want)
		}
		for i := range got {
			if !sameTarEvent(got[i], want[i]) {
				t.Fatalf("%T: step %d:\n got %q\nwant %q", src, i, got[i], want[i])
			}
		}
	}
	return want
}

// rawHeader is a USTAR header block with a valid checksum; fields may be
// changed after (then call fixChecksum).
func rawHeader(name string, typ byte, size int64) []byte {
	b := make([]byte, 512)
	copy(b, name)
	copy(b[100:], "0000644\x00")
	copy(b[108:], "0000000\x00")
	copy(b[116:], "0000000\x00")
	copy(b[124:], fmt.Sprintf("%011o\x00", size))
	copy(b[136:], "14533320400\x00")
	b[156] = typ
	copy(b[257:], "ustar\x0000")
	fixChecksum(b)
	return b
}

func fixChecksum(b []byte) {
	copy(b[148:156], "        ")
	var sum int64
	for _, c := range b[:512] {
		sum += int64(c)
	}
	copy(b[148:], fmt.Sprintf("%06o\x00 ", sum))
}

// blocks pads data to whole blocks.
func blocks(data string) []byte {
	b := []byte(data)
	return append(b, make([]byte, -len(b)&511)...)
}

func paxRecord(k, v string) string {
	n := len(k) + len(v) + 3
	for len(fmt.Sprintf("%d %s=%s\n", n, k, v)) != n {
		n++
	}
	return fmt.Sprintf("%d %s=%s\n", n, k, v)
}

// tarSeeds are tars of the kinds tarReader parses and of those it leaves to
// archive/tar.
func tarSeeds(t testing.TB) map[string][]byte {
	seeds := map[string][]byte{}
	write := func(name string, format tar.Format, hdrs ...*tar.Header) {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		for _, h := range hdrs {
			h.Format = format
			if err := tw.WriteHeader(h); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if h.Typeflag == tar.TypeReg {
				tw.Write(bytes.Repeat([]byte{'d'}, int(h.Size)))
			}
		}
		tw.Close()
		seeds[name] = buf.Bytes()
	}
	mt := time.Unix(1700000000, 0)
	long := strings.Repeat("long/", 30) + "name"
	write("ustar", tar.FormatUSTAR,
		&tar.Header{Name: "d/", Typeflag: tar.TypeDir, Mode: 0o755, ModTime: mt},
		&tar.Header{Name: strings.Repeat("p", 120) + "/f", Typeflag: tar.TypeReg, Size: 700, Mode: 0o644, ModTime: mt, Uname: "u", Gname: "g"},
		&tar.Header{Name: "l", Typeflag: tar.TypeSymlink, Linkname: "f", ModTime: mt},
		&tar.Header{Name: "c", Typeflag: tar.TypeChar, Devmajor: 1, Devminor: 3, ModTime: mt},
		&tar.Header{Name: "h", Typeflag: tar.TypeLink, Linkname: "d/", ModTime: mt},
		&tar.Header{Name: "p", Typeflag: tar.TypeFifo, ModTime: mt})
	write("pax", tar.FormatPAX,
		&tar.Header{Name: long, Typeflag: tar.TypeReg, Size: 513, ModTime: time.Unix(1700000000, 123456789), Uid: 1 << 22,
			PAXRecords: map[string]string{"SCHILY.xattr.user.a": "1", "LIBARCHIVE.xattr.user.b": "Mg==", "comment": "x"}},
		&tar.Header{Name: "s", Typeflag: tar.TypeSymlink, Linkname: long, ModTime: time.Unix(-5, -250)},
		&tar.Header{Name: "g", Typeflag: tar.TypeXGlobalHeader, PAXRecords: map[string]string{"comment": "global"}},
		&tar.Header{Name: "after", Typeflag: tar.TypeReg, Size: 1, ModTime: mt})
	write("gnu", tar.FormatGNU,
		&tar.Header{Name: long, Typeflag: tar.TypeReg, Size: 10, ModTime: mt},
		&tar.Header{Name: "k", Typeflag: tar.TypeSymlink, Linkname: long, ModTime: mt},
		&tar.Header{Name: "big", Typeflag: tar.TypeReg, Size: 2, Uid: 1 << 30, ModTime: mt},
		&tar.Header{Name: "times", Typeflag: tar.TypeReg, Size: 3, ModTime: mt, AccessTime: mt, ChangeTime: mt})

	var raw []byte
	add := func(b ...[]byte) {
		for _, x := range b {
			raw = append(raw, x...)
		}
	}
	// A V7 header, an old regular file with a trailing slash (a directory),
	// and one without.
	v7 := rawHeader("v7", tar.TypeReg, 3)
	copy(v7[257:265], make([]byte, 8))
	fixChecksum(v7)
	add(v7, blocks("abc"), rawHeader("olddir/", typeRegA, 0), rawHeader("oldfile", typeRegA, 2), blocks("xy"))
	// A PAX sparse file (format 0.1): archive/tar's.
	pax := paxRecord("GNU.sparse.size", "1000") + paxRecord("GNU.sparse.numblocks", "1") +
		paxRecord("GNU.sparse.map", "512,3") + paxRecord("GNU.sparse.name", "sparse")
	add(rawHeader("PaxHeaders/sparse", tar.TypeXHeader, int64(len(pax))), blocks(pax),
		rawHeader("GNUSparseFile.0/sparse", tar.TypeReg, 3), blocks("xyz"))
	// PAX records with an empty value (the header's value stays).
	pax = paxRecord("path", "") + paxRecord("mtime", "1.5") + paxRecord("size", "4")
	add(rawHeader("PaxHeaders/keep", tar.TypeXHeader, int64(len(pax))), blocks(pax),
		rawHeader("keep", tar.TypeReg, 99), blocks("four"))
	add(make([]byte, 1024))
	seeds["raw"] = raw

	// GNU long names, a PAX header and an old GNU sparse file after them:
	// archive/tar is given the latest of each, then the sparse header.
	raw = nil
	longName := strings.Repeat("n", 200)
	for _, n := range []string{"first", longName} { // the later one counts
		add(rawHeader("././@LongLink", tar.TypeGNULongName, int64(len(n)+1)), blocks(n+"\x00"))
	}
	pax = paxRecord("comment", "c") + paxRecord("uid", "7")
	add(rawHeader("PaxHeaders/s", tar.TypeXHeader, int64(len(pax))), blocks(pax))
	add(rawHeader("././@LongLink", tar.TypeGNULongLink, 4), blocks("lnk\x00"))
	sp := rawHeader("gnusparse", tar.TypeGNUSparse, 3)
	copy(sp[257:265], "ustar  \x00")
	copy(sp[386:], fmt.Sprintf("%011o\x00%011o\x00", 512, 3)) // data at 512, 3 bytes
	copy(sp[483:], fmt.Sprintf("%011o\x00", 1000))            // of a 1000-byte file
	fixChecksum(sp)
	add(sp, blocks("abc"), rawHeader("next", tar.TypeReg, 2), blocks("ok"), make([]byte, 1024))
	seeds["replayed"] = raw
	// The end of the archive: one zero block and EOF; a tar cut short in a
	// header, in data, in padding.
	seeds["one zero block"] = append(rawHeader("f", tar.TypeReg, 0), make([]byte, 512)...)
	full := seeds["ustar"]
	seeds["cut in header"] = full[:700]
	seeds["cut in data"] = full[:3*512+100]
	seeds["cut in padding"] = full[:3*512+700]
	bad := rawHeader("bad", tar.TypeReg, 0)
	bad[150] = '9'
	seeds["bad checksum"] = bad
	neg := rawHeader("neg", tar.TypeReg, 0)
	copy(neg[124:136], []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfe})
	fixChecksum(neg)
	seeds["negative base-256 size"] = neg
	return seeds
}

// TestTarReader reads each seed with tarReader and archive/tar, skipping or
// reading the data, and checks that they agree; and that the seeds reach
// both the parser of tarReader and archive/tar's.
func TestTarReader(t *testing.T) {
	for name, data := range tarSeeds(t) {
		t.Run(name, func(t *testing.T) {
			for _, pick := range [][]byte{{0}, {1}, {2}, {0, 1, 2}, {2, 1, 0, 0}} {
				ev := checkTarReader(t, data, pick)
				if name == "replayed" && pick[0] == 0 {
					// The sparse file, with the latest long name, the
					// long link name and the PAX uid; its data expanded.
					want := strings.Repeat("n", 200) + `" S size=1000 mode=644 7:0`
					if len(ev) != 3 || !strings.HasPrefix(ev[0].hdr, `"`+want) || !strings.Contains(ev[0].hdr, `link="lnk"`) ||
						ev[0].data != strings.Repeat("\x00", 512)+"abc"+strings.Repeat("\x00", 485) {
						t.Errorf("replayed entries: %q", ev)
					}
				}
			}
		})
	}
	// The seeds make tarReader parse some entries and hand others over.
	var fast, fallback int
	for _, data := range tarSeeds(t) {
		tr := newTarReader(bytes.NewReader(data))
		for {
			if _, err := tr.Next(); err != nil {
				break
			}
			if tr.fb != nil {
				fallback++
			} else {
				fast++
			}
		}
	}
	if fast < 10 || fallback < 5 {
		t.Errorf("entries parsed: %d by tarReader, %d by archive/tar; want both", fast, fallback)
	}
}

// TestTarReaderOffset: once Next returns, the stream is where the data
// starts, as a tar index and tarFile need.
func TestTarReaderOffset(t *testing.T) {
	data := tarSeeds(t)["pax"]
	c := &countingReader{r: bytes.NewReader(data)}
	tr := newTarReader(c)
	hdr, err := tr.Next()
	if err != nil {
		t.Fatal(err)
	}
	at := bytes.Index(data, bytes.Repeat([]byte{'d'}, int(hdr.Size)))
	if c.n != int64(at) || at%512 != 0 {
		t.Errorf("after Next, offset %d; the data is at %d", c.n, at)
	}
}

// FuzzTarReader: tarReader and archive/tar read the same entries, data and
// end from any bytes.
func FuzzTarReader(f *testing.F) {
	for _, data := range tarSeeds(f) {
		f.Add(data, []byte{0, 1, 2})
	}
	f.Fuzz(func(t *testing.T, data, pick []byte) {
		checkTarReader(t, data, pick)
	})
}

// TestTarReaderMetaBound: a stream of GNU long names takes the memory of
// the latest, as in archive/tar, not of all of them.
func TestTarReaderMetaBound(t *testing.T) {
	var raw []byte
	name := strings.Repeat("x", 512<<10)
	for range 20 {
		raw = append(raw, rawHeader("././@LongLink", tar.TypeGNULongName, int64(len(name)))...)
		raw = append(raw, blocks(name)...)
	}
	raw = append(raw, rawHeader("f", tar.TypeReg, 0)...)
	tr := newTarReader(bytes.NewReader(raw))
	hdr, err := tr.Next()
	if err != nil || hdr.Name != name {
		t.Fatalf("Next: %v", err)
	}
	held := 0
	for _, m := range tr.meta {
		held += cap(m)
	}
	if held > 2*len(name) {
		t.Errorf("%d bytes held for 20 long names of %d", held, len(name))
	}
}

// TestTarReaderEndAfterMeta: a tar cut after a PAX header or GNU long name
// is refused, by tarReader and by mkfs, where archive/tar fails too (a PAX
// header whose records do not parse, FuzzTarReader_e49dcf0ef7c21dd7) and
// where it takes the cut for the end of the archive.
func TestTarReaderEndAfterMeta(t *testing.T) {
	vals, err := fuzzcorpus.Values(filepath.Join("testdata", "fuzz", "FuzzTarReader", "FuzzTarReader_e49dcf0ef7c21dd7"))
	if err != nil {
		t.Fatal(err)
	}
	cut := vals[0] // a PAX header of 100 '0's, the stream ending in its padding
	first := append(rawHeader("a", tar.TypeReg, 3), blocks("abc")...)
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	rec := paxRecord("path", "b")
	pax := rawHeader("PaxHeaders/b", tar.TypeXHeader, int64(len(rec)))
	sparse := paxRecord("GNU.sparse.major", "1") + paxRecord("GNU.sparse.minor", "0") + paxRecord("GNU.sparse.name", "b")
	long := strings.Repeat("n", 200)
	for _, c := range []struct {
		name  string
		data  []byte
		ended bool // archive/tar sees the end there, not an error
	}{
		{"malformed PAX cut in its padding", cut, false},
		{"an entry, then a malformed PAX cut in its padding", cat(first, cut), false},
		{"malformed PAX", cat(first, cut, make([]byte, 512-100)), false},
		{"PAX", cat(first, pax, blocks(rec)), true},
		{"PAX cut in its padding", cat(first, pax, []byte(rec)), true},
		{"PAX, then the end-of-archive marker", cat(first, pax, blocks(rec), make([]byte, 1024)), true},
		{"sparse PAX", cat(first, rawHeader("PaxHeaders/b", tar.TypeXHeader, int64(len(sparse))), blocks(sparse)), true},
		{"GNU long name", cat(first, rawHeader("././@LongLink", tar.TypeGNULongName, int64(len(long))), blocks(long)), true},
	} {
		want := checkTarReader(t, c.data, nil)
		if end := want[len(want)-1].err == "EOF"; end != c.ended {
			t.Errorf("%s: archive/tar ends with %q", c.name, want[len(want)-1].err)
		}
		tr := newTarReader(bytes.NewReader(c.data))
		for {
			if _, err = tr.Next(); err != nil {
				break
			}
		}
		if err == io.EOF || c.ended && !errors.Is(err, errEndAfterMeta) {
			t.Errorf("%s: tarReader ends with %v", c.name, err)
		}
		m := &memImage{}
		_, err := BuildTar(m, bytes.NewReader(c.data), Options{Erofs: erofs.Options{TempDir: t.TempDir()}})
		if err == nil || c.ended && !strings.Contains(err.Error(), "tar: truncated at offset") {
			t.Errorf("%s: BuildTar: %v", c.name, err)
		}
	}
}
