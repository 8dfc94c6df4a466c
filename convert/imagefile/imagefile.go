// Package imagefile opens EROFS image files together with their extra
// devices (the blobs of an image built with --blobdev, the tar of a tar
// index), found beside the image by the tags of its device table or
// appended to it, so that its file data reads wherever it is. DeviceTag
// gives a device the tag Open finds it by.
package imagefile

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/ocierofs/ocierofs/convert/internal/outfile"
	"github.com/ocierofs/ocierofs/erofs"
)

// File is an EROFS image file opened with its extra devices.
type File struct {
	Path  string
	Image *erofs.Image
	// Files are the files open: the image, then the extra devices found
	// beside it (none when they are appended to it).
	Files []*os.File
	// DeviceFiles are the paths of the extra devices found beside the
	// image, in device order; nil if they are appended to it or absent.
	DeviceFiles []string
}

// Close closes the image's files.
func (l *File) Close() error {
	var err error
	for _, f := range l.Files {
		if e := f.Close(); err == nil {
			err = e
		}
	}
	l.Files = nil
	return err
}

// Open opens the image file p with its extra devices: each found as the
// file its tag names beside the image, or else inside the image (an image
// with its blob or tar appended, as Linux 6.4+ mounts it without
// device=). An image whose devices are neither is opened alone: its
// metadata reads, and reading data on a device fails naming it.
func Open(p string) (_ *File, err error) {
	l := &File{Path: p}
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
		l.Files = append(l.Files, f)
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
		l.Image = img
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
		l.DeviceFiles = append(l.DeviceFiles, name)
	}
	if sb := img.Super(); len(opts) != len(devs) && size <= int64(sb.Blocks)*int64(sb.BlockSize) {
		// Neither beside it nor appended to it: its metadata is all
		// there is, and reading data on a device fails naming it.
		for _, df := range l.Files[1:] {
			df.Close()
		}
		l.Files, l.DeviceFiles, l.Image = l.Files[:1], nil, img
		return l, nil
	}
	if len(opts) != len(devs) {
		// Not beside the image by their tags: appended to it (flat).
		for _, df := range l.Files[1:] {
			df.Close()
		}
		l.Files = l.Files[:1]
		opts, l.DeviceFiles = []erofs.OpenOption{erofs.WithFlatDevices()}, nil
	}
	if l.Image, err = erofs.Open(f, size, opts...); err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	return l, nil
}

// CreateBlob creates the file path among outs and makes it o's blob: the
// image's file data goes there, and the image refers to it as its one
// extra device, tagged so that Open finds it beside the image.
func CreateBlob(outs *outfile.Set, path string, o *erofs.Options) error {
	blob, err := outs.Create(path)
	if err != nil {
		return err
	}
	o.Blob = blob
	o.Devices = []erofs.DeviceSlot{{Tag: DeviceTag(path)}}
	return nil
}

// DeviceTag names the file at path as an extra device in an image's
// device table: its base name, which Open looks for beside the image, if
// it fits the 64-byte tag; "" if not.
func DeviceTag(path string) string {
	if t := filepath.Base(path); len(t) <= 64 {
		return t
	}
	return ""
}
