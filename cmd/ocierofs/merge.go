package main

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/ocierofs/ocierofs/cmd/internal/options"
	"github.com/ocierofs/ocierofs/convert/merge"
)

var mergeCommand = &cli.Command{
	Name:      "merge",
	Usage:     "stack EROFS layer images (bottom first) into one image of the result, referring to their data in place",
	ArgsUsage: "OUTPUT LAYER...",
	Description: "The layers' trees are stacked as overlayfs stacks them (whiteouts delete, opaque\n" +
		"directories hide what is below) into one image with no overlay markers left. By\n" +
		"default it holds metadata only: file data stays in the layer images and their\n" +
		"blobs, which become its extra devices — mount it with one -o device= per\n" +
		"device, in the order printed, each on a loop device (mount(8) puts the image on\n" +
		"one, and the kernel then takes block devices only); it prints the command.\n" +
		"Inline tails and compressed files are copied in\n" +
		"(build layers with --no-inline-data or --blobdev to avoid that). With --blobdev\n" +
		"all data is copied into one new blob instead, each distinct chunk once.",
	Flags: []cli.Flag{
		&cli.StringFlag{Name: "blobdev", Usage: "copy all file data into this new blob, chunk-deduplicated: the layers are not needed to mount"},
		&cli.StringFlag{Name: "chunk-size", Usage: "chunk size of copied data (default: the block size)"},
		&cli.StringFlag{Name: "label", Aliases: []string{"L"}, Usage: "volume label (at most 15 bytes)"},
		&cli.BoolFlag{Name: "quiet", Aliases: []string{"q"}, Usage: "print nothing but errors"},
	},
	Action: func(c *cli.Context) error {
		if c.NArg() < 2 {
			return fmt.Errorf("merge: want OUTPUT and at least one LAYER, got %s", count(c.NArg(), "argument"))
		}
		var opt merge.Options
		opt.Blob = c.String("blobdev")
		opt.Erofs.VolumeName = c.String("label")
		if s := c.String("chunk-size"); s != "" {
			n, err := options.ParseSize(s)
			if err != nil {
				return fmt.Errorf("--chunk-size: %w", err)
			}
			opt.Erofs.ChunkSize = n
		}
		start := time.Now()
		out := c.Args().Get(0)
		res, err := merge.Images(out, c.Args().Slice()[1:], opt)
		if err != nil {
			return err
		}
		if !c.Bool("quiet") {
			fmt.Fprintf(os.Stderr, "%s: %d entries, %d bytes of file data copied, %s\n", out, res.Entries, res.CopiedBytes, time.Since(start).Round(time.Millisecond))
			if len(res.Devices) > 0 {
				fmt.Fprintf(os.Stderr, "devices (mount -o device=… in this order): %s\n", strings.Join(res.Devices, " "))
				fmt.Fprintf(os.Stderr, "mount it with: %s\n", mountCommand(out, res.Devices))
			}
		}
		return nil
	},
}

// mountCommand is a shell command that mounts a merged image with its
// devices: each on a read-only loop device, as the kernel wants them once
// mount(8) has put the image itself on one.
func mountCommand(image string, devices []string) string {
	var opts []string
	for _, d := range devices {
		opts = append(opts, "device=$(losetup -f --show -r "+shellQuote(d)+")")
	}
	return "mount -t erofs -o ro," + strings.Join(opts, ",") + " " + shellQuote(image) + " DIR"
}

// shellQuote quotes s for a POSIX shell when it needs it.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/._-+:=@") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
