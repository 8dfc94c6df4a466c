// Package convert turns container image layers into EROFS images.
//
// Mkfs and BuildTar convert one layer tar (plain, gzip or zstd) the way
// mkfs.erofs --tar=f --aufs does; whiteouts become their overlayfs form.
//
//	res, err := convert.Mkfs("layer.erofs", "layer.tar.gz", convert.Options{})
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
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/cespare/xxhash/v2"

	"github.com/ocierofs/ocierofs/convert/imagefile"
	"github.com/ocierofs/ocierofs/convert/internal/outfile"
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
	// Blob (Mkfs only), if set, is the path of a blob that receives the
	// data of every regular file, chunk-deduplicated (mkfs --blobdev):
	// the image holds metadata only and names the blob, by its base name,
	// as extra device 1.
	Blob string
	// TarIndex makes a metadata-only image of a tar (uncompressed, a file
	// for Mkfs) whose file data stays in the tar, extra device 1, with
	// 512-byte blocks (mkfs.erofs --tar=i; Linux 6.4+). Mount it with
	// -o device=TAR, or set AppendTar: Mkfs then writes the tar after the
	// index, containerd's tar-index layer, which mounts alone.
	TarIndex, AppendTar bool
	// ChunkDicts (Mkfs only, with Blob) are images of the layers below,
	// built with blobs: a chunk of this layer equal to one of theirs refers
	// to their blob instead of being stored again (mkfs --chunk-dict).
	ChunkDicts []string
	// MaxTarSize, if positive, fails a layer whose uncompressed tar is
	// larger: a bound on the disk a small compressed layer can fill (a
	// gzip of zeros expands 1000:1), for a mirror converting what anyone
	// may push.
	MaxTarSize int64

	// preload, if set, runs on the Builder before the first entry.
	preload func(*erofs.Builder) error
	// lower, if set, is the stack of the layers below, once they are
	// read (ok false: one failed): a directory the layer implies shows
	// theirs, and a marker on the root whites out each name they have
	// there (whiteout.Layer.Overlay).
	lower func() (below *whiteout.Tree, ok bool)
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
	switch {
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
	if tf, ok := openTarFile(r, h == nil); ok && tf.plain() {
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
	b, err := newBuilder(w, opt)
	if err != nil {
		return nil, err
	}
	defer b.Close()
	l := newTarLayer(b, opt.Whiteouts)
	l.ops, l.tarIndex, l.lower, l.maxTar = ops, opt.TarIndex, opt.lower, opt.MaxTarSize
	if err := l.addTar(src, h, comp != Uncompressed); err != nil {
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
	}
	switch {
	case fast != nil:
		res.UUID = ContentUUID(fast.Sum64())
	case h != nil:
		res.DiffID = "sha256:" + hex.EncodeToString(h.Sum(nil))
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

// newBuilder makes the Builder of a layer, preloaded if the options say.
func newBuilder(w io.WriterAt, opt Options) (*erofs.Builder, error) {
	b, err := erofs.NewBuilder(w, opt.Erofs)
	if err != nil {
		return nil, err
	}
	if opt.preload != nil {
		if err := opt.preload(b); err != nil {
			b.Close()
			return nil, err
		}
	}
	return b, nil
}

// Mkfs writes the image of input (a tar file, "-" for stdin, or a
// directory) to output, and the blob to opt.Blob if set. They appear under
// their names only when complete: nothing is left behind on error.
func Mkfs(output, input string, opt Options) (res *Result, err error) {
	in, err := openMkfsInput(input)
	if err != nil {
		return nil, err
	}
	if in.file != nil {
		defer in.file.Close()
	}
	if err := tarIndexOptions(&opt, input, in); err != nil {
		return nil, err
	}
	var dict *chunkDict
	if len(opt.ChunkDicts) > 0 {
		if opt.Blob == "" {
			return nil, errors.New("a chunk dictionary goes with a blob (--blobdev)")
		}
		if dict, err = openChunkDicts(opt.ChunkDicts); err != nil {
			return nil, err
		}
		defer dict.close()
	}
	if err := checkDistinct(mkfsWrites(output, opt), mkfsReads(input, in.dir, opt, dict), in.dir); err != nil {
		return nil, err
	}
	if in.file != nil && isErofsImage(in.file, in.size) {
		// Its zero first block reads as a tar's end: it would give an
		// empty image, over OUTPUT.
		return nil, fmt.Errorf("%s is an EROFS image, not a tar (OUTPUT goes first: mkfs OUTPUT INPUT)", input)
	}
	return mkfsBuild(output, input, in, opt, dict)
}

// mkfsInput is Mkfs's input: a tar (src, a file of size bytes unless it is
// stdin) or a directory (dir).
type mkfsInput struct {
	src  io.Reader
	file *os.File // src when it is a file Mkfs opened
	size int64
	dir  string
}

// openMkfsInput opens input: "-" for stdin, a tar file, or a directory,
// which is read where it is when reached through a symbolic link.
func openMkfsInput(input string) (mkfsInput, error) {
	if input == "-" {
		return mkfsInput{src: os.Stdin}, nil
	}
	fi, err := os.Stat(input)
	if err != nil {
		return mkfsInput{}, err
	}
	if fi.IsDir() {
		dir, err := filepath.EvalSymlinks(input)
		return mkfsInput{dir: dir}, err
	}
	f, err := os.Open(input)
	if err != nil {
		return mkfsInput{}, err
	}
	return mkfsInput{src: f, file: f, size: fi.Size()}, nil
}

// tarIndexOptions checks and sets the options of a tar index (also with
// AppendTar): 512-byte blocks and the tar as the one extra device. Its
// size, when the tar is read from stdin, is set once it is read
// (buildTar); it is then known to be whoever appends it, as containerd
// does with mkfs.erofs --tar=i.
func tarIndexOptions(opt *Options, input string, in mkfsInput) error {
	if opt.AppendTar {
		opt.TarIndex = true
	}
	if !opt.TarIndex {
		return nil
	}
	switch {
	case in.dir != "" || opt.Blob != "":
		return errors.New("tar index: the input must be a tar, and there is no blob")
	case opt.AppendTar && input == "-":
		return errors.New("tar index: the tar to append must be a file, not stdin")
	}
	if bs := opt.Erofs.BlockSize; bs != 0 && bs != tarBlock {
		return fmt.Errorf("tar index: block size %d: it has 512-byte blocks, as tar data is 512-aligned", bs)
	}
	opt.Erofs.BlockSize = tarBlock
	slot := erofs.DeviceSlot{Blocks: uint64((in.size + tarBlock - 1) / tarBlock)}
	if input != "-" {
		slot.Tag = imagefile.DeviceTag(input)
	}
	opt.Erofs.Devices = []erofs.DeviceSlot{slot}
	return nil
}

// mkfsWrites is the files Mkfs writes: the output, and the blob if any.
func mkfsWrites(output string, opt Options) []namedFile {
	writes := []namedFile{{"the output", output}}
	if opt.Blob != "" {
		writes = append(writes, namedFile{"the blob", opt.Blob})
	}
	return writes
}

// mkfsReads is the files Mkfs reads: a tar input other than stdin, and
// the chunk dictionaries with their blobs.
func mkfsReads(input, dir string, opt Options, dict *chunkDict) []namedFile {
	var reads []namedFile
	if input != "-" && dir == "" {
		reads = append(reads, namedFile{"the input", input})
	}
	if dict == nil {
		return reads
	}
	for i, l := range dict.layers {
		reads = append(reads, namedFile{"the chunk dictionary", opt.ChunkDicts[i]})
		for _, f := range l.DeviceFiles {
			reads = append(reads, namedFile{"chunk dictionary " + filepath.Base(opt.ChunkDicts[i]) + "'s blob", f})
		}
	}
	return reads
}

// mkfsBuild builds the image (and the blob) into temporary files, appends
// the tar if asked, and gives them their names; on error it removes them.
func mkfsBuild(output, input string, in mkfsInput, opt Options, dict *chunkDict) (res *Result, err error) {
	var outs outfile.Set
	defer func() {
		if err != nil {
			outs.Abort()
		}
	}()
	if opt.Blob != "" {
		blob, err := outs.Create(opt.Blob)
		if err != nil {
			return nil, err
		}
		opt.Erofs.Blob = blob
		opt.Erofs.Devices = []erofs.DeviceSlot{{Tag: imagefile.DeviceTag(opt.Blob)}}
	}
	if dict != nil {
		opt.Erofs.Devices = append(opt.Erofs.Devices, dict.slots...)
		cs := opt.Erofs.ChunkSize
		opt.preload = func(b *erofs.Builder) error { return dict.preload(b, cs) }
	}
	tmp, err := outs.Create(output)
	if err != nil {
		return nil, err
	}
	if opt.Erofs.TempDir == "" {
		opt.Erofs.TempDir = filepath.Dir(tmp.Name())
	}
	if in.dir != "" {
		res, err = BuildDir(tmp, in.dir, opt)
	} else {
		res, err = BuildTar(tmp, in.src, opt)
	}
	if err != nil {
		return nil, err
	}
	if opt.AppendTar {
		if err = appendFile(tmp, input); err != nil {
			return nil, fmt.Errorf("appending the tar: %w", err)
		}
	}
	if err = outs.Commit(); err != nil {
		return nil, err
	}
	return res, nil
}

// namedFile is a file a build reads or writes, and what it is to the build.
type namedFile struct{ role, path string }

// checkDistinct refuses a build that would write a file over one it reads
// or writes otherwise (mkfs x.tar x.tar, --tar-index, a blob named like the
// image or like a chunk dictionary's blob: each would replace data the
// image needs, or the only copy of it, with exit status 0), or that writes
// inside the directory it reads (it would read its own temporary file).
func checkDistinct(writes, reads []namedFile, dir string) error {
	inside := ""
	if dir != "" { // its symbolic links resolved by Mkfs
		d, err := filepath.Abs(dir)
		if err != nil {
			return err
		}
		inside = d + string(filepath.Separator)
	}
	for i, w := range writes {
		for _, o := range append(writes[i+1:len(writes):len(writes)], reads...) {
			if sameFile(w.path, o.path) {
				return fmt.Errorf("%s %s and %s %s are the same file", w.role, w.path, o.role, o.path)
			}
		}
		// Through a symbolic link too: the temporary file is made
		// beside the file the link names.
		target, _, err := outfile.Resolve(w.path)
		if err != nil {
			return err
		}
		if inside != "" && strings.HasPrefix(canonicalPath(target), inside) {
			return fmt.Errorf("%s %s is inside the input directory %s", w.role, w.path, dir)
		}
	}
	return nil
}

// sameFile says whether a and b name one file: the same inode if both
// exist, the same path (its directory's symbolic links resolved) if
// neither does.
func sameFile(a, b string) bool {
	fa, ea := os.Stat(a)
	fb, eb := os.Stat(b)
	switch {
	case ea == nil && eb == nil:
		return os.SameFile(fa, fb)
	case ea == nil || eb == nil:
		return false
	}
	return canonicalPath(a) == canonicalPath(b)
}

// canonicalPath is p made absolute, with the symbolic links of its
// directory resolved.
func canonicalPath(p string) string {
	abs, err := filepath.Abs(p)
	if err != nil {
		return p
	}
	d, err := filepath.EvalSymlinks(filepath.Dir(abs))
	if err != nil {
		return abs
	}
	return filepath.Join(d, filepath.Base(abs))
}

// TooLargeError is the error of a tar larger than Options.MaxTarSize. It
// is permanent: the next attempt would read the same tar.
type TooLargeError struct{ Max int64 }

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("the uncompressed tar is larger than the %d bytes a layer may have", e.Max)
}

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

// isErofsImage reports whether f (of size bytes) holds an EROFS image: a
// first block of zeros (never a tar's, unless an empty one's) and a
// superblock.
func isErofsImage(f *os.File, size int64) bool {
	b := make([]byte, tarBlock)
	if _, err := f.ReadAt(b, 0); err != nil || slices.ContainsFunc(b, func(c byte) bool { return c != 0 }) {
		return false
	}
	_, err := erofs.ReadSuper(f, size)
	return err == nil
}

// appendFile copies the file src to the end of f.
func appendFile(f *os.File, src string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	end, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		return err
	}
	_, err = io.Copy(io.NewOffsetWriter(f, end), in)
	return err
}
