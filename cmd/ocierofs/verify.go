package main

import (
	"fmt"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/ocierofs/ocierofs/convert"
	"github.com/ocierofs/ocierofs/convert/fstree"
	"github.com/ocierofs/ocierofs/whiteout"
)

var verifyCommand = &cli.Command{
	Name:      "verify",
	Usage:     "compare an image with the tar (plain, gzip, zstd) or directory it was built from",
	ArgsUsage: "IMAGE SOURCE",
	Description: "Reads both through ocierofs' own reader, without mounting, and prints every\n" +
		"difference: type, mode, owner, size, mtime, content, symlink target, device\n" +
		"number, xattrs and hard links. Exits 1 if there is any.",
	Flags: append([]cli.Flag{
		&cli.StringFlag{Name: "whiteouts", Value: "overlay", Usage: "how the image was built: overlay or keep"},
		&cli.BoolFlag{Name: "quiet", Aliases: []string{"q"}, Usage: "print only differences"},
	}, imageRefFlags()...),
	Action: func(c *cli.Context) error {
		if c.NArg() != 2 {
			return fmt.Errorf("verify: want IMAGE SOURCE")
		}
		mode, err := whiteout.ParseMode(c.String("whiteouts"))
		if err != nil {
			return err
		}
		oi, err := openImageArg(c, c.Args().First())
		if err != nil {
			return err
		}
		defer oi.Close()
		img := oi.img
		got, err := fstree.FromImage(img)
		if err != nil {
			return fmt.Errorf("reading %s: %w", c.Args().First(), err)
		}
		src := c.Args().Get(1)
		var want *fstree.Tree
		// Whiteouts' permission bits mean nothing to overlayfs; images of
		// mkfs.erofs have none, of other builders (and of ocierofs before
		// it dropped them) the .wh. entry's.
		opt := fstree.DiffOptions{IgnoreImpliedMtime: true, IgnoreWhiteoutPerm: true, Want: "source", Got: "image"}
		if fi, err := os.Stat(src); err == nil && fi.IsDir() {
			want, err = fstree.FromDir(src)
			if err != nil {
				return err
			}
			want.MarkWhiteoutDirs() // as mkfs made the image
		} else {
			r, err := os.Open(src)
			if err != nil {
				return err
			}
			defer r.Close()
			rc, _, err := convert.Decompress(r)
			if err != nil {
				return fmt.Errorf("%s: %w", src, err)
			}
			defer rc.Close()
			want, err = fstree.FromTar(rc, fstree.TarOptions{Whiteouts: mode})
			if err != nil {
				return fmt.Errorf("%s: %w", src, err)
			}
		}
		diffs := fstree.Diff(want, got, opt)
		for _, d := range diffs {
			fmt.Fprintln(c.App.Writer, d)
		}
		if len(diffs) > 0 {
			return cli.Exit(fmt.Sprintf("verify: %d differences between %s and %s", len(diffs), c.Args().First(), src), 1)
		}
		if !c.Bool("quiet") {
			// Paths, not entries: the root and implied directories count,
			// and each name of a hard link (mkfs counts entries, inspect
			// inodes).
			fmt.Fprintf(c.App.Writer, "%s matches %s: %d paths\n", c.Args().First(), src, len(want.Paths()))
		}
		return nil
	},
}
