// Package convert turns container image layers into EROFS images.
//
// Mkfs and BuildTar convert one layer tar (plain, gzip or zstd) the way
// mkfs.erofs --tar=f --aufs does; whiteouts become their overlayfs form.
//
//	res, err := convert.Mkfs("layer.erofs", "layer.tar.gz", convert.Options{})
package convert

import (
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/ocierofs/ocierofs/erofs"
	"github.com/ocierofs/ocierofs/whiteout"
)

// Options for converting one layer.
type Options struct {
	Erofs     erofs.Options
	Whiteouts whiteout.Mode
	// KeepUUID keeps Erofs.UUID even when it is zero; otherwise a zero UUID
	// is derived from the input (containerd's rule for tar layers).
	KeepUUID bool
}

// Result describes a converted layer.
type Result struct {
	// DiffID is the sha256 of the uncompressed tar ("sha256:…"); empty for a
	// directory input.
	DiffID      string
	Compression Compression
	UUID        [16]byte
	Entries     int
	Warnings    []string
}

// LayerUUID is the UUID containerd gives the EROFS image of a layer: a
// SHA-1 name-based UUID of "erofs:blobs/" + digest in the URL namespace.
func LayerUUID(digest string) [16]byte {
	// RFC 4122 §4.3, version 5.
	ns := [16]byte{0x6b, 0xa7, 0xb8, 0x11, 0x9d, 0xad, 0x11, 0xd1, 0x80, 0xb4, 0x00, 0xc0, 0x4f, 0xd4, 0x30, 0xc8}
	h := sha1.New()
	h.Write(ns[:])
	h.Write([]byte("erofs:blobs/" + digest))
	var u [16]byte
	copy(u[:], h.Sum(nil))
	u[6] = u[6]&0x0f | 0x50
	u[8] = u[8]&0x3f | 0x80
	return u
}

// BuildTar converts a tar stream (plain, gzip or zstd) into an image on w.
func BuildTar(w io.WriterAt, r io.Reader, opt Options) (*Result, error) {
	return buildTar(w, r, opt, nil)
}

// buildTar also records the layer's directory operations in ops (if not
// nil) and publishes them as soon as the tar has been read; on failure the
// caller decides whether to retry or to publish the failure.
func buildTar(w io.WriterAt, r io.Reader, opt Options, ops *dirOps) (*Result, error) {
	rc, comp, err := Decompress(r)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	b, err := erofs.NewBuilder(w, opt.Erofs)
	if err != nil {
		return nil, err
	}
	defer b.Close()
	l := &tarLayer{b: b, wt: whiteout.NewTranslator(opt.Whiteouts), ops: ops}
	h, err := l.addTar(rc)
	if err != nil {
		return nil, err
	}
	ops.finish(true)
	res := &Result{
		DiffID:      "sha256:" + hex.EncodeToString(h.Sum(nil)),
		Compression: comp,
		UUID:        opt.Erofs.UUID,
		Entries:     l.entries,
		Warnings:    l.warnings,
	}
	if res.UUID == ([16]byte{}) && !opt.KeepUUID {
		res.UUID = LayerUUID(res.DiffID)
	}
	b.SetUUID(res.UUID)
	if err := b.Finish(); err != nil {
		return nil, err
	}
	return res, nil
}

// Mkfs writes the image of input (a tar file, "-" for stdin, or a
// directory) to output. The image appears under its name only when it is
// complete: nothing is left behind on error.
func Mkfs(output, input string, opt Options) (res *Result, err error) {
	var src io.Reader
	var dir string
	if input == "-" {
		src = os.Stdin
	} else {
		fi, err := os.Stat(input)
		if err != nil {
			return nil, err
		}
		if fi.IsDir() {
			dir = input
		} else {
			f, err := os.Open(input)
			if err != nil {
				return nil, err
			}
			defer f.Close()
			src = f
		}
	}
	tmp, err := os.CreateTemp(filepath.Dir(output), "."+filepath.Base(output)+".tmp-*")
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if opt.Erofs.TempDir == "" {
		opt.Erofs.TempDir = filepath.Dir(output)
	}
	if dir != "" {
		res, err = BuildDir(tmp, dir, opt)
	} else {
		res, err = BuildTar(tmp, src, opt)
	}
	if err != nil {
		return nil, err
	}
	if err = tmp.Chmod(0o644); err != nil {
		return nil, err
	}
	if err = tmp.Close(); err != nil {
		return nil, err
	}
	if err = os.Rename(tmp.Name(), output); err != nil {
		return nil, fmt.Errorf("rename to %s: %w", output, err)
	}
	return res, nil
}
