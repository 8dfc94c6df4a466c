package main

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/ocierofs/ocierofs/convert"
	"github.com/ocierofs/ocierofs/erofs"
	"github.com/ocierofs/ocierofs/erofs/compress/lz4"
	"github.com/ocierofs/ocierofs/whiteout"
)

var mkfsCommand = &cli.Command{
	Name:      "mkfs",
	Usage:     "build an EROFS image from a layer tar (plain, gzip or zstd), stdin or a directory",
	ArgsUsage: "OUTPUT INPUT",
	Description: "INPUT is a tar file (compression detected from its first bytes), - for stdin,\n" +
		"or a directory. Whiteouts (.wh.NAME, .wh..wh..opq) become their overlayfs form,\n" +
		"as mkfs.erofs --tar=f --aufs does. The output appears only when complete.",
	Flags: append(erofsFlags(),
		&cli.StringFlag{Name: "blobdev", Usage: "write all file data, chunk-deduplicated, to this blob file: the image holds metadata only (mount with -o device=BLOB, or cat IMAGE BLOB)"},
		&cli.StringSliceFlag{Name: "chunk-dict", Usage: "with --blobdev: an image of a lower layer built with --blobdev (repeatable); chunks it holds are referred to in its blob, not stored again"},
		&cli.BoolFlag{Name: "tar-index", Usage: "metadata-only image whose file data stays in the uncompressed INPUT tar (512-byte blocks, Linux 6.4+; mount with -o device=TAR)"},
		&cli.BoolFlag{Name: "append-tar", Usage: "with --tar-index: write the tar after the index, containerd's tar-index layer, which mounts alone"},
	),
	Action: func(c *cli.Context) error {
		if c.NArg() != 2 {
			return fmt.Errorf("mkfs: want OUTPUT and INPUT, got %d arguments", c.NArg())
		}
		opt, err := layerOptions(c)
		if err != nil {
			return err
		}
		if err := mkfsOptions(c, &opt); err != nil {
			return err
		}
		start := time.Now()
		res, err := convert.Mkfs(c.Args().Get(0), c.Args().Get(1), opt)
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

// erofsFlags are the image options shared by mkfs and (later) convert.
func erofsFlags() []cli.Flag {
	return []cli.Flag{
		&cli.IntFlag{Name: "block-size", Aliases: []string{"b"}, Value: 4096, Usage: "block size: 512…65536, a power of two (kernels before 6.4 need the page size)"},
		&cli.StringFlag{Name: "uuid", Aliases: []string{"U"}, Usage: "superblock UUID (default: derived from the diffID as containerd does; given, the diffID is not computed)"},
		&cli.StringFlag{Name: "build-time", Aliases: []string{"T"}, EnvVars: []string{"SOURCE_DATE_EPOCH"}, Usage: "build time in Unix seconds: recorded in the superblock, and the mtime of implied directories"},
		&cli.StringFlag{Name: "label", Aliases: []string{"L"}, Usage: "volume label (at most 15 bytes)"},
		&cli.StringFlag{Name: "whiteouts", Value: "overlay", Usage: "overlay: turn OCI whiteouts into overlayfs ones; keep: store the tar as it is"},
		&cli.BoolFlag{Name: "no-inline-data", Usage: "store no file tails inline next to their inodes (containerd's -Enoinline_data)"},
		&cli.StringFlag{Name: "compress", Aliases: []string{"z"}, Value: "none", Usage: "none, lz4, lz4hc[,level=N] (N 1…12, default 9), or lzma, deflate, zstd [,level=N]"},
		&cli.StringFlag{Name: "pcluster-size", Value: "64K", Usage: "largest compressed physical cluster: a multiple of the block size up to 1M (4K for kernels before 5.13)"},
		&cli.StringFlag{Name: "max-extent", Value: "1M", Usage: "largest decompressed extent (up to 12M)"},
		&cli.BoolFlag{Name: "tail-packing", Value: true, Usage: "store each compressed file's last extent inline after its inode (ztailpacking, 5.17; off for older --min-kernel)"},
		&cli.BoolFlag{Name: "fragments", Usage: "pack small files and file tails together into the packed inode (6.1): smallest images, slower random reads of small files"},
		&cli.BoolFlag{Name: "dedupe", Usage: "let compressed extents share pclusters with identical data written before them, in any file at any offset (6.1; needs --compress)"},
		&cli.StringFlag{Name: "min-kernel", Usage: "oldest Linux X.Y that must mount the image: refuse what it cannot mount"},
		&cli.StringFlag{Name: "chunk-size", Usage: "store files of at least SIZE chunk-based in chunks of SIZE (a power of two ≥ the block size, e.g. 64K): each distinct chunk once, zero chunks as holes (uncompressed images; Linux 5.15+)"},
		&cli.BoolFlag{Name: "no-file-dedupe", Usage: "store every file's data, even when an earlier file has the same content (by default they share its blocks)"},
		&cli.IntFlag{Name: "workers", Usage: "goroutines compressing each image (default: the number of CPUs); the image does not depend on it"},
		&cli.BoolFlag{Name: "quiet", Aliases: []string{"q"}, Usage: "print nothing but errors"},
	}
}

func layerOptions(c *cli.Context) (convert.Options, error) {
	var opt convert.Options
	opt.Erofs.BlockSize = c.Int("block-size")
	if s := c.String("uuid"); s != "" {
		u, err := parseUUID(s)
		if err != nil {
			return opt, err
		}
		opt.Erofs.UUID = u
		opt.KeepUUID = true
	}
	if s := c.String("build-time"); s != "" {
		sec, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return opt, fmt.Errorf("build time %q: want Unix seconds", s)
		}
		opt.Erofs.BuildTime = time.Unix(sec, 0)
	}
	opt.Erofs.VolumeName = c.String("label")
	opt.Erofs.NoInlineData = c.Bool("no-inline-data")
	opt.Erofs.NoDedupe = c.Bool("no-file-dedupe")
	if s := c.String("chunk-size"); s != "" {
		n, err := parseSize(s)
		if err != nil {
			return opt, fmt.Errorf("--chunk-size: %w", err)
		}
		opt.Erofs.ChunkSize = n
	}
	if opt.Erofs.Workers = c.Int("workers"); opt.Erofs.Workers < 0 {
		return opt, fmt.Errorf("--workers %d: want 1 or more", opt.Erofs.Workers)
	}
	m, err := whiteout.ParseMode(c.String("whiteouts"))
	if err != nil {
		return opt, err
	}
	opt.Whiteouts = m
	if s := c.String("min-kernel"); s != "" {
		if opt.Erofs.MinKernel, err = erofs.ParseKernel(s); err != nil {
			return opt, fmt.Errorf("--min-kernel: %w", err)
		}
	}
	if opt.Erofs.Compression, err = compressionOptions(c, opt.Erofs.BlockSize, opt.Erofs.MinKernel); err != nil {
		return opt, err
	}
	// Check the options here so that the error names the flags.
	if err := opt.Erofs.Validate(); err != nil {
		return opt, fmt.Errorf("image options: %w", err)
	}
	return opt, nil
}

// mkfsOptions reads the flags only mkfs has: a blob, a tar index.
func mkfsOptions(c *cli.Context, opt *convert.Options) error {
	// A given UUID needs no diffID; nor does mkfs, which only prints it
	// (containerd, which passes -U, knows its layers' digests already).
	opt.NoDiffID = opt.KeepUUID
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

// parseCompress reads --compress: none, lz4, lz4hc[,level=N], or
// ALG[,level=N][,dictsize=SIZE] for the other algorithms erofs writes
// (mkfs.erofs' -zALG,N is accepted too). It returns nil for none.
func parseCompress(spec string) (*erofs.Compression, error) {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("--compress %q: %s", spec, fmt.Sprintf(format, a...))
	}
	name, args, _ := strings.Cut(spec, ",")
	if name == "none" || name == "" {
		return nil, nil
	}
	hc := name == "lz4hc"
	if hc {
		name = "lz4"
	}
	alg, err := erofs.ParseAlgorithm(name)
	if err != nil {
		return nil, bad("want none, lz4, lz4hc, lzma, deflate or zstd")
	}
	level, ok := erofs.DefaultLevel(alg)
	if !ok {
		return nil, bad("%s is not supported yet", name)
	}
	lo, hi, _ := erofs.LevelRange(alg)
	if alg == erofs.AlgLZ4 {
		// lz4 is the fast encoder alone; lz4hc takes the levels above it.
		lo++
		if hc {
			level = lz4.LevelHC
		}
	}
	z := &erofs.Compression{Algorithm: alg, Level: level}
	for arg := range strings.SplitSeq(args, ",") {
		switch k, v, _ := strings.Cut(arg, "="); {
		case arg == "":
		case k == "dictsize":
			if z.DictSize, err = parseSize(v); err != nil {
				return nil, bad("dictsize: %v", err)
			}
		case k == "level" || !strings.Contains(arg, "="):
			if v == "" {
				v = k
			}
			if alg == erofs.AlgLZ4 && !hc {
				return nil, bad("lz4 takes no level (use lz4hc,level=N)")
			}
			if z.Level, err = strconv.Atoi(v); err != nil || z.Level < lo || z.Level > hi {
				return nil, bad("level must be %d…%d", lo, hi)
			}
		default:
			return nil, bad("unknown setting %q (want level=N or dictsize=SIZE)", k)
		}
	}
	return z, nil
}

// compressionOptions reads --compress and its companions. Defaults that
// the --min-kernel cannot mount give way to what it can; values asked for
// explicitly are kept, and refused by Validate.
func compressionOptions(c *cli.Context, bs int, k erofs.Kernel) (*erofs.Compression, error) {
	z, err := parseCompress(c.String("compress"))
	if z == nil && err == nil && c.Bool("dedupe") {
		return nil, fmt.Errorf("--dedupe shares compressed extents: it needs --compress")
	}
	if z == nil || err != nil {
		return nil, err
	}
	z.TailPacking, z.Fragments, z.Dedupe = c.Bool("tail-packing"), c.Bool("fragments"), c.Bool("dedupe")
	if z.PclusterSize, err = parseSize(c.String("pcluster-size")); err != nil {
		return nil, fmt.Errorf("--pcluster-size: %w", err)
	}
	if z.MaxExtent, err = parseSize(c.String("max-extent")); err != nil {
		return nil, fmt.Errorf("--max-extent: %w", err)
	}
	older := func(major, minor int) bool {
		return k != erofs.Kernel{} && (k[0] < major || k[0] == major && k[1] < minor)
	}
	if !c.IsSet("pcluster-size") && older(5, 13) {
		z.PclusterSize = bs
	}
	if !c.IsSet("tail-packing") && older(5, 17) {
		z.TailPacking = false
	}
	z.PclusterSize = max(z.PclusterSize, bs)
	return z, nil
}

// parseSize reads a byte count with an optional K or M suffix (powers of 1024).
func parseSize(s string) (int, error) {
	mult := 1
	switch {
	case strings.HasSuffix(s, "K"), strings.HasSuffix(s, "k"):
		mult, s = 1<<10, s[:len(s)-1]
	case strings.HasSuffix(s, "M"), strings.HasSuffix(s, "m"):
		mult, s = 1<<20, s[:len(s)-1]
	}
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 || n > 1<<30/mult {
		return 0, fmt.Errorf("size %q: want bytes, or a number with K or M", s)
	}
	return n * mult, nil
}

// parseUUID reads the 8-4-4-4-12 hex form; "0" or "nil" is the zero UUID.
func parseUUID(s string) ([16]byte, error) {
	var u [16]byte
	if s == "0" || s == "nil" {
		return u, nil
	}
	hex := make([]byte, 0, 32)
	for i := 0; i < len(s); i++ {
		if s[i] != '-' {
			hex = append(hex, s[i])
		}
	}
	if len(hex) != 32 || len(s) != 36 {
		return u, fmt.Errorf("uuid %q: want the form 01234567-89ab-cdef-0123-456789abcdef", s)
	}
	for i := 0; i < 16; i++ {
		v, err := strconv.ParseUint(string(hex[2*i:2*i+2]), 16, 8)
		if err != nil {
			return u, fmt.Errorf("uuid %q: %w", s, err)
		}
		u[i] = byte(v)
	}
	return u, nil
}

func formatUUID(u [16]byte) string {
	return fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
}
