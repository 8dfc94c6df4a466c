package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/ocierofs/ocierofs/cmd/internal/options"
	"github.com/ocierofs/ocierofs/convert"
	"github.com/ocierofs/ocierofs/convert/cache"
	"github.com/ocierofs/ocierofs/oci"
)

var cacheCommand = &cli.Command{
	Name:      "cache",
	Usage:     "prepare a node: convert an image's layers into containerd's layer content cache",
	ArgsUsage: "SOURCE DIR",
	Description: "Writes DIR/sha256/<xx>/<diffID>.erofs for every tar layer of SOURCE (the\n" +
		"platforms of an index --platform selects: by default this node's, as containerd\n" +
		"pulls), each made of its layer alone, as containerd's differ makes it (with\n" +
		"--over-lower, the bytes convert publishes). Point\n" +
		"containerd's EROFS snapshotter at DIR (layer_content_caches) and it unpacks the\n" +
		"original tar image without running mkfs.erofs. Layers already in DIR are not\n" +
		"converted again; entries appear atomically. With --dmverity each entry also has\n" +
		"a dm-verity hash tree after the image and a sidecar, <entry>.dmverity, with its\n" +
		"root hash, which containerd's snapshotter opens it with (dmverity_mode): only for\n" +
		"nodes whose kernel has dm-verity: containerd fails to mount an entry with a\n" +
		"sidecar where the kernel has none.",
	Flags: slices.Concat(options.ErofsFlags(), options.CacheFlags(options.SourceFlags()), options.LoginFlags(), []cli.Flag{
		&cli.BoolFlag{Name: "dmverity", Usage: "append a dm-verity hash tree to each entry and write its .dmverity sidecar, for containerd's dmverity_mode (entries without one are made again)"},
		&cli.BoolFlag{Name: "over-lower", Usage: "make each entry over this image's layers below it, so that the directories a layer implies keep their owner and mode as docker applies the layers " +
			"(by default an entry is made of its layer alone, as containerd's differ does: it serves every image with that layer, and one image must not set another's directories; " +
			"only for a cache of images trusted alike)"},
	}),
	Action: func(c *cli.Context) error {
		if c.NArg() != 2 {
			return fmt.Errorf("cache: want SOURCE DIR")
		}
		ctx, stop := interruptible(c.Context)
		defer stop()
		return runCache(ctx, c, c.Args().Get(0), c.Args().Get(1))
	},
}

type cacheReport struct {
	Source  string        `json:"source"`
	Dir     string        `json:"dir"`
	Layers  []cache.Layer `json:"layers"`
	Seconds float64       `json:"seconds"`
}

func runCache(ctx context.Context, c *cli.Context, source, dir string) (err error) {
	start := time.Now()
	_, serr := os.Lstat(dir)
	made := errors.Is(serr, fs.ErrNotExist)
	opt, rem, done, err := options.Image(c)
	if err != nil {
		return err
	}
	defer done()
	src, err := oci.ParseRef(source, c.Bool("plain-http") || c.Bool("insecure"))
	if err != nil {
		return err
	}
	if rem, _, err = options.Credentials(ctx, c, rem, src, nil); err != nil {
		return err
	}
	// One run at a time per directory (the next finds the entries made);
	// an unwritable directory fails here, before any conversion.
	unlock, err := cache.Lock(ctx, dir, func() {
		if !c.Bool("quiet") {
			fmt.Fprintf(os.Stderr, "waiting for another ocierofs cache run on %s\n", dir)
		}
	})
	if err != nil {
		return err
	}
	defer func() {
		// A DIR this run made and filled with nothing goes again on an
		// error, as a layout that convert made does: its lock file
		// while held (a run waiting for it then starts over), the
		// directory after (only if empty: placed entries stay).
		failed := err != nil && made
		if failed {
			os.Remove(filepath.Join(dir, cache.LockName))
		}
		unlock()
		if failed {
			os.Remove(dir)
		}
	}()
	if opt.TempDir == "" {
		// Converted layers wait in the cache directory, on its
		// filesystem, and are linked into place, not copied.
		opt.TempDir = dir
	}
	art, err := oci.Get(ctx, src, rem)
	if err != nil {
		return err
	}
	if why := convert.Converted(art); why != "" {
		return fmt.Errorf("%s is %s: cache wants the tar image it was converted from (containerd looks entries up by the diffIDs of its tar layers)", src, why)
	}
	lc, err := cache.New(dir, cache.Options{Convert: opt, DMVerity: c.Bool("dmverity"), OverLower: c.Bool("over-lower")})
	if err != nil {
		return err
	}
	defer lc.Close()
	rep := cacheReport{Source: src.String(), Dir: dir}
	if art.Index != nil {
		rep.Layers, err = lc.Index(ctx, art.Index, art.Descriptor)
	} else if err = lc.CheckPlatform(art.Image, art.Descriptor); err == nil {
		rep.Layers, err = lc.Image(ctx, art.Image, art.Descriptor)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", src, err)
	}
	done()
	rep.Seconds = time.Since(start).Seconds()
	if c.String("output") == "json" {
		enc := json.NewEncoder(c.App.Writer)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	if !c.Bool("quiet") {
		var made, had, skipped int
		for _, l := range rep.Layers {
			switch {
			case l.Cached:
				had++
			case l.Skipped != "":
				skipped++
			default:
				made++
			}
			for _, w := range l.Warnings {
				fmt.Fprintf(os.Stderr, "warning: layer %s: %s\n", l.Source, w)
			}
		}
		sk := ""
		if skipped > 0 {
			sk = fmt.Sprintf(", %d skipped (not tar layers)", skipped)
		}
		fmt.Fprintf(os.Stderr, "%s: %s converted into %s, %d were there%s, in %.2fs\n", rep.Source, count(made, "layer"), dir, had, sk, rep.Seconds)
	}
	return nil
}
