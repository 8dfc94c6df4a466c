// Package mkfs makes the EROFS image of one layer as a file, as mkfs.erofs
// does (ocierofs mkfs): of a tar (plain, gzip or zstd; --tar=f) or of a
// directory tree, with its file data in a blob beside it (--blobdev),
// deduplicated against the blobs of the layers below (--chunk-dict), or
// left in the tar as a tar index (--tar=i, the tar appended if asked).
// Outputs appear under their names only once complete.
//
//	res, err := mkfs.Build("layer.erofs", "layer.tar.gz", convert.Options{})
package mkfs

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/ocierofs/ocierofs/convert"
	"github.com/ocierofs/ocierofs/convert/imagefile"
	"github.com/ocierofs/ocierofs/convert/internal/outfile"
	"github.com/ocierofs/ocierofs/erofs"
)

// tarBlock is the size of a tar block, the block size of a tar index.
const tarBlock = 512

// Build writes the image of input (a tar file, "-" for stdin, or a
// directory) to output, and the blob to opt.Blob if set. They appear under
// their names only when complete: nothing is left behind on error.
func Build(output, input string, opt convert.Options) (res *convert.Result, err error) {
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

// mkfsInput is Build's input: a tar (src, a file of size bytes unless it is
// stdin) or a directory (dir).
type mkfsInput struct {
	src  io.Reader
	file *os.File // src when it is a file Build opened
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
func tarIndexOptions(opt *convert.Options, input string, in mkfsInput) error {
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

// mkfsWrites is the files Build writes: the output, and the blob if any.
func mkfsWrites(output string, opt convert.Options) []namedFile {
	writes := []namedFile{{"the output", output}}
	if opt.Blob != "" {
		writes = append(writes, namedFile{"the blob", opt.Blob})
	}
	return writes
}

// mkfsReads is the files Build reads: a tar input other than stdin, and
// the chunk dictionaries with their blobs.
func mkfsReads(input, dir string, opt convert.Options, dict *chunkDict) []namedFile {
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
func mkfsBuild(output, input string, in mkfsInput, opt convert.Options, dict *chunkDict) (res *convert.Result, err error) {
	var outs outfile.Set
	defer func() {
		if err != nil {
			outs.Abort()
		}
	}()
	if opt.Blob != "" {
		if err := imagefile.CreateBlob(&outs, opt.Blob, &opt.Erofs); err != nil {
			return nil, err
		}
	}
	if dict != nil {
		opt.Erofs.Devices = append(opt.Erofs.Devices, dict.slots...)
		cs := opt.Erofs.ChunkSize
		opt.Preload = func(b *erofs.Builder) error { return dict.preload(b, cs) }
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
		res, err = convert.BuildTar(tmp, in.src, opt)
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
	if dir != "" { // its symbolic links resolved by Build
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
