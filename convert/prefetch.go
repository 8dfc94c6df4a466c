package convert

import (
	"archive/tar"
	"bufio"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/ocierofs/ocierofs/erofs"
)

// AnnotationPrefetch is the layer annotation of a layer converted with a
// prefetch list: "OFFSET:END", the bytes of the EROFS image (the image
// data, before any dm-verity tree) that hold the listed files' data and,
// after it, the metadata. A lazy mount fetches them first.
const AnnotationPrefetch = "org.ocierofs.prefetch.range"

// ReadPrefetchList reads a prefetch list as `ocierofs mount --record`
// writes it: one absolute path a line, in the order of first opening.
// Blank lines and lines starting with # are skipped, and so is a path
// listed again. A line that is no path a layer can hold is an error that
// names it.
func ReadPrefetchList(name string) ([]string, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	seen := map[string]bool{}
	var paths []string
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimRight(sc.Text(), "\r")
		if strings.TrimSpace(line) == "" || strings.HasPrefix(line, "#") {
			continue
		}
		p, err := erofs.CleanPath(line)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %q: %w", name, n, line, err)
		}
		if p == "" {
			return nil, fmt.Errorf("%s:%d: %q is the root directory: a prefetch list names files", name, n, line)
		}
		if !seen[p] {
			seen[p] = true
			paths = append(paths, p)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return paths, nil
}

// prefetchSpool holds the data of the layer's files that a prefetch list
// names while the tar streams by, so that they are written last, in the
// list's order, after every other file's data and just before the
// metadata: a lazy mount then fetches them and the metadata as one range.
type prefetchSpool struct {
	rank  map[string]int // path → place in the list
	f     *os.File
	size  int64
	files []listedFile
	// found are the listed paths the layer has as regular files.
	found []string
}

type listedFile struct {
	rank      int
	hdr       *tar.Header
	e         erofs.Entry
	off, size int64
}

func newPrefetchSpool(list []string) *prefetchSpool {
	s := &prefetchSpool{rank: make(map[string]int, len(list))}
	for i, p := range list {
		s.rank[p] = i
	}
	return s
}

// rankOf is p's place in the list, if it names p; a nil spool names none.
func (s *prefetchSpool) rankOf(p string) (int, bool) {
	if s == nil {
		return 0, false
	}
	r, ok := s.rank[p]
	return r, ok
}

// noData notes a listed entry at p that has no data to lay out: an empty
// file (found), or no regular file, which it returns a warning for.
func (s *prefetchSpool) noData(p string, e erofs.Entry) string {
	if _, listed := s.rankOf(p); !listed {
		return ""
	}
	if e.Mode&erofs.S_IFMT != erofs.S_IFREG {
		return fmt.Sprintf("prefetch list: /%s is not a regular file here: skipped", p)
	}
	s.found = append(s.found, p)
	return ""
}

// take spools the data of the file e (header hdr) if the list names it,
// and reports whether it did.
func (s *prefetchSpool) take(hdr *tar.Header, e erofs.Entry, data io.Reader, tmpDir string) (bool, error) {
	r, ok := s.rankOf(e.Path)
	if !ok || e.Sparse {
		return false, nil
	}
	if s.f == nil {
		f, err := os.CreateTemp(tmpDir, "prefetch-*")
		if err != nil {
			return false, err
		}
		os.Remove(f.Name()) // unnamed: it goes with the process
		s.f = f
	}
	n, err := io.Copy(io.NewOffsetWriter(s.f, s.size), io.LimitReader(data, e.Size))
	if err == nil && n < e.Size {
		err = shortRead(n, e.Size)
	}
	if err != nil {
		return false, err
	}
	s.files = append(s.files, listedFile{rank: r, hdr: hdr, e: e, off: s.size, size: n})
	s.size += n
	return true, nil
}

func shortRead(got, want int64) error {
	return fmt.Errorf("data ends after %d of %d bytes: %w", got, want, io.ErrUnexpectedEOF)
}

// close drops the spool.
func (s *prefetchSpool) close() {
	if s != nil && s.f != nil {
		s.f.Close()
		s.f = nil
	}
}

// writePrefetched writes the spooled files that are still the layer's
// (a later entry may have replaced one) in the list's order, and returns
// the image offset where their data begins, or 0 if none was written.
func (l *tarLayer) writePrefetched() (int64, error) {
	s := l.prefetch
	if s == nil {
		return 0, nil
	}
	defer s.close()
	var keep []listedFile
	for _, f := range s.files {
		if n := l.model.Node(f.e.Path); n != nil && n.Hdr == f.hdr {
			keep = append(keep, f)
		}
	}
	for _, f := range keep {
		s.found = append(s.found, f.e.Path)
	}
	slices.Sort(s.found)
	if len(keep) == 0 {
		return 0, nil
	}
	slices.SortStableFunc(keep, func(a, b listedFile) int { return a.rank - b.rank })
	off, err := l.b.DataOffset()
	if err != nil {
		return 0, err
	}
	for _, f := range keep {
		file, err := l.b.WriteFile(f.e, io.NewSectionReader(s.f, f.off, f.size))
		if err != nil {
			return 0, fmt.Errorf("tar entry %q: %w", f.hdr.Name, err)
		}
		l.files[f.hdr] = file
	}
	return off, nil
}

// prefetchRange is the AnnotationPrefetch value of a region from off to
// the end of an image of size bytes.
func prefetchRange(off, size int64) string {
	return strconv.FormatInt(off, 10) + ":" + strconv.FormatInt(size, 10)
}

// ParsePrefetchRange reads an AnnotationPrefetch value of an image of
// size bytes.
func ParsePrefetchRange(s string, size int64) (off, end int64, err error) {
	a, b, ok := strings.Cut(s, ":")
	if ok {
		off, err = strconv.ParseInt(a, 10, 64)
		if err == nil {
			end, err = strconv.ParseInt(b, 10, 64)
		}
	}
	if !ok || err != nil || off < 0 || end < off || end > size {
		return 0, 0, fmt.Errorf("%s %q: want OFFSET:END within the image's %d bytes", AnnotationPrefetch, s, size)
	}
	return off, end, nil
}

// reportUnlisted logs how many paths of the prefetch list no layer of an
// image has as a file: a list recorded over another version of the image
// names files that are gone, which are skipped.
func (c *Converter) reportUnlisted(jobs []*layerJob) {
	list := c.opt.Layer.PrefetchList
	if len(list) == 0 {
		return
	}
	found := map[string]bool{}
	for _, j := range jobs {
		if fl, ok := j.layer.(*fileLayer); ok {
			for _, p := range fl.prefetchFound {
				found[p] = true
			}
		}
	}
	var missing []string
	for _, p := range list {
		if !found[p] {
			missing = append(missing, "/"+p)
		}
	}
	switch {
	case len(missing) == 0:
		c.logf("prefetch list: the %d files it names are laid out first", len(list))
	case len(missing) == len(list):
		c.logf("prefetch list: none of its %d paths is a file of the image: nothing is laid out first", len(list))
	default:
		c.logf("prefetch list: %d of its %d paths are no file of the image, skipped (the first: %s)", len(missing), len(list), missing[0])
	}
}
