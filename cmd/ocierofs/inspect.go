package main

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/ocierofs/ocierofs/cmd/internal/options"
	"github.com/ocierofs/ocierofs/convert/imagefile"
	"github.com/ocierofs/ocierofs/erofs"
)

// openImage opens an image with its extra devices (blobs or a tar beside
// it by their tags, or appended to it).
func openImage(name string) (*erofs.Image, io.Closer, error) {
	f, err := imagefile.Open(name)
	if err != nil {
		return nil, nil, err
	}
	return f.Image, f, nil
}

var inspectCommand = &cli.Command{
	Name:      "inspect",
	Usage:     "show an image's superblock, features, minimum kernel and inode statistics",
	ArgsUsage: "IMAGE",
	Flags: append([]cli.Flag{
		&cli.StringFlag{Name: "output", Aliases: []string{"o"}, Value: "text", Usage: "text, or json (the superblock and the statistics as one object)"},
	}, imageRefFlags()...),
	Action: func(c *cli.Context) error {
		if c.NArg() != 1 {
			return fmt.Errorf("inspect: want IMAGE")
		}
		jsonOut := false
		switch c.String("output") {
		case "text":
		case "json":
			jsonOut = true
		default:
			return fmt.Errorf("--output %q: want text or json", c.String("output"))
		}
		name := c.Args().First()
		oi, err := openImageArg(c, name)
		if err != nil {
			// Too damaged to open (cut short, say): what its
			// superblock tells, then why.
			if s, size, serr := readSuper(name); serr == nil && !jsonOut {
				w := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
				superLines(w, name, s, size)
				w.Flush()
			}
			return err
		}
		defer oi.Close()
		if jsonOut {
			return inspectJSON(c.App.Writer, oi.img, name, oi.size)
		}
		return inspect(c.App.Writer, oi.img, name, oi.size)
	},
}

// inspectReport is what inspect -o json prints.
type inspectReport struct {
	Image          string         `json:"image"`
	Size           int64          `json:"size"`
	BlockSize      int            `json:"blockSize"`
	Blocks         uint64         `json:"blocks"`
	UUID           string         `json:"uuid"`
	Label          string         `json:"label,omitempty"`
	Features       []string       `json:"features"`
	MinKernel      string         `json:"minKernel"`
	Checksum       string         `json:"checksum"` // ok, mismatch or none
	Epoch          string         `json:"epoch"`
	RootNid        uint64         `json:"rootNid"`
	ExtraDevices   int            `json:"extraDevices,omitempty"`
	Inodes         int            `json:"inodes"`
	CompactInodes  int            `json:"compactInodes"`
	ByType         map[string]int `json:"byType"`
	ByLayout       map[string]int `json:"byLayout"`
	FileBytes      int64          `json:"fileBytes"`
	DataBlockBytes int64          `json:"dataBlockBytes"`
	InlineBytes    int64          `json:"inlineBytes"`
	SharedFiles    int            `json:"sharedFiles,omitempty"`
	SharedBytes    int64          `json:"sharedBytes,omitempty"`
	CompressedFile int            `json:"compressedFiles,omitempty"`
	CompressedSize int64          `json:"compressedBytes,omitempty"`
	Pclusters      int64          `json:"pclusterBytes,omitempty"`
}

func inspectJSON(out io.Writer, img *erofs.Image, name string, size int64) error {
	s := img.Super()
	st, err := imageStats(img)
	if err != nil {
		return err
	}
	rep := inspectReport{
		Image: name, Size: size, BlockSize: s.BlockSize, Blocks: s.Blocks, UUID: options.FormatUUID(s.UUID), Label: s.VolumeName,
		Features: erofs.FeatureNames(s.FeatureCompat, s.FeatureIncompat), MinKernel: erofs.MinKernel(s), Checksum: checksumState(s),
		Epoch: epochString(s), RootNid: s.RootNid, ExtraDevices: int(s.ExtraDevices),
		Inodes: st.inodes, CompactInodes: st.compact, ByType: st.byType, ByLayout: st.byLayout,
		FileBytes: st.fileBytes, DataBlockBytes: st.dataBlockBytes, InlineBytes: st.inlineBytes,
		SharedFiles: st.sharedFiles, SharedBytes: st.sharedBytes, CompressedFile: st.zFiles, CompressedSize: st.zBytes, Pclusters: st.zStored,
	}
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}

// checksumState is "ok", "mismatch", or "none" for a superblock without
// a checksum.
func checksumState(s erofs.SuperInfo) string {
	switch {
	case s.FeatureCompat&erofs.FeatureCompatSBChksum == 0:
		return "none"
	case !s.ChecksumOK:
		return "mismatch"
	}
	return "ok"
}

// epochString is the superblock's epoch, with its nanoseconds.
func epochString(s erofs.SuperInfo) string {
	return time.Unix(s.Epoch, int64(s.FixedNsec)).UTC().Format(time.RFC3339Nano)
}

// readSuper decodes the superblock of the image file name alone.
func readSuper(name string) (erofs.SuperInfo, int64, error) {
	f, err := os.Open(name)
	if err != nil {
		return erofs.SuperInfo{}, 0, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return erofs.SuperInfo{}, 0, err
	}
	s, err := erofs.ReadSuper(f, fi.Size())
	return s, fi.Size(), err
}

func inspect(out io.Writer, img *erofs.Image, name string, size int64) error {
	s := img.Super()
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	superLines(w, name, s, size)
	st, err := imageStats(img)
	if err != nil {
		w.Flush()
		return err
	}
	return statLines(w, img, s, st)
}

// superLines prints what the superblock of the image name (a file of size
// bytes) says, and whether the file is shorter than that.
func superLines(w io.Writer, name string, s erofs.SuperInfo, size int64) {
	fmt.Fprintf(w, "image:\t%s\n", name)
	fmt.Fprintf(w, "block size:\t%d\n", s.BlockSize)
	fmt.Fprintf(w, "blocks:\t%d (%d bytes)\n", s.Blocks, s.Blocks*uint64(s.BlockSize))
	fmt.Fprintf(w, "uuid:\t%s\n", options.FormatUUID(s.UUID))
	if s.VolumeName != "" {
		fmt.Fprintf(w, "label:\t%s\n", s.VolumeName)
	}
	fmt.Fprintf(w, "features:\t%s\n", strings.Join(erofs.FeatureNames(s.FeatureCompat, s.FeatureIncompat), " "))
	fmt.Fprintf(w, "minimum kernel:\tLinux %s\n", erofs.MinKernel(s))
	ck := checksumState(s)
	if ck == "mismatch" {
		ck = "MISMATCH"
	}
	fmt.Fprintf(w, "checksum:\t%#08x (%s)\n", s.Checksum, ck)
	fmt.Fprintf(w, "epoch:\t%s\n", epochString(s))
	if s.BuildTime != 0 {
		fmt.Fprintf(w, "build time:\t%s\n", time.Unix(s.Epoch+int64(s.BuildTime), 0).UTC().Format(time.RFC3339))
	}
	fmt.Fprintf(w, "root nid:\t%d\n", s.RootNid)
	fmt.Fprintf(w, "meta_blkaddr:\t%d\n", s.MetaBlkAddr)
	if s.XattrBlkAddr != 0 {
		fmt.Fprintf(w, "xattr_blkaddr:\t%d\n", s.XattrBlkAddr)
	}
	if s.ExtraDevices > 0 {
		fmt.Fprintf(w, "extra devices:\t%d\n", s.ExtraDevices)
	}
	if want := int64(s.Blocks) * int64(s.BlockSize); size < want {
		fmt.Fprintf(w, "TRUNCATED:\tthe superblock gives %d bytes, the file has %d\n", want, size)
	}
}

// statLines prints the inode statistics of img and flushes w.
func statLines(w *tabwriter.Writer, img *erofs.Image, s erofs.SuperInfo, st *stats) error {
	fmt.Fprintf(w, "inodes:\t%d (superblock says %d); %d compact, %d extended\n", st.inodes, s.Inos, st.compact, st.inodes-st.compact)
	for _, k := range sortedKeys(st.byType) {
		fmt.Fprintf(w, "  %s:\t%d\n", k, st.byType[k])
	}
	fmt.Fprintf(w, "layouts:\t\n")
	for _, k := range sortedKeys(st.byLayout) {
		fmt.Fprintf(w, "  %s:\t%d\n", k, st.byLayout[k])
	}
	total := int64(s.Blocks) * int64(s.BlockSize)
	fmt.Fprintf(w, "file data:\t%d bytes in regular files (%d in data blocks, %d inline)\n", st.fileBytes, st.dataBlockBytes, st.inlineBytes)
	fmt.Fprintf(w, "metadata:\t%d bytes (image size less data blocks)\n", total-st.dataBlockBytes)
	if st.sharedFiles > 0 {
		fmt.Fprintf(w, "deduplicated:\t%d files share an earlier file's data (%d bytes not stored again)\n", st.sharedFiles, st.sharedBytes)
	}
	if st.chunkRefs > 0 || st.holeBytes > 0 {
		fmt.Fprintf(w, "chunks:\t%d references to %d distinct chunks (%d bytes shared, not stored again); %d bytes of holes\n", st.chunkRefs, st.chunks, st.chunkShared, st.holeBytes)
	}
	if len(st.extra) > 0 {
		// Per device: with a chunk dictionary, what the lower layers'
		// blobs hold is not stored again in this layer's.
		var total int64
		var per []string
		slots := img.Devices()
		for _, d := range sortedKeys(st.extra) {
			total += st.extra[d]
			name := fmt.Sprintf("device %d", d)
			if int(d) <= len(slots) && slots[d-1].Tag != "" {
				name += " " + slots[d-1].Tag
			}
			per = append(per, fmt.Sprintf("%s: %d", name, st.extra[d]))
		}
		fmt.Fprintf(w, "data on extra devices:\t%d bytes (%s)\n", total, strings.Join(per, ", "))
	}
	if st.zShared > 0 {
		fmt.Fprintf(w, "shared extents:\t%d extents use an earlier extent's pcluster (%d bytes not stored again)\n", st.zShared, st.zSharedBytes)
	}
	if st.zFiles > 0 {
		fmt.Fprintf(w, "compressed:\t%d files, %d bytes in %d bytes of pclusters (+ inline and fragments)\n", st.zFiles, st.zBytes, st.zStored)
	}
	if st.fileBytes > 0 {
		fmt.Fprintf(w, "compression ratio:\t%.3f (file bytes / image size)\n", float64(st.fileBytes)/float64(total))
	}
	return w.Flush()
}

func sortedKeys[K cmp.Ordered, V any](m map[K]V) []K {
	return slices.Sorted(maps.Keys(m))
}

var lsCommand = &cli.Command{
	Name:      "ls",
	Usage:     "list a directory of an image",
	ArgsUsage: "IMAGE [PATH]",
	Flags: append([]cli.Flag{
		&cli.BoolFlag{Name: "long", Aliases: []string{"l"}, Usage: "mode, owner, size, mtime, link target"},
		&cli.BoolFlag{Name: "recursive", Aliases: []string{"R"}, Usage: "list subdirectories too"},
	}, imageRefFlags()...),
	Action: func(c *cli.Context) error {
		if c.NArg() < 1 || c.NArg() > 2 {
			return fmt.Errorf("ls: want IMAGE [PATH]")
		}
		oi, err := openImageArg(c, c.Args().First())
		if err != nil {
			return err
		}
		defer oi.Close()
		img := oi.img
		p := imagePath(c.Args().Get(1))
		w := tabwriter.NewWriter(c.App.Writer, 0, 4, 1, ' ', 0)
		defer w.Flush()
		list := func(p string, ino *erofs.Inode) error {
			name := p
			if !c.Bool("recursive") {
				name = path.Base(p)
			}
			if !c.Bool("long") {
				fmt.Fprintf(w, "%s\n", name)
				return nil
			}
			extra := ""
			switch ino.Mode & erofs.S_IFMT {
			case erofs.S_IFLNK:
				t, err := img.ReadlinkInode(ino)
				if err != nil {
					return fmt.Errorf("%s: %w", p, err)
				}
				extra = " -> " + t
			}
			size := fmt.Sprint(ino.Size)
			if ino.Mode&erofs.S_IFMT == erofs.S_IFCHR || ino.Mode&erofs.S_IFMT == erofs.S_IFBLK {
				size = fmt.Sprintf("%d, %d", ino.Devmajor, ino.Devminor)
			}
			fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%s\t%s\t%s%s\n", modeString(ino.Mode), ino.Nlink, ino.Uid, ino.Gid, size,
				ino.Mtime.UTC().Format("2006-01-02 15:04:05"), name, extra)
			return nil
		}
		ino, err := img.Lstat(p)
		if err != nil {
			return pathError(c.Args().First(), p, err)
		}
		if !ino.IsDir() {
			return list(p, ino)
		}
		if c.Bool("recursive") {
			return img.Walk(p, func(q string, ino *erofs.Inode) error {
				if q == p {
					return nil
				}
				return list(q, ino)
			})
		}
		ents, err := img.ReadDir(p)
		if err != nil {
			return err
		}
		for _, d := range ents {
			q := path.Join(p, d.Name())
			ino, err := img.Lstat(q)
			if err != nil {
				return err
			}
			if err := list(q, ino); err != nil {
				return err
			}
		}
		return nil
	},
}

// imagePath turns a user path ("/etc/passwd", "etc/", "") into an io/fs name.
func imagePath(p string) string {
	p = path.Clean("/" + p)
	if p == "/" {
		return "."
	}
	return p[1:]
}

// pathError names the image and the path (as the user gives it, from the
// root) of an error, in the words of ls and cat for a missing one.
func pathError(image, p string, err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		err = errors.New("no such file or directory")
	} else if pe, ok := err.(*fs.PathError); ok {
		err = pe.Err
	}
	return fmt.Errorf("%s: %s: %w", image, path.Join("/", p), err)
}

var catCommand = &cli.Command{
	Name:      "cat",
	Usage:     "write files of an image to stdout, one after another",
	ArgsUsage: "IMAGE PATH...",
	Flags:     imageRefFlags(),
	Action: func(c *cli.Context) error {
		if c.NArg() < 2 {
			return errors.New("cat: want IMAGE and at least one PATH")
		}
		oi, err := openImageArg(c, c.Args().First())
		if err != nil {
			return err
		}
		defer oi.Close()
		img := oi.img
		// As GNU cat: a path that cannot be written is reported, the
		// others are still written, and the exit status says so.
		failed := false
		for _, arg := range c.Args().Slice()[1:] {
			p := imagePath(arg)
			if err := catFile(c.App.Writer, img, p); err != nil {
				fmt.Fprintf(c.App.ErrWriter, "ocierofs: %v\n", pathError(c.Args().First(), p, err))
				failed = true
			}
		}
		if failed {
			return cli.Exit("", 1) // said above
		}
		return nil
	},
}

// catFile writes the regular file p of img (through symbolic links) to w.
func catFile(w io.Writer, img *erofs.Image, p string) error {
	r, err := img.Open(p)
	if err != nil {
		return err
	}
	defer r.Close()
	fi, err := r.Stat()
	if err != nil {
		return err
	}
	switch {
	case fi.IsDir():
		return errors.New("is a directory")
	case !fi.Mode().IsRegular():
		kind := map[fs.FileMode]string{fs.ModeDevice | fs.ModeCharDevice: "a character device", fs.ModeDevice: "a block device",
			fs.ModeNamedPipe: "a FIFO", fs.ModeSocket: "a socket"}[fi.Mode().Type()]
		return fmt.Errorf("not a regular file: %s", cmp.Or(kind, "of type "+fi.Mode().Type().String()))
	}
	_, err = io.Copy(w, r)
	return err
}

// modeString renders st_mode the way ls -l does ("drwxr-xr-x", "-rwsr-xr-x").
func modeString(m uint32) string {
	t := map[uint32]byte{erofs.S_IFREG: '-', erofs.S_IFDIR: 'd', erofs.S_IFLNK: 'l', erofs.S_IFCHR: 'c',
		erofs.S_IFBLK: 'b', erofs.S_IFIFO: 'p', erofs.S_IFSOCK: 's'}[m&erofs.S_IFMT]
	if t == 0 {
		t = '?'
	}
	b := []byte{t, 'r', 'w', 'x', 'r', 'w', 'x', 'r', 'w', 'x'}
	for i := 0; i < 9; i++ {
		if m&(1<<(8-i)) == 0 {
			b[i+1] = '-'
		}
	}
	special := func(i int, bit uint32, set, unset byte) {
		if m&bit != 0 {
			if b[i] == 'x' {
				b[i] = set
			} else {
				b[i] = unset
			}
		}
	}
	special(3, 0o4000, 's', 'S')
	special(6, 0o2000, 's', 'S')
	special(9, 0o1000, 't', 'T')
	return string(b)
}
