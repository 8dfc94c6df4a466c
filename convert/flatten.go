package convert

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/ocierofs/ocierofs/erofs"
	"github.com/ocierofs/ocierofs/internal/atomicfile"
	"github.com/ocierofs/ocierofs/oci"
	"github.com/ocierofs/ocierofs/whiteout"
)

// A flattener merges all layers of an image into one EROFS image, as they
// show stacked, without writing what an upper layer hides. whiteout
// decides what shows: each layer's change set, and the stack of them
// (whiteout.Tree.Apply) once all are read. What is the flattener's own is
// the data: the layers are read from the top down, so when a file streams
// by, every layer above it is known, and its data goes to the image only
// if none of them covers its path (whiteout.Layer.Covers). A covered
// file's data waits in a spool until its layer ends: a hard link of the
// layer, or one of a layer above to the layers below, may still name it
// (the link holds the content the target had). The spool holds one layer
// at a time; what the flattener keeps is headers, bounded by the entries.
type flattener struct {
	b *erofs.Builder
	// upper are the change sets of the layers read, top first: those above
	// the one being read, and it at the end.
	upper []*whiteout.Layer
	files map[*tar.Header]*erofs.File
	// linked are the paths that layers above hard-link to in the layers
	// below them.
	linked map[string]bool
	spool  *os.File
	off    int64
	// spooled are the covered files of the layer being read.
	spooled []spooledFile
}

// spooledFile is a covered file: its entry, and its data in the spool.
type spooledFile struct {
	hdr       *tar.Header
	e         erofs.Entry
	off, size int64
}

func newFlattener(b *erofs.Builder, tmp string) (*flattener, error) {
	f, err := atomicfile.Unnamed(tmp, "flatten-spool-")
	if err != nil {
		return nil, err
	}
	return &flattener{b: b, spool: f, files: map[*tar.Header]*erofs.File{}, linked: map[string]bool{}}, nil
}

func (f *flattener) close() { f.spool.Close() }

// covered reports whether a layer above the one being read covers p.
func (f *flattener) covered(p string) bool {
	for _, u := range f.upper {
		if u.Covers(p) {
			return true
		}
	}
	return false
}

// data takes the data of the file e (header hdr) of the layer being read:
// into the image if it may show, else into the spool.
func (f *flattener) data(hdr *tar.Header, e erofs.Entry, data io.Reader) error {
	if !f.covered(e.Path) {
		file, err := f.b.WriteFile(e, data)
		f.files[hdr] = file
		return err
	}
	n, err := io.Copy(io.NewOffsetWriter(f.spool, f.off), data)
	if err != nil {
		return fmt.Errorf("spooling covered content: %w", err)
	}
	f.spooled = append(f.spooled, spooledFile{hdr: hdr, e: e, off: f.off, size: n})
	f.off += n
	return nil
}

// endLayer writes the spooled files that a path which shows, or a link of
// a layer above, still names, and adds the layer l to those above.
func (f *flattener) endLayer(l *whiteout.Layer) error {
	named := map[*tar.Header]bool{}
	var links []string // the layer's links to the layers below
	l.Walk(func(p string, n *whiteout.Node) error {
		if !n.IsDir() && (f.linked[p] || !f.covered(p)) {
			named[n.Hdr] = true
		}
		if t := n.LowerLink(); t != "" {
			links = append(links, t)
		}
		return nil
	})
	for _, s := range f.spooled {
		if named[s.hdr] {
			file, err := f.b.WriteFile(s.e, io.NewSectionReader(f.spool, s.off, s.size))
			if err != nil {
				return err
			}
			f.files[s.hdr] = file
		}
	}
	f.spooled, f.off = nil, 0
	for _, t := range links {
		f.linked[t] = true
	}
	f.upper = append(f.upper, l)
	return nil
}

// stack is the merged tree of the layers read (srcs, bottom first):
// whiteout.Tree.Apply refuses a stack that docker and containerd refuse
// (a hard link to what no layer below has, there and then).
func (f *flattener) stack(srcs []layerSource) (*whiteout.Tree, error) {
	t := whiteout.NewTree()
	for i, s := range srcs {
		if err := t.Apply(f.upper[len(srcs)-1-i]); err != nil {
			return nil, fmt.Errorf("layer %s: %w", s.desc.Digest, err)
		}
	}
	return t, nil
}

// flatUUID is the UUID of a flattened image: derived, like a layer's, from
// its input — the list of source diffIDs.
func flatUUID(diffIDs []v1.Hash) [16]byte {
	h := sha256.New()
	for _, d := range diffIDs {
		h.Write([]byte(d.String() + "\n"))
	}
	return LayerUUID("sha256:" + hex.EncodeToString(h.Sum(nil)))
}

// stackedReport is the report of a layer made of all of srcs (bottom
// first), which must be tar layers that may be redistributed; what names
// the job in the error otherwise.
func stackedReport(srcs []layerSource, what string) (LayerReport, error) {
	var digests []string
	var size int64
	for _, s := range srcs {
		if !isTarLayer(s.desc.MediaType) || isNondistributable(s.desc.MediaType) {
			return LayerReport{}, fmt.Errorf("layer %s: %s of media type %s", s.desc.Digest, what, s.desc.MediaType)
		}
		digests = append(digests, s.desc.Digest.String())
		size += s.desc.Size
	}
	return LayerReport{Source: strings.Join(digests, ","), SourceSize: size, MediaType: string(srcs[len(srcs)-1].desc.MediaType)}, nil
}

// flattenLayers is the job that converts all of srcs (bottom first) into
// one EROFS layer.
func (c *Converter) flattenLayers(ctx context.Context, j *layerJob, srcs []layerSource) error {
	rep, err := stackedReport(srcs, "cannot flatten a layer")
	if err != nil {
		return err
	}
	j.report = rep
	start := time.Now()
	fl, err := c.retryDownloads(ctx, "flatten", func() (*fileLayer, error) { return c.buildFlat(ctx, srcs, j.report) })
	if err != nil {
		return err
	}
	fl.convertSeconds = time.Since(start).Seconds()
	c.logf("flattened %d layers in %.2fs (%d → %d bytes, %d entries)", len(srcs), fl.convertSeconds, rep.SourceSize, fl.size, fl.entries)
	return c.publish(ctx, j, fl)
}

// buildFlat writes the merged image of srcs, reading the top layer first,
// and makes it a layer; rep names them and their size, for progress.
func (c *Converter) buildFlat(ctx context.Context, srcs []layerSource, rep LayerReport) (*fileLayer, error) {
	raw, entries, warnings, err := c.writeFlat(ctx, srcs, rep)
	if err != nil {
		return nil, err
	}
	fl, err := c.fileLayer(raw, srcs[len(srcs)-1].desc.Digest, entries, warnings)
	if err != nil {
		os.Remove(raw)
	}
	return fl, err
}

// writeFlat writes the merged image of srcs, reading the top layer first,
// to a file of c.tmp; it returns its path, its entries and the layers'
// warnings.
func (c *Converter) writeFlat(ctx context.Context, srcs []layerSource, rep LayerReport) (raw string, entries int, warnings []string, err error) {
	top := srcs[len(srcs)-1].desc.Digest
	// Images with the same top layer over different lower ones flatten
	// at once: each its own file.
	f, err := os.CreateTemp(c.tmp, fmt.Sprintf("flat-%.12s-*.erofs", top.Hex))
	if err != nil {
		return "", 0, nil, err
	}
	raw = f.Name()
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			os.Remove(raw)
		}
	}()
	opt := c.opt.Layer
	opt.Erofs.TempDir = c.tmp
	if opt.Erofs.UUID == ([16]byte{}) && !opt.KeepUUID {
		var ids []v1.Hash
		for _, s := range srcs {
			ids = append(ids, s.diffID)
		}
		opt.Erofs.UUID = flatUUID(ids)
	}
	b, err := erofs.NewBuilder(f, opt.Erofs)
	if err != nil {
		return "", 0, nil, err
	}
	defer b.Close()
	fla, err := newFlattener(b, c.tmp)
	if err != nil {
		return "", 0, nil, err
	}
	defer fla.close()
	var read int64
	for rank := 0; rank < len(srcs); rank++ {
		if err := ctx.Err(); err != nil {
			return "", 0, nil, err
		}
		s := srcs[len(srcs)-1-rank]
		tl := newTarLayer(b, whiteout.Overlay)
		tl.flat = fla
		tl.progress = func(n int64) {
			c.progress(Progress{Source: rep.Source, Stage: StageConverting, Read: n, Total: rep.SourceSize})
		}
		if err := flatLayer(ctx, tl, s, read, opt.MaxTarSize); err != nil {
			return "", 0, nil, fmt.Errorf("layer %s: %w", s.desc.Digest, err)
		}
		read += s.desc.Size
		warnings = append(warnings, tl.warnings...)
	}
	t, err := fla.stack(srcs)
	if err != nil {
		return "", 0, nil, err
	}
	out := newTarLayer(b, whiteout.Overlay)
	out.files = fla.files
	if err := out.place(t); err != nil {
		return "", 0, nil, err
	}
	if err := b.Finish(); err != nil {
		return "", 0, nil, err
	}
	return raw, out.entries, warnings, nil
}

// flatLayer reads one layer into a flattened image; maxTar, if positive,
// bounds its uncompressed tar (Options.MaxTarSize).
func flatLayer(ctx context.Context, tl *tarLayer, s layerSource, base, maxTar int64) error {
	rc, err := s.layer.Compressed()
	if err != nil {
		if oci.Transient(err) {
			return &downloadError{err}
		}
		return fmt.Errorf("download: %w", err)
	}
	defer rc.Close()
	in := &watchReader{r: rc, ctx: ctx, report: func(n int64) { tl.progress(base + n) }}
	broken := func(err error) error { return layerFailure(ctx, in, s.desc, err) }
	dec, comp, err := Decompress(in)
	if err != nil {
		return broken(err)
	}
	defer dec.Close()
	var tarStream io.Reader = dec
	if maxTar > 0 {
		tarStream = &capReader{r: dec, max: maxTar}
	}
	tl.maxTar = maxTar
	h := sha256.New()
	if err := tl.addTar(tarStream, h, comp != Uncompressed); err != nil {
		return broken(err)
	}
	if err := tl.flat.endLayer(tl.model); err != nil {
		return err
	}
	res := &Result{DiffID: "sha256:" + hex.EncodeToString(h.Sum(nil))}
	if err := checkSource(in, res, s); err != nil {
		return broken(err)
	}
	return nil
}
