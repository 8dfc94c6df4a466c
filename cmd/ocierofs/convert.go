package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"slices"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/urfave/cli/v2"

	"github.com/ocierofs/ocierofs/cmd/internal/options"
	"github.com/ocierofs/ocierofs/convert"
	"github.com/ocierofs/ocierofs/oci"
)

var convertCommand = &cli.Command{
	Name:      "convert",
	Usage:     "pull an image, convert every layer to EROFS, publish it for containerd's EROFS snapshotter",
	ArgsUsage: "SOURCE [TARGET]",
	Description: "SOURCE: a registry reference (alpine, docker.io/library/alpine, host:5000/repo:tag,\n" +
		"repo@sha256:…), oci:DIR[:TAG] or docker-archive:FILE[:TAG] (also gzipped, or\n" +
		"docker-archive:/dev/stdin from docker save IMAGE |).\n" +
		"TARGET: a registry reference or oci:DIR[:TAG]; by default the source repository\n" +
		"with the tag plus --suffix. Layers become application/vnd.erofs.layer.v1; the\n" +
		"config gets os.features [\"erofs\"] and the new diff_ids. Nothing is tagged until\n" +
		"every layer is converted and uploaded.\n\n" +
		"--merge-platform publishes one index holding the source's manifests first, as\n" +
		"they are, and the EROFS manifest of each platform beside them (os.features\n" +
		"[\"erofs\"]), by default under the source's own tag: one reference for nodes with\n" +
		"and without the EROFS snapshotter (nydusify's --merge-platform). docs/convert.md.",
	Flags: slices.Concat([]cli.Flag{
		&cli.BoolFlag{Name: "force", Usage: "convert even where the target holds what this conversion made before (up to date)"},
	}, options.ErofsFlags(), options.SourceFlags(), options.LoginFlags(), options.CredentialFlags(), options.ConvertFlags(),
		options.InCategory("Converted image",
			&cli.BoolFlag{Name: "merge-platform", Aliases: []string{"mixed"}, Usage: "one index of the source's manifests and their EROFS twins, by default under the source's tag"})),
	Action: func(c *cli.Context) error {
		if c.NArg() < 1 || c.NArg() > 2 {
			return fmt.Errorf("convert: want SOURCE [TARGET]")
		}
		ctx, stop := interruptible(c.Context)
		defer stop()
		return runConvert(ctx, c, c.Args().Get(0), c.Args().Get(1))
	},
}

type convertReport struct {
	Source string `json:"source"`
	Target string `json:"target"`
	Digest string `json:"digest"`
	Index  bool   `json:"index"`
	// UpToDate: the target held the image this conversion made before,
	// and nothing was converted (Images is empty).
	UpToDate bool                   `json:"upToDate,omitempty"`
	Images   []*convert.ImageReport `json:"images"`
	Seconds  float64                `json:"seconds"`
}

func runConvert(ctx context.Context, c *cli.Context, source, target string) error {
	start := time.Now()
	opt, rem, done, err := options.Conversion(c)
	if err != nil {
		return err
	}
	defer done()
	merge := c.Bool("merge-platform")
	if merge && target == "" {
		// In place: the source's own tag serves both forms.
		target = source
	}
	src, dst, err := convertRefs(c, source, target)
	if err != nil {
		return err
	}
	srcRem, dstRem, err := options.Credentials(ctx, c, rem, src, &dst)
	if err != nil {
		return err
	}
	if dst.Kind == oci.Registry {
		opt.Publish = pushLayer(ctx, dst, dstRem)
	}
	// A registry's blobs are checked against their digests as they
	// download: an uncompressed layer needs no second hash for its diff_id.
	opt.VerifiedSource = src.Kind == oci.Registry
	art, err := oci.Get(ctx, src, srcRem)
	if err != nil {
		return err
	}
	if why := convert.Converted(art); why != "" {
		return fmt.Errorf("%s is %s: refusing to convert it again", src, why)
	}
	if dst.Kind == oci.Registry {
		// Before the conversion, not after it: a target one cannot push
		// to (no login, Docker Hub's library/) fails at once,
		// before it is asked whether it holds the source.
		if err := dstRem.CheckPush(ctx, dst); err != nil {
			return err
		}
	}
	if merge {
		return runMerge(ctx, c, opt, art, src, dst, dstRem, start)
	}
	record, there, err := targetState(ctx, c, art, dst, dstRem)
	if err != nil {
		return err
	}
	if there != "" {
		return reportConvert(c, convertReport{Source: src.String(), Target: dst.String(), Digest: there,
			Index: art.Index != nil, UpToDate: true, Seconds: time.Since(start).Seconds()}, opt)
	}
	if target == "" && src.Kind == oci.Layout && src.Tag == "" {
		// The layout's one image, named by its tag: the target is
		// that tag plus the suffix.
		if dst, err = oci.DefaultTarget(art.Ref, c.String("suffix")); err != nil {
			return err
		}
	}
	conv, err := convert.NewConverter(opt)
	if err != nil {
		return err
	}
	defer conv.Close()
	if art.Image != nil {
		if err := conv.CheckPlatform(art.Image, art.Descriptor); err != nil {
			return fmt.Errorf("%s: %w", src, err)
		}
	}
	tw, err := conv.WriteTwin(ctx, art, dst, dstRem, convert.TwinHooks{})
	if err != nil {
		return fmt.Errorf("%s: %w", src, err)
	}
	done()
	writeTwinRecord(record, tw.Digest)
	return reportConvert(c, convertReport{Source: src.String(), Target: dst.String(), Index: tw.Index,
		Digest: tw.Digest, Images: tw.Images, Seconds: time.Since(start).Seconds()}, opt)
}

// convertRefs parses convert's source and target (by default the source
// with --suffix), refusing a source that is a twin by its name and a
// target given by digest.
func convertRefs(c *cli.Context, source, target string) (src, dst oci.Ref, err error) {
	plain := c.Bool("plain-http") || c.Bool("insecure") // crane's --insecure allows both
	if src, err = oci.ParseRef(source, plain); err != nil {
		return src, dst, err
	}
	suffix := c.String("suffix")
	if suffix != "" && oci.HasSuffix(src, suffix) {
		return src, dst, fmt.Errorf("%s: %w %q: refusing to convert a converted image", src, oci.ErrLoop, suffix)
	}
	if target != "" {
		dst, err = oci.ParseRef(target, plain)
	} else {
		dst, err = oci.DefaultTarget(src, suffix)
	}
	if err != nil {
		return src, dst, err
	}
	return src, dst, checkTarget(dst)
}

// pushLayer is the ImageOptions.Publish of a registry target: each
// layer's upload, with its progress.
func pushLayer(ctx context.Context, dst oci.Ref, dstRem oci.Remote) func(context.Context, v1.Layer) error {
	repo := dst.Name.Context()
	ropts := slices.Clip(dstRem.Options(ctx)) // appended to by concurrent uploads
	return func(ctx context.Context, l v1.Layer) error {
		updates := make(chan v1.Update, 16)
		go func() { // until WriteLayer closes it
			for u := range updates {
				convert.ReportUpload(ctx, u.Complete, u.Total)
			}
		}()
		if err := remote.WriteLayer(repo, l, append(ropts, remote.WithContext(ctx), remote.WithProgress(updates))...); err != nil {
			return fmt.Errorf("push to %s: %w", repo, err)
		}
		return nil
	}
}

// targetState looks at what the target holds: the very image being
// converted, however spelt (oci:./bb and oci:$PWD/bb:latest,
// repo:tag@digest and repo:tag), or a copy of it, is refused (converting
// would replace it with its twin, and nodes pulling that tag would get
// EROFS layers); the twin this conversion made before is up to date
// (there: its digest; --force converts again). record is the path of
// this conversion's twin record (uptodate.go). A registry that does not
// answer within a minute is left to the push.
func targetState(ctx context.Context, c *cli.Context, art *oci.Artifact, dst oci.Ref, dstRem oci.Remote) (record, there string, err error) {
	if dst.Kind != oci.Registry && dst.Tag == "" {
		return "", "", nil
	}
	lctx, cancel := context.WithTimeout(ctx, time.Minute)
	got, err := oci.Get(lctx, dst, dstRem)
	cancel()
	if err == nil && got.Descriptor.Digest == art.Descriptor.Digest {
		return "", "", fmt.Errorf("target %s holds the source image %s: converting would replace it with its EROFS twin (give another tag)", dst, art.Descriptor.Digest)
	}
	record = twinRecordPath(c, art.Descriptor.Digest.String(), dst.String())
	if d := readTwinRecord(record); err == nil && !c.Bool("force") && d == got.Descriptor.Digest.String() {
		return record, d, nil
	}
	return record, "", nil
}

// reportConvert prints the result: the twin's reference on stdout, for a
// script (crane push prints it so), and what happened on stderr; or the
// report as JSON (--output json).
func reportConvert(c *cli.Context, rep convertReport, opt convert.ImageOptions) error {
	if c.String("output") == "json" {
		enc := json.NewEncoder(c.App.Writer)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	if c.Bool("quiet") {
		return nil
	}
	switch {
	case rep.UpToDate:
		fmt.Fprintf(os.Stderr, "%s: %s is up to date (converted from this source with these options; --force converts again)\n", rep.Source, rep.Target)
	default:
		fmt.Fprintf(os.Stderr, "%s converted to %s in %.2fs\n", rep.Source, rep.Target, rep.Seconds)
		if rep.Index && !opt.NoIndexOSFeatures {
			fmt.Fprintf(os.Stderr, "an index whose entries have os.features [\"erofs\"]: containerd takes them only when asked, "+
				"ctr image pull and ctr run --platform 'linux(+erofs)/%s' (or convert with --no-index-os-features)\n", runtime.GOARCH)
		}
	}
	fmt.Fprintf(c.App.Writer, "%s@%s\n", rep.Target, rep.Digest)
	return nil
}

// checkTarget refuses a target given by digest: the converted image has a
// digest of its own. (A target that is the source, however spelt, holds
// the source image: runConvert refuses it once the source is read.)
func checkTarget(dst oci.Ref) error {
	if _, ok := dst.Name.(name.Digest); ok && dst.Kind == oci.Registry {
		return fmt.Errorf("target %s: give a tag, not a digest (the converted image has a digest of its own)", dst)
	}
	return nil
}

// runMerge converts art and publishes the mixed index of it and its twin
// to dst (convert --merge-platform).
func runMerge(ctx context.Context, c *cli.Context, opt convert.ImageOptions, art *oci.Artifact, src, dst oci.Ref, dstRem oci.Remote, start time.Time) error {
	conv, err := convert.NewConverter(opt)
	if err != nil {
		return err
	}
	defer conv.Close()
	if art.Image != nil {
		if err := conv.CheckPlatform(art.Image, art.Descriptor); err != nil {
			return fmt.Errorf("%s: %w", src, err)
		}
	}
	tw, err := conv.WriteMixed(ctx, art, dst, dstRem)
	if err != nil {
		return fmt.Errorf("%s: %w", src, err)
	}
	return reportConvert(c, convertReport{Source: src.String(), Target: dst.String(), Index: true,
		Digest: tw.Digest, Images: tw.Images, Seconds: time.Since(start).Seconds()}, opt)
}
