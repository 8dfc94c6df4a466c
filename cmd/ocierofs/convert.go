package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/urfave/cli/v2"

	"github.com/ocierofs/ocierofs/convert"
	"github.com/ocierofs/ocierofs/oci"
)

var convertCommand = &cli.Command{
	Name:      "convert",
	Usage:     "pull an image, convert every layer to EROFS, publish it for containerd's EROFS snapshotter",
	ArgsUsage: "SOURCE [TARGET]",
	Description: "SOURCE: a registry reference (alpine, docker.io/library/alpine, host:5000/repo:tag,\n" +
		"repo@sha256:…), oci:DIR[:TAG] or docker-archive:FILE[:TAG].\n" +
		"TARGET: a registry reference or oci:DIR[:TAG]; by default the source repository\n" +
		"with the tag plus --suffix. Layers become application/vnd.erofs.layer.v1; the\n" +
		"config gets os.features [\"erofs\"] and the new diff_ids. Nothing is tagged until\n" +
		"every layer is converted and uploaded.",
	Flags: slices.Concat(erofsFlags(), sourceFlags(), convertFlags()),
	Action: func(c *cli.Context) error {
		if c.NArg() < 1 || c.NArg() > 2 {
			return fmt.Errorf("convert: want SOURCE [TARGET]")
		}
		ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
		defer stop()
		return runConvert(ctx, c, c.Args().Get(0), c.Args().Get(1))
	},
}

// convertFlags are the flags of convert only.
func convertFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "suffix", Value: "-erofs", Usage: "tag suffix of the default target; a source whose tag has it is refused"},
		&cli.StringFlag{Name: "layer-compression", Value: "none", Usage: "none, or zstd to wrap each EROFS layer in zstd (…layer.v1+zstd)"},
		&cli.StringFlag{Name: "media-type", Value: "containerd", Usage: "containerd (application/vnd.erofs.layer.v1) or spec (the draft EROFS image spec's application/vnd.erofs)"},
		&cli.BoolFlag{Name: "flatten", Usage: "one EROFS layer holding the merged filesystem of all layers"},
		&cli.BoolFlag{Name: "no-index-os-features", Usage: "leave platform.os.features out of index entries"},
		&cli.BoolFlag{Name: "referrer", Usage: "set each converted manifest's subject to its source manifest"},
	}
}

// sourceFlags are the flags of every command that reads images.
func sourceFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "platform", Usage: "platforms of an index to convert: all, or a list like linux/amd64,linux/arm64/v8", Value: "all"},
		&cli.IntFlag{Name: "jobs", Aliases: []string{"j"}, Value: runtime.NumCPU(), Usage: "layers converted at once"},
		&cli.StringFlag{Name: "username", EnvVars: []string{"OCIEROFS_USERNAME"}, Usage: "registry user (default: docker's config.json and credential helpers)"},
		&cli.StringFlag{Name: "password", EnvVars: []string{"OCIEROFS_PASSWORD"}, Usage: "registry password"},
		&cli.BoolFlag{Name: "plain-http", Usage: "allow plain HTTP registries"},
		&cli.BoolFlag{Name: "insecure", Usage: "skip TLS verification"},
		&cli.StringFlag{Name: "output", Aliases: []string{"o"}, Value: "text", Usage: "text or json (target, digests, sizes, per-layer timings on stdout)"},
		&cli.StringFlag{Name: "tmpdir", Usage: "where converted layers wait to be published (default $TMPDIR)"},
	}
}

// imageOptions reads the flags shared by convert and cache; done ends the
// progress display.
func imageOptions(c *cli.Context) (opt convert.ImageOptions, rem oci.Remote, done func(), err error) {
	done = func() {}
	rem = oci.Remote{Username: c.String("username"), Password: c.String("password"), Insecure: c.Bool("insecure")}
	lopt, err := layerOptions(c)
	if err != nil {
		return opt, rem, done, err
	}
	opt = convert.ImageOptions{Layer: lopt, Jobs: c.Int("jobs"), TempDir: c.String("tmpdir")}
	if p := c.String("platform"); p != "all" && p != "" {
		for _, s := range strings.Split(p, ",") {
			pl, err := v1.ParsePlatform(strings.TrimSpace(s))
			if err != nil {
				return opt, rem, done, fmt.Errorf("--platform %q: %w", s, err)
			}
			opt.Platforms = append(opt.Platforms, *pl)
		}
	}
	if o := c.String("output"); o != "json" && o != "text" {
		return opt, rem, done, fmt.Errorf("--output %q: want text or json", o)
	}
	switch {
	case c.Bool("quiet"):
	case isTerminal(os.Stderr):
		// A display per layer instead of log lines.
		v := newProgressView(os.Stderr)
		opt.Progress = v.update
		done = v.close
	default:
		opt.Log = func(s string) { fmt.Fprintf(os.Stderr, "%s %s\n", time.Now().Format("15:04:05"), s) }
	}
	return opt, rem, done, nil
}

// conversionOptions reads every flag of convert that shapes the converted
// image (imageOptions and convertFlags); serve and sync share it.
func conversionOptions(c *cli.Context) (opt convert.ImageOptions, rem oci.Remote, done func(), err error) {
	opt, rem, done, err = imageOptions(c)
	if err != nil {
		return opt, rem, done, err
	}
	opt.NoIndexOSFeatures = c.Bool("no-index-os-features")
	opt.Referrer = c.Bool("referrer")
	opt.Flatten = c.Bool("flatten")
	switch c.String("layer-compression") {
	case "none", "":
	case "zstd":
		opt.LayerZstd = true
	default:
		return opt, rem, done, fmt.Errorf("--layer-compression %q: want none or zstd", c.String("layer-compression"))
	}
	switch c.String("media-type") {
	case "containerd", "":
	case "spec":
		opt.SpecMediaTypes = true
	default:
		return opt, rem, done, fmt.Errorf("--media-type %q: want containerd or spec", c.String("media-type"))
	}
	return opt, rem, done, nil
}

type convertReport struct {
	Source  string                 `json:"source"`
	Target  string                 `json:"target"`
	Digest  string                 `json:"digest"`
	Index   bool                   `json:"index"`
	Images  []*convert.ImageReport `json:"images"`
	Seconds float64                `json:"seconds"`
}

func runConvert(ctx context.Context, c *cli.Context, source, target string) error {
	start := time.Now()
	opt, rem, done, err := conversionOptions(c)
	if err != nil {
		return err
	}
	defer done()
	plain := c.Bool("plain-http")
	src, err := oci.ParseRef(source, plain)
	if err != nil {
		return err
	}
	suffix := c.String("suffix")
	if suffix != "" && oci.HasSuffix(src, suffix) {
		return fmt.Errorf("%s: %w %q: refusing to convert a converted image", src, oci.ErrLoop, suffix)
	}
	var dst oci.Ref
	if target != "" {
		if dst, err = oci.ParseRef(target, plain); err != nil {
			return err
		}
	} else if dst, err = oci.DefaultTarget(src, suffix); err != nil {
		return err
	}
	quiet := c.Bool("quiet")
	jsonOut := c.String("output") == "json"
	if dst.Kind == oci.Registry {
		repo := dst.Name.Context()
		ropts := slices.Clip(rem.Options(ctx)) // appended to by concurrent uploads
		opt.Publish = func(ctx context.Context, l v1.Layer) error {
			return remote.WriteLayer(repo, l, append(ropts, remote.WithContext(ctx))...)
		}
	}

	art, err := oci.Get(ctx, src, rem)
	if err != nil {
		return err
	}
	conv, err := convert.NewConverter(opt)
	if err != nil {
		return err
	}
	defer conv.Close()
	rep := convertReport{Source: src.String(), Target: dst.String(), Index: art.Index != nil}
	if art.Index != nil {
		idx, irep, err := conv.Index(ctx, art.Index, art.Descriptor)
		if err != nil {
			return fmt.Errorf("%s: %w", src, err)
		}
		if err := oci.Write(ctx, dst, nil, idx, rem); err != nil {
			return err
		}
		rep.Digest, rep.Images = irep.Digest, irep.Images
	} else {
		img, irep, err := conv.Image(ctx, art.Image, art.Descriptor)
		if err != nil {
			return fmt.Errorf("%s: %w", src, err)
		}
		if err := oci.Write(ctx, dst, img, nil, rem); err != nil {
			return err
		}
		rep.Digest, rep.Images = irep.Digest, []*convert.ImageReport{irep}
	}
	done()
	rep.Seconds = time.Since(start).Seconds()
	if jsonOut {
		enc := json.NewEncoder(c.App.Writer)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	if !quiet {
		fmt.Fprintf(os.Stderr, "%s converted to %s@%s in %.2fs\n", rep.Source, rep.Target, rep.Digest, rep.Seconds)
	}
	return nil
}
