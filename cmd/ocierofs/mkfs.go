package main

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/ocierofs/ocierofs/cmd/internal/options"
	"github.com/ocierofs/ocierofs/convert"
	"github.com/ocierofs/ocierofs/convert/mkfs"
	"github.com/ocierofs/ocierofs/erofs"
	"github.com/ocierofs/ocierofs/oci"
)

var mkfsCommand = &cli.Command{
	Name:      "mkfs",
	Usage:     "build an EROFS image from a layer tar (plain, gzip or zstd), stdin or a directory",
	ArgsUsage: "OUTPUT INPUT",
	Description: "INPUT is a tar file (compression detected from its first bytes), - for stdin,\n" +
		"or a directory. Whiteouts (.wh.NAME, .wh..wh..opq) become their overlayfs form,\n" +
		"as mkfs.erofs --tar=f --aufs does. The output appears only when complete: a file\n" +
		"(or a symbolic link's target) is replaced then, keeping its permissions and owner;\n" +
		"a block device or FIFO is written then.",
	Flags: append(append(options.ErofsFlags(), options.Only(options.SourceFlags(), "max-layer-size")...),
		&cli.StringFlag{Name: "blobdev", Usage: "write all file data, chunk-deduplicated, to this blob file: the image holds metadata only (mount with -o device=BLOB, or cat IMAGE BLOB)"},
		&cli.StringSliceFlag{Name: "chunk-dict", Usage: "with --blobdev: an image of a lower layer built with --blobdev (repeatable); chunks it holds are referred to in its blob, not stored again"},
		&cli.BoolFlag{Name: "tar-index", Usage: "metadata-only image whose file data stays in the uncompressed INPUT tar (512-byte blocks, Linux 6.4+; mount with -o device=TAR)"},
		&cli.BoolFlag{Name: "append-tar", Usage: "with --tar-index: write the tar after the index, containerd's tar-index layer, which mounts alone"},
		&cli.BoolFlag{Name: "diff-id", Usage: "hash a tar INPUT with sha256: print its diffID and derive the UUID from it as containerd does (by default mkfs derives the UUID from a fast xxhash64 of the tar, and prints no diffID)"},
	),
	Action: func(c *cli.Context) error {
		if c.NArg() != 2 {
			return fmt.Errorf("mkfs: want OUTPUT and INPUT, got %s", count(c.NArg(), "argument"))
		}
		opt, err := options.Layer(c)
		if err != nil {
			return err
		}
		if err := mkfsOptions(c, &opt); err != nil {
			return err
		}
		if kind := archiveKind(c.Args().Get(0), c.Args().Get(1)); kind != "" {
			return fmt.Errorf("mkfs: OUTPUT %s is a %s, which mkfs would replace with an image: OUTPUT goes first (mkfs OUTPUT INPUT); remove the file to write there",
				c.Args().Get(0), kind)
		}
		start := time.Now()
		res, err := mkfs.Build(c.Args().Get(0), c.Args().Get(1), opt)
		if err != nil {
			return fmt.Errorf("mkfs %s: %w", c.Args().Get(1), err)
		}
		if !c.Bool("quiet") {
			for _, w := range res.Warnings {
				fmt.Fprintf(os.Stderr, "warning: %s\n", w)
			}
			fi, _ := os.Stat(c.Args().Get(0))
			var size int64
			if fi != nil {
				size = fi.Size()
			}
			fmt.Fprintf(os.Stderr, "%s: %d entries, %d bytes, %s", c.Args().Get(0), res.Entries, size, time.Since(start).Round(time.Millisecond))
			if res.DiffID != "" {
				fmt.Fprintf(os.Stderr, ", diffID %s", res.DiffID)
			}
			fmt.Fprintln(os.Stderr)
		}
		return nil
	},
}

// mkfsOptions reads the flags only mkfs has: a bound on the tar, a blob,
// a tar index.
func mkfsOptions(c *cli.Context, opt *convert.Options) (err error) {
	if opt.MaxTarSize, err = options.MaxLayerSize(c); err != nil {
		return err
	}
	// A given UUID needs no diffID; nor does mkfs, which only prints it
	// (containerd, which passes -U, knows its layers' digests already),
	// unless asked: a UUID to derive comes from a fast hash instead.
	opt.NoDiffID = opt.KeepUUID || !c.Bool("diff-id")
	opt.FastUUID = true
	opt.Blob = c.String("blobdev")
	opt.ChunkDicts = c.StringSlice("chunk-dict")
	if len(opt.ChunkDicts) > 0 && opt.Blob == "" {
		return errors.New("--chunk-dict goes with --blobdev")
	}
	opt.TarIndex, opt.AppendTar = c.Bool("tar-index"), c.Bool("append-tar")
	if opt.AppendTar && !opt.TarIndex {
		return errors.New("--append-tar goes with --tar-index")
	}
	if !opt.TarIndex {
		if opt.Blob != "" {
			// Check here so that the error names the flags.
			opt.Erofs.Blob = discard{}
			defer func() { opt.Erofs.Blob = nil }()
			if err := opt.Erofs.Validate(); err != nil {
				return fmt.Errorf("--blobdev: %w", err)
			}
		}
		return nil
	}
	if opt.Blob != "" || opt.Erofs.Compression != nil || opt.Erofs.ChunkSize != 0 {
		return errors.New("--tar-index: the data stays in the tar: no --blobdev, --compress or --chunk-size")
	}
	if c.IsSet("block-size") && opt.Erofs.BlockSize != 512 {
		return fmt.Errorf("--tar-index: block size %d: a tar index has 512-byte blocks, as tar data is 512-aligned", opt.Erofs.BlockSize)
	}
	opt.Erofs.BlockSize = 512
	opt.Erofs.Devices = []erofs.DeviceSlot{{Blocks: 1}}
	defer func() { opt.Erofs.Devices = nil }()
	if err := opt.Erofs.Validate(); err != nil {
		return fmt.Errorf("--tar-index: %w", err)
	}
	return nil
}

// discard stands for a blob when only the options are checked.
type discard struct{}

func (discard) WriteAt(p []byte, _ int64) (int, error) { return len(p), nil }

// archiveKind names what an existing file at path is if it is a layer (a
// tar, compressed or not): mkfs with OUTPUT and INPUT swapped, as tar's
// and cp's order has them, would replace it.
func archiveKind(path, input string) string {
	fi, err := os.Stat(path)
	if err != nil || !fi.Mode().IsRegular() {
		return "" // a FIFO or device is written to, never read
	}
	if in, err := os.Stat(input); err == nil && os.SameFile(fi, in) {
		return "" // Mkfs says that OUTPUT is INPUT, more to the point
	}
	switch kind := oci.SniffFile(path); kind {
	case "":
		return ""
	case "tar":
		return "tar archive"
	default:
		return kind + " file"
	}
}
