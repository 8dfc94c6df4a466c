// Package convert turns container image layers into EROFS images.
//
// BuildTar converts one layer tar (plain, gzip or zstd) the way
// mkfs.erofs --tar=f --aufs does; whiteouts become their overlayfs form.
// A Converter converts whole images and indexes (Image, Index), each layer
// over the layers below it, sharing the layers that images and platforms
// share; packages built on it make files of layers (convert/mkfs) and
// fill containerd's layer content cache (convert/cache). Checking a
// conversion (convert/check) and merging layer images (convert/merge)
// have packages of their own.
//
//	res, err := convert.BuildTar(w, tarStream, convert.Options{})
//
// A caller that retries (the mirror) tells failures apart with errors.As:
// a *SourceError (the source image is wrong, or of a kind this package
// does not take) and a *TooLargeError (a layer over MaxTarSize) are
// permanent, as the same source fails the same way on every attempt. A
// download that broke (a reset or stalled connection, a stream cut short
// before its digest was checked) is retried by the converter and, if it
// still fails, returned as it is: worth trying again later.
package convert

import (
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"

	"github.com/cespare/xxhash/v2"
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
	// NoDiffID skips the sha256 of the tar: Result.DiffID stays empty. It
	// goes with a given UUID (or KeepUUID), as containerd calls mkfs.erofs
	// with the UUID of a layer whose digests it knows; the hash costs a
	// sixth of a fast lz4 build.
	NoDiffID bool
	// FastUUID, with NoDiffID, derives a zero UUID from the xxhash64 of
	// the uncompressed tar (ContentUUID) instead of containerd's rule,
	// which needs the diffID: the same tar gives the same UUID, at a
	// fraction of the sha256's cost, but not the one containerd's differ
	// would give (it passes its own UUID anyway).
	FastUUID bool
	// Blob (mkfs.Build only), if set, is the path of a blob that receives the
	// data of every regular file, chunk-deduplicated (mkfs --blobdev):
	// the image holds metadata only and names the blob, by its base name,
	// as extra device 1.
	Blob string
	// TarIndex makes a metadata-only image of a tar (uncompressed, a file
	// for mkfs.Build) whose file data stays in the tar, extra device 1, with
	// 512-byte blocks (mkfs.erofs --tar=i; Linux 6.4+). Mount it with
	// -o device=TAR, or set AppendTar: mkfs.Build then writes the tar after the
	// index, containerd's tar-index layer, which mounts alone.
	TarIndex, AppendTar bool
	// ChunkDicts (mkfs.Build only, with Blob) are images of the layers below,
	// built with blobs: a chunk of this layer equal to one of theirs refers
	// to their blob instead of being stored again (mkfs --chunk-dict).
	ChunkDicts []string
	// MaxTarSize, if positive, fails a layer whose uncompressed tar is
	// larger: a bound on the disk a small compressed layer can fill (a
	// gzip of zeros expands 1000:1), for a mirror converting what anyone
	// may push.
	MaxTarSize int64
	// PrefetchList (BuildTar, convert) are paths, in the order a workload
	// first opens them (ReadPrefetchList): the layer's files among them
	// are written last, in that order, so that their data and the
	// metadata after it are one region of the image
	// (Result.PrefetchOffset). Paths the layer lacks are skipped.
	PrefetchList []string

	// Preload, if set, runs on the Builder before the first entry (a
	// chunk dictionary gives it the chunks it knows).
	Preload func(*erofs.Builder) error
	// lower, if set, is the stack of the layers below, once they are
	// read (ok false: one failed): a directory the layer implies shows
	// theirs, and a marker on the root whites out each name they have
	// there (whiteout.Layer.Overlay).
	lower func() (below *whiteout.Tree, ok bool)
	// bottom says the layer is the bottom one of an image in the EROFS
	// image spec's media types: its overlay form carries no whiteouts or
	// markers (whiteout.Tree.StripMarkers).
	bottom bool
	// knownDiffID, if set, is the sha256 of the stream as it is read,
	// checked by the reader itself at its end (a registry's blob read
	// through go-containerregistry, uncompressed, named by this digest):
	// a stream that is indeed not compressed is not hashed again, and
	// Result.DiffID is this. A compressed one is hashed as ever.
	knownDiffID string
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
	// rootOpaque: the layer has an opaque marker on its root, whose
	// whiteouts depend on the layers below; implied are the directories
	// it implies, whose metadata does (the cache records both).
	rootOpaque bool
	implied    []string
	// PrefetchOffset is where the data of the files of
	// Options.PrefetchList begins in the image, their region running to
	// its end; 0 where the layer has none of them.
	PrefetchOffset int64
	// prefetchFound are the listed paths the layer has as files.
	prefetchFound []string
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

// ContentUUID is the UUID of FastUUID: LayerUUID of "ocierofs:xxh64:" and
// the hex xxhash64 of the tar, a name no digest has.
func ContentUUID(sum uint64) [16]byte {
	return LayerUUID(fmt.Sprintf("ocierofs:xxh64:%016x", sum))
}

// BuildTar converts a tar stream (plain, gzip or zstd) into an image on w.
func BuildTar(w io.WriterAt, r io.Reader, opt Options) (*Result, error) {
	return buildTar(w, r, opt, nil)
}

// buildTar also records the layer's directory operations in ops (if not
// nil) and publishes them as soon as the tar has been read; on failure the
// caller decides whether to retry or to publish the failure.
func buildTar(w io.WriterAt, r io.Reader, opt Options, ops *dirOps) (*Result, error) {
	deriveUUID := opt.Erofs.UUID == ([16]byte{}) && !opt.KeepUUID
	if opt.NoDiffID && deriveUUID && !opt.FastUUID {
		return nil, errors.New("without the diffID there is no UUID to derive: give one")
	}
	var h hash.Hash
	var fast *xxhash.Digest
	known := opt.knownDiffID != "" && !opt.NoDiffID
	switch {
	case known:
		// Hashed below only if the stream turns out compressed.
	case !opt.NoDiffID:
		h = sha256.New()
	case deriveUUID:
		fast = xxhash.New()
		h = fast
	}
	// A plain tar file with no diffID to hash is read with pread, and
	// the workers read the data of its big files (tarfile.go).
	var src io.Reader
	comp := Uncompressed
	if tf, ok := openTarFile(r, h == nil && !known); ok && tf.plain() {
		if opt.MaxTarSize > 0 && tf.size > opt.MaxTarSize {
			return nil, &TooLargeError{Max: opt.MaxTarSize}
		}
		src = tf
	} else {
		rc, c, err := Decompress(r)
		if err != nil {
			return nil, err
		}
		defer rc.Close()
		src, comp = rc, c
		if known && comp != Uncompressed {
			// The digest the reader checks is of the compressed
			// bytes: the tar's is still to be computed.
			known, h = false, sha256.New()
		}
		if opt.MaxTarSize > 0 {
			src = &capReader{r: rc, max: opt.MaxTarSize}
		}
	}
	if opt.TarIndex {
		if comp != Uncompressed {
			return nil, fmt.Errorf("tar index: the tar is %s-compressed; the index needs the uncompressed tar it points into", comp)
		}
		if len(opt.Erofs.Devices) != 1 || opt.Erofs.BlockSize != tarBlock {
			return nil, errors.New("tar index: want 512-byte blocks and the tar as the only extra device")
		}
	}
	b, err := NewBuilder(w, opt)
	if err != nil {
		return nil, err
	}
	defer b.Close()
	l := newTarLayer(b, opt.Whiteouts)
	l.ops, l.tarIndex, l.lower, l.bottom, l.maxTar = ops, opt.TarIndex, opt.lower, opt.bottom, opt.MaxTarSize
	if len(opt.PrefetchList) > 0 && !opt.TarIndex {
		l.prefetch, l.tmpDir = newPrefetchSpool(opt.PrefetchList), opt.Erofs.TempDir
		defer l.prefetch.close()
	}
	if err := l.addTar(src, h, comp != Uncompressed); err != nil {
		return nil, err
	}
	prefetchOff, err := l.writePrefetched()
	if err != nil {
		return nil, err
	}
	ops.finish(true)
	if err := l.finish(); err != nil {
		return nil, err
	}
	if opt.TarIndex && opt.Erofs.Devices[0].Blocks == 0 {
		// A stream: its size is known now.
		if err := b.SetDeviceBlocks(1, uint64((l.pos.offset()+tarBlock-1)/tarBlock)); err != nil {
			return nil, err
		}
	}
	res := &Result{
		Compression: comp,
		UUID:        opt.Erofs.UUID,
		Entries:     l.entries,
		Warnings:    l.warnings,
		rootOpaque:  l.model.RootOpaque(),
		implied:     l.implied,

		PrefetchOffset: prefetchOff,
	}
	if l.prefetch != nil {
		res.prefetchFound = l.prefetch.found
	}
	switch {
	case fast != nil:
		res.UUID = ContentUUID(fast.Sum64())
	case known || h != nil:
		if known {
			res.DiffID = opt.knownDiffID
		} else {
			res.DiffID = "sha256:" + hex.EncodeToString(h.Sum(nil))
		}
		if deriveUUID {
			res.UUID = LayerUUID(res.DiffID)
		}
	}
	b.SetUUID(res.UUID)
	if err := b.Finish(); err != nil {
		return nil, err
	}
	return res, nil
}

// NewBuilder makes the Builder of a layer on w: opt.Erofs's, run
// through opt.Preload if set.
func NewBuilder(w io.WriterAt, opt Options) (*erofs.Builder, error) {
	b, err := erofs.NewBuilder(w, opt.Erofs)
	if err != nil {
		return nil, err
	}
	if opt.Preload != nil {
		if err := opt.Preload(b); err != nil {
			b.Close()
			return nil, err
		}
	}
	return b, nil
}

// TooLargeError is the error of a tar larger than Options.MaxTarSize. It
// is permanent: the next attempt would read the same tar.
type TooLargeError struct{ Max int64 }

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("the uncompressed tar is larger than the %d bytes a layer may have", e.Max)
}

// CapReader reads r, and fails with a *TooLargeError once more than max
// bytes are read.
func CapReader(r io.Reader, max int64) io.Reader { return &capReader{r: r, max: max} }

// capReader fails once more than max bytes are read from r.
type capReader struct {
	r      io.Reader
	max, n int64
}

func (c *capReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if c.n += int64(n); c.n > c.max {
		return 0, &TooLargeError{Max: c.max}
	}
	return n, err
}
