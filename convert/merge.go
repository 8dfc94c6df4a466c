package convert

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/ocierofs/ocierofs/erofs"
	"github.com/ocierofs/ocierofs/whiteout"
)

// Merging layer images (ocierofs merge): the trees of several EROFS layer
// images, bottom layer first, are stacked the way overlayfs stacks them —
// whiteouts delete, opaque directories hide what is below, upper entries
// replace lower ones — into one image of the result, with no overlay
// markers left. By default the merged image holds metadata only and refers
// to the file data where it is: in the layer images themselves and in
// their blobs, which become its extra devices (containerd's fsmeta, the
// nydus bootstrap idea on plain EROFS). Data that cannot be referenced in
// place (inline tails, compressed files) is copied into the merged image.
//
// With MergeOptions.Blob the data is copied instead, into one new blob
// whose chunks are deduplicated (Erofs.ChunkSize, or one block): content
// shared between layers is stored once.

// MergeOptions control Merge.
type MergeOptions struct {
	// Erofs are the merged image's options. Its block size must be the
	// layers' (0: theirs); ChunkSize applies to copied data.
	Erofs erofs.Options
	// Blob, if set, is the path of a new blob that receives all file data,
	// chunk-deduplicated; the layers are then not needed to mount.
	Blob string
}

// MergeResult describes a merged image.
type MergeResult struct {
	// Devices are the files to mount the image with (-o device=… in this
	// order): layer images and their blobs, or the new blob.
	Devices []string
	Entries int
	// CopiedBytes is the file data copied rather than referenced.
	CopiedBytes int64
}

// mergeLayer is one opened layer image.
type mergeLayer struct {
	path  string
	img   *erofs.Image
	files []*os.File
	// devs are the layer's own extra devices, as files (for reading data
	// on copy) and as the merged image's device numbers (for references).
	devFiles []string
}

// mnode is a name in the merged tree: the topmost layer's inode for it.
type mnode struct {
	layer    int
	src      string // path in that layer
	ino      *erofs.Inode
	children map[string]*mnode // directories
	// A regular file's data in place (merging by reference): read once by
	// planDevices, used by add; nil if it must be copied.
	refs  []erofs.ChunkRef
	cbits uint8
}

// Merge writes to out the image of layers stacked bottom to top.
func Merge(out string, layers []string, opt MergeOptions) (res *MergeResult, err error) {
	if len(layers) == 0 {
		return nil, errors.New("merge: no layer images")
	}
	ls := make([]*mergeLayer, len(layers))
	defer func() {
		for _, l := range ls {
			if l != nil {
				l.Close()
			}
		}
	}()
	bs := 0
	for i, p := range layers {
		if ls[i], err = openLayer(p); err != nil {
			return nil, fmt.Errorf("merge: %w", err)
		}
		lbs := int(ls[i].img.Super().BlockSize)
		if bs != 0 && lbs != bs {
			return nil, fmt.Errorf("merge: %s has %d-byte blocks, %s %d: layers must agree", p, lbs, layers[0], bs)
		}
		bs = lbs
	}
	if b := opt.Erofs.BlockSize; b != 0 && b != bs {
		return nil, fmt.Errorf("merge: block size %d: the layers have %d-byte blocks", b, bs)
	}
	opt.Erofs.BlockSize = bs

	root := &mnode{layer: -1, children: map[string]*mnode{}}
	for i, l := range ls {
		if err := stackLayer(root, i, l); err != nil {
			return nil, fmt.Errorf("merge: %s: %w", l.path, err)
		}
	}

	m := &merger{layers: ls, opt: opt, res: &MergeResult{}, devNum: map[[2]int]uint16{}, links: map[[2]uint64]string{}}
	if opt.Blob == "" {
		if err := m.planDevices(root); err != nil {
			return nil, err
		}
	}
	var outs outputs
	defer func() {
		if err != nil {
			outs.abort()
		}
	}()
	if opt.Blob != "" {
		blob, err := outs.create(opt.Blob)
		if err != nil {
			return nil, err
		}
		m.opt.Erofs.Blob = blob
		m.opt.Erofs.Devices = []erofs.DeviceSlot{{Tag: deviceTag(opt.Blob)}}
		m.res.Devices = []string{opt.Blob}
	}
	tmp, err := outs.create(out)
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
	if err := m.emit(root, ""); err != nil {
		return nil, fmt.Errorf("merge: %w", err)
	}
	if err := m.b.Finish(); err != nil {
		return nil, fmt.Errorf("merge: %w", err)
	}
	if err = outs.commit(); err != nil {
		return nil, err
	}
	return m.res, nil
}

// OpenImage opens an image file with its extra devices: each found as the
// file its tag names beside the image, or else inside the image (an image
// with its blob or tar appended, as Linux 6.4+ mounts it without device=).
// Closing the returned Closer closes them all.
func OpenImage(path string) (*erofs.Image, io.Closer, error) {
	l, err := openLayer(path)
	if err != nil {
		return nil, nil, err
	}
	return l.img, l, nil
}

// Close closes the image's files.
func (l *mergeLayer) Close() error {
	var err error
	for _, f := range l.files {
		if e := f.Close(); err == nil {
			err = e
		}
	}
	l.files = nil
	return err
}

// openLayer opens a layer image with its extra devices (see OpenImage).
func openLayer(p string) (_ *mergeLayer, err error) {
	l := &mergeLayer{path: p}
	defer func() {
		if err != nil {
			l.Close()
		}
	}()
	open := func(name string) (*os.File, int64, error) {
		f, err := os.Open(name)
		if err != nil {
			return nil, 0, err
		}
		l.files = append(l.files, f)
		fi, err := f.Stat()
		if err != nil {
			return nil, 0, err
		}
		return f, fi.Size(), nil
	}
	f, size, err := open(p)
	if err != nil {
		return nil, err
	}
	img, err := erofs.Open(f, size)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	devs := img.Devices()
	if len(devs) == 0 {
		l.img = img
		return l, nil
	}
	var opts []erofs.OpenOption
	for _, d := range devs {
		name := filepath.Join(filepath.Dir(p), d.Tag)
		if d.Tag == "" || strings.Contains(d.Tag, "/") {
			break
		}
		df, dsize, err := open(name)
		if err != nil {
			break
		}
		opts = append(opts, erofs.WithDevice(df, dsize))
		l.devFiles = append(l.devFiles, name)
	}
	if sb := img.Super(); len(opts) != len(devs) && size <= int64(sb.Blocks)*int64(sb.BlockSize) {
		// Neither beside it nor appended to it: its metadata is all
		// there is, and reading data on a device fails naming it.
		for _, df := range l.files[1:] {
			df.Close()
		}
		l.files, l.devFiles, l.img = l.files[:1], nil, img
		return l, nil
	}
	if len(opts) != len(devs) {
		// Not beside the image by their tags: appended to it (flat).
		for _, df := range l.files[1:] {
			df.Close()
		}
		l.files = l.files[:1]
		opts, l.devFiles = []erofs.OpenOption{erofs.WithFlatDevices()}, nil
	}
	if l.img, err = erofs.Open(f, size, opts...); err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	return l, nil
}

// stackLayer applies layer i on top of the tree, as overlayfs would. The
// image's Walk visits a directory before its entries, so each entry's
// parent is in dirs by then; it also refuses a directory listed twice.
func stackLayer(root *mnode, i int, l *mergeLayer) error {
	dirs := map[string]*mnode{} // this layer's directories, by path
	return l.img.Walk(".", func(p string, ino *erofs.Inode) error {
		if p == "." {
			// An opaque marker on a layer's root hides nothing:
			// overlayfs ignores it on a lower layer's root, and so
			// does a stack of these layers as containerd mounts them
			// (and mkfs.erofs's merge of them).
			root.layer, root.src, root.ino = i, "", ino
			dirs[p] = root
			return nil
		}
		dir, name := dirs[path.Dir(p)], path.Base(p)
		if ino.Mode&erofs.S_IFMT == erofs.S_IFCHR && ino.Devmajor == 0 && ino.Devminor == 0 {
			delete(dir.children, name) // a whiteout
			return nil
		}
		old := dir.children[name]
		n := &mnode{layer: i, src: p, ino: ino}
		if ino.IsDir() {
			n.children = map[string]*mnode{}
			if old != nil && old.children != nil && !opaque(l.img, ino) {
				n.children = old.children
			}
			dirs[p] = n
		}
		dir.children[name] = n
		return nil
	})
}

func dirName(p string) string {
	if p == "" {
		return "."
	}
	return p
}

func opaque(img *erofs.Image, ino *erofs.Inode) bool {
	xs, err := img.InodeXattrs(ino)
	if err != nil {
		return false
	}
	for _, x := range xs {
		if x.Name == whiteout.OpaqueXattr && string(x.Value) == "y" {
			return true
		}
	}
	return false
}

// merger writes the merged tree.
type merger struct {
	layers []*mergeLayer
	opt    MergeOptions
	b      *erofs.Builder
	res    *MergeResult
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
func (m *merger) planDevices(root *mnode) error {
	used := map[[2]int]bool{}
	var walk func(n *mnode) error
	walk = func(n *mnode) error {
		if n.ino != nil && n.ino.IsRegular() {
			bits, refs, ok, err := m.layers[n.layer].img.ChunkRefs(n.ino)
			if err != nil {
				return fmt.Errorf("%s: %s: %w", m.layers[n.layer].path, n.src, err)
			}
			if ok {
				n.refs, n.cbits = refs, bits
			}
			for _, r := range n.refs {
				if !r.Hole {
					used[[2]int{n.layer, int(r.Device)}] = true
				}
			}
		}
		for _, c := range n.children {
			if err := walk(c); err != nil {
				return err
			}
		}
		return nil
	}
	if err := walk(root); err != nil {
		return err
	}
	for i, l := range m.layers {
		slots := l.img.Devices()
		for d := 0; d <= len(slots); d++ {
			carrier := (d == 0) == (len(slots) == 0) // where the layer keeps its data
			if !carrier && !used[[2]int{i, d}] {
				continue
			}
			slot := erofs.DeviceSlot{Tag: deviceTag(l.path), Blocks: uint64(l.img.Super().Blocks)}
			file := l.path
			if d > 0 {
				slot = erofs.DeviceSlot{Tag: slots[d-1].Tag, Blocks: slots[d-1].Blocks}
				if l.devFiles == nil {
					return fmt.Errorf("%s: its device %d is not a file beside it (%q): appended to it or missing; merging by reference needs it as that file", l.path, d, slots[d-1].Tag)
				}
				file = l.devFiles[d-1]
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

// emit adds n and what is below it, depth first in name order.
func (m *merger) emit(n *mnode, p string) error {
	if n.ino != nil {
		if err := m.add(n, p); err != nil {
			return err
		}
	}
	names := make([]string, 0, len(n.children))
	for name := range n.children {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		if err := m.emit(n.children[name], path.Join(p, name)); err != nil {
			return err
		}
	}
	return nil
}

func (m *merger) add(n *mnode, p string) error {
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
	xs, err := l.img.Xattrs(dirName(n.src))
	if err != nil {
		return fmt.Errorf("%s: %s: %w", l.path, n.src, err)
	}
	for _, x := range xs {
		// overlayfs markers meant the layers below; the merge applied them.
		if !strings.HasPrefix(x.Name, "trusted.overlay.") {
			e.Xattrs = append(e.Xattrs, x)
		}
	}
	switch {
	case ino.IsSymlink():
		if e.Linkname, err = l.img.Readlink(n.src); err != nil {
			return fmt.Errorf("%s: %s: %w", l.path, n.src, err)
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
					return fmt.Errorf("%s: %s: chunk %d on device %d, which the image does not have", l.path, n.src, i, refs[i].Device)
				}
				refs[i].Device = d
			}
			return m.b.AddChunks(e, n.cbits, refs)
		}
		f, err := l.img.Open(n.src)
		if err != nil {
			return fmt.Errorf("%s: %s: %w", l.path, n.src, err)
		}
		defer f.Close()
		m.res.CopiedBytes += e.Size
		return m.b.Add(e, f.(io.Reader))
	}
	return m.b.Add(e, nil)
}
