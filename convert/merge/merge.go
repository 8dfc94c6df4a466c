// Package merge merges EROFS layer images into one (ocierofs merge): the
// trees of the layer images, bottom layer first, are stacked the way
// overlayfs stacks them (whiteout decides: each image read as overlayfs
// reads a lower layer, whiteout.Lowerdir, the stack a whiteout.Tree) into
// one image of the result, with no overlay markers left. By default the merged image
// holds metadata only and refers to the file data where it is: in the
// layer images themselves and in their blobs, which become its extra
// devices (containerd's fsmeta, the nydus bootstrap idea on plain EROFS).
// Data that cannot be referenced in place (inline tails, compressed
// files) is copied into the merged image.
//
// With Options.Blob the data is copied instead, into one new blob
// whose chunks are deduplicated (Erofs.ChunkSize, or one block): content
// shared between layers is stored once.
package merge

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"path/filepath"

	"github.com/ocierofs/ocierofs/convert/imagefile"
	"github.com/ocierofs/ocierofs/convert/internal/outfile"
	"github.com/ocierofs/ocierofs/erofs"
	"github.com/ocierofs/ocierofs/whiteout"
)

// Options control Images.
type Options struct {
	// Erofs are the merged image's options. Its block size must be the
	// layers' (0: theirs); ChunkSize applies to copied data.
	Erofs erofs.Options
	// Blob, if set, is the path of a new blob that receives all file data,
	// chunk-deduplicated; the layers are then not needed to mount.
	Blob string
	// Tags, if set, are the device slot tags of the layer images, one per
	// layer, in place of the files' names (DeviceTag): an image published
	// with its devices names each by its blob's digest (the EROFS image
	// spec's §8.1.12).
	Tags []string
}

// Result describes a merged image.
type Result struct {
	// Devices are the files to mount the image with (-o device=… in this
	// order): layer images and their blobs, or the new blob.
	Devices []string
	Entries int
	// CopiedBytes is the file data copied rather than referenced.
	CopiedBytes int64
}

// mnode is the source of a merged path: a layer's inode, by the header
// that stands for it in the layer's change set.
type mnode struct {
	layer int
	src   string // path in that layer
	ino   *erofs.Inode
	// A regular file's data in place (merging by reference): read once by
	// planDevices, used by add; nil if it must be copied.
	refs  []erofs.ChunkRef
	cbits uint8
}

// Images writes to out the image of the layer images at layers, stacked
// bottom to top.
func Images(out string, layers []string, opt Options) (res *Result, err error) {
	if len(layers) == 0 {
		return nil, errors.New("merge: no layer images")
	}
	if opt.Tags != nil && len(opt.Tags) != len(layers) {
		return nil, fmt.Errorf("merge: %d device tags for %d layers", len(opt.Tags), len(layers))
	}
	ls := make([]*imagefile.File, len(layers))
	defer func() {
		for _, l := range ls {
			if l != nil {
				l.Close()
			}
		}
	}()
	bs := 0
	for i, p := range layers {
		if ls[i], err = imagefile.Open(p); err != nil {
			return nil, fmt.Errorf("merge: %w", err)
		}
		lbs := int(ls[i].Image.Super().BlockSize)
		if bs != 0 && lbs != bs {
			return nil, fmt.Errorf("merge: %s has %d-byte blocks, %s %d: layers must agree", p, lbs, layers[0], bs)
		}
		bs = lbs
	}
	if b := opt.Erofs.BlockSize; b != 0 && b != bs {
		return nil, fmt.Errorf("merge: block size %d: the layers have %d-byte blocks", b, bs)
	}
	opt.Erofs.BlockSize = bs

	m := &merger{layers: ls, opt: opt, res: &Result{}, srcs: map[*tar.Header]*mnode{}, devNum: map[[2]int]uint16{}, links: map[[2]uint64]string{}}
	stack := whiteout.NewTree()
	for i, l := range ls {
		wl, err := m.readLayer(i)
		if err == nil {
			err = stack.Apply(wl)
		}
		if err != nil {
			return nil, fmt.Errorf("merge: %s: %w", l.Path, err)
		}
	}
	if opt.Blob == "" {
		if err := m.planDevices(stack); err != nil {
			return nil, err
		}
	}
	var outs outfile.Set
	defer func() {
		if err != nil {
			outs.Abort()
		}
	}()
	if opt.Blob != "" {
		if err := imagefile.CreateBlob(&outs, opt.Blob, &m.opt.Erofs); err != nil {
			return nil, err
		}
		m.res.Devices = []string{opt.Blob}
	}
	tmp, err := outs.Create(out)
	if err != nil {
		return nil, err
	}
	if m.opt.Erofs.TempDir == "" {
		m.opt.Erofs.TempDir = filepath.Dir(tmp.Name())
	}
	if m.b, err = erofs.NewBuilder(tmp, m.opt.Erofs); err != nil {
		return nil, fmt.Errorf("merge: %w", err)
	}
	defer m.b.Close()
	if err := stack.Walk(m.add); err != nil {
		return nil, fmt.Errorf("merge: %w", err)
	}
	if err := m.b.Finish(); err != nil {
		return nil, fmt.Errorf("merge: %w", err)
	}
	if err = outs.Commit(); err != nil {
		return nil, err
	}
	return m.res, nil
}

// readLayer reads layer i's change set as overlayfs stacks the layer
// (whiteout.Lowerdir): a header for each name of an inode, and the inode
// of each header into m.srcs.
func (m *merger) readLayer(i int) (*whiteout.Layer, error) {
	img := m.layers[i].Image
	wl := whiteout.NewLayer(whiteout.Lowerdir)
	return wl, img.Walk(".", func(p string, ino *erofs.Inode) error {
		h := &tar.Header{Name: p, Typeflag: tar.TypeReg}
		switch ino.Mode & erofs.S_IFMT {
		case erofs.S_IFDIR:
			h.Typeflag = tar.TypeDir
			xs, err := img.InodeXattrs(ino)
			if err != nil {
				return fmt.Errorf("%s: %w", p, err)
			}
			for _, x := range xs {
				if x.Name == whiteout.OpaqueXattr {
					h.PAXRecords = map[string]string{"SCHILY.xattr." + x.Name: string(x.Value)}
				}
			}
		case erofs.S_IFCHR:
			h.Typeflag, h.Devmajor, h.Devminor = tar.TypeChar, int64(ino.Devmajor), int64(ino.Devminor)
		}
		m.srcs[h] = &mnode{layer: i, src: p, ino: ino}
		return wl.Add(h)
	})
}

// merger writes the merged tree.
type merger struct {
	layers []*imagefile.File
	opt    Options
	b      *erofs.Builder
	res    *Result
	// srcs are the inodes of the layers' headers.
	srcs map[*tar.Header]*mnode
	// devNum maps (layer, its device id) to the merged image's device.
	devNum map[[2]int]uint16
	// links: the first merged path of each (layer, nid), for hard links.
	links map[[2]uint64]string
}

// device returns the merged image's device for a file, adding it the first
// time: layers built with a chunk dictionary share the blobs below.
func (m *merger) device(file string, slot erofs.DeviceSlot) (uint16, error) {
	abs, err := filepath.Abs(file)
	if err != nil {
		return 0, err
	}
	for i, f := range m.res.Devices {
		if a, _ := filepath.Abs(f); a == abs {
			return uint16(i + 1), nil
		}
	}
	m.opt.Erofs.Devices = append(m.opt.Erofs.Devices, slot)
	m.res.Devices = append(m.res.Devices, file)
	return uint16(len(m.res.Devices)), nil
}

// planDevices numbers the merged image's devices: for each layer in
// order, the image itself when it holds its own data, or its extra devices
// (its blobs, its tar). Every layer has its device(s) whether or not a file
// it keeps refers to them, so that one device per layer, in layer order,
// mounts it (containerd's fsmeta convention); a device is added beyond
// that only if something refers to it (data on a blob layer's own image).
func (m *merger) planDevices(t *whiteout.Tree) error {
	used := map[[2]int]bool{}
	err := t.Walk(func(_ string, w *whiteout.Node) error {
		n := m.srcs[w.Hdr]
		if !n.ino.IsRegular() {
			return nil
		}
		bits, refs, ok, err := m.layers[n.layer].Image.ChunkRefs(n.ino)
		if err != nil {
			return fmt.Errorf("%s: %s: %w", m.layers[n.layer].Path, n.src, err)
		}
		if ok {
			n.refs, n.cbits = refs, bits
		}
		for _, r := range n.refs {
			if !r.Hole {
				used[[2]int{n.layer, int(r.Device)}] = true
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	for i, l := range m.layers {
		slots := l.Image.Devices()
		for d := 0; d <= len(slots); d++ {
			carrier := (d == 0) == (len(slots) == 0) // where the layer keeps its data
			if !carrier && !used[[2]int{i, d}] {
				continue
			}
			slot := erofs.DeviceSlot{Tag: imagefile.DeviceTag(l.Path), Blocks: uint64(l.Image.Super().Blocks)}
			if m.opt.Tags != nil {
				slot.Tag = m.opt.Tags[i]
			}
			file := l.Path
			if d > 0 {
				slot = erofs.DeviceSlot{Tag: slots[d-1].Tag, Blocks: slots[d-1].Blocks}
				if l.DeviceFiles == nil {
					return fmt.Errorf("%s: its device %d is not a file beside it (%q): appended to it or missing; merging by reference needs it as that file", l.Path, d, slots[d-1].Tag)
				}
				file = l.DeviceFiles[d-1]
			}
			n, err := m.device(file, slot)
			if err != nil {
				return err
			}
			m.devNum[[2]int{i, d}] = n
		}
	}
	return nil
}

// add adds the merged path p, whose node is w.
func (m *merger) add(p string, w *whiteout.Node) error {
	n := m.srcs[w.Hdr]
	if p == "." {
		p = ""
	}
	l := m.layers[n.layer]
	ino := n.ino
	m.res.Entries++
	key := [2]uint64{uint64(n.layer), ino.Nid}
	if !ino.IsDir() && ino.Nlink > 1 {
		if first, ok := m.links[key]; ok {
			return m.b.Add(erofs.Entry{Path: p, HardLink: first}, nil)
		}
		m.links[key] = p
	}
	e := erofs.Entry{
		Path: p, Mode: ino.Mode, Uid: ino.Uid, Gid: ino.Gid, Mtime: ino.Mtime,
		Devmajor: ino.Devmajor, Devminor: ino.Devminor,
	}
	xs, err := l.Image.Xattrs(n.src)
	if err != nil {
		return fmt.Errorf("%s: %s: %w", l.Path, n.src, err)
	}
	for _, x := range xs {
		// overlayfs markers meant the layers below; the merge applied them.
		if whiteout.Lowerdir.KeepXattr(x.Name) {
			e.Xattrs = append(e.Xattrs, x)
		}
	}
	switch {
	case ino.IsSymlink():
		if e.Linkname, err = l.Image.Readlink(n.src); err != nil {
			return fmt.Errorf("%s: %s: %w", l.Path, n.src, err)
		}
	case ino.IsRegular():
		e.Size = ino.Size
		if refs := n.refs; refs != nil {
			for i := range refs {
				if refs[i].Hole {
					continue
				}
				d, ok := m.devNum[[2]int{n.layer, int(refs[i].Device)}]
				if !ok {
					return fmt.Errorf("%s: %s: chunk %d on device %d, which the image does not have", l.Path, n.src, i, refs[i].Device)
				}
				refs[i].Device = d
			}
			return m.b.AddChunks(e, n.cbits, refs)
		}
		f, err := l.Image.Open(n.src)
		if err != nil {
			return fmt.Errorf("%s: %s: %w", l.Path, n.src, err)
		}
		defer f.Close()
		m.res.CopiedBytes += e.Size
		return m.b.Add(e, f.(io.Reader))
	}
	return m.b.Add(e, nil)
}
