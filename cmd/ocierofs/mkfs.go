package main

import (
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/ocierofs/ocierofs/convert"
	"github.com/ocierofs/ocierofs/whiteout"
)

var mkfsCommand = &cli.Command{
	Name:      "mkfs",
	Usage:     "build an EROFS image from a layer tar (plain, gzip or zstd), stdin or a directory",
	ArgsUsage: "OUTPUT INPUT",
	Description: "INPUT is a tar file (compression detected from its first bytes), - for stdin,\n" +
		"or a directory. Whiteouts (.wh.NAME, .wh..wh..opq) become their overlayfs form,\n" +
		"as mkfs.erofs --tar=f --aufs does. The output appears only when complete.",
	Flags: erofsFlags(),
	Action: func(c *cli.Context) error {
		if c.NArg() != 2 {
			return fmt.Errorf("mkfs: want OUTPUT and INPUT, got %d arguments", c.NArg())
		}
		opt, err := layerOptions(c)
		if err != nil {
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
		&cli.StringFlag{Name: "uuid", Aliases: []string{"U"}, Usage: "superblock UUID (default: derived from the input as containerd does)"},
		&cli.StringFlag{Name: "build-time", Aliases: []string{"T"}, EnvVars: []string{"SOURCE_DATE_EPOCH"}, Usage: "build time in Unix seconds: recorded in the superblock, and the mtime of implied directories"},
		&cli.StringFlag{Name: "label", Aliases: []string{"L"}, Usage: "volume label (at most 15 bytes)"},
		&cli.StringFlag{Name: "whiteouts", Value: "overlay", Usage: "overlay: turn OCI whiteouts into overlayfs ones; keep: store the tar as it is"},
		&cli.BoolFlag{Name: "no-inline-data", Usage: "store no file tails inline next to their inodes (containerd's -Enoinline_data)"},
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
	m, err := whiteout.ParseMode(c.String("whiteouts"))
	if err != nil {
		return opt, err
	}
	opt.Whiteouts = m
	// Check the block size here so that the error names the flag.
	if err := opt.Erofs.Validate(); err != nil {
		return opt, fmt.Errorf("--block-size/--label: %w", err)
	}
	return opt, nil
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
