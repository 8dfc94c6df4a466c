package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/urfave/cli/v2"

	"github.com/ocierofs/ocierofs/cmd/internal/options"
	"github.com/ocierofs/ocierofs/convert"
	"github.com/ocierofs/ocierofs/convert/check"
	"github.com/ocierofs/ocierofs/convert/spec"
	"github.com/ocierofs/ocierofs/oci"
)

var checkCommand = &cli.Command{
	Name:      "check",
	Usage:     "compare a converted image with its source, layer by layer: trees, diff_ids, config, annotations",
	ArgsUsage: "CONVERTED [SOURCE] | SOURCE | --spec IMAGE",
	Description: "CONVERTED: an image or index convert made (a registry reference or oci:DIR[:TAG]).\n" +
		"SOURCE: what it was made from; by default, in a registry, CONVERTED's repository\n" +
		"at the digest CONVERTED names as its source (its source annotation, or else its\n" +
		"subject). Given a registry image that is no conversion, check takes it for the\n" +
		"source and checks each EROFS image that refers to it (convert --referrer), found\n" +
		"through the registry's referrers API or the sha256-<hex> tag that stands in for\n" +
		"it (OCI distribution spec 1.1); of an index, each image's. Reads both through ocierofs' own\n" +
		"readers (no mount, no root) and prints every difference: each layer's tree\n" +
		"(type, mode, owner, size, mtime, content, symlink target, device number, xattrs,\n" +
		"hard links) against its source layer's as the layers below leave it (a flattened\n" +
		"image: the source's layers stacked), each diff_id against the raw EROFS image,\n" +
		"the config but for what conversion changes, the source annotations and the\n" +
		"platforms of an index. Exits 1 if there is any difference. Layers are read as\n" +
		"overlayfs stacks them: images converted with --whiteouts keep do not match.\n" +
		"--max-layer-size bounds each source layer's tar and the raw image in each +zstd EROFS layer.\n\n" +
		"--spec IMAGE checks an image or index, whoever made it, against the EROFS image\n" +
		"layer specification (application/vnd.erofs[+zstd]) without a source: manifests,\n" +
		"config, index entries, and each layer's bytes (diff_ids, whiteouts, .wh. names).\n" +
		"It prints each violated requirement by its section (\"§5.4: config: …\"), a\n" +
		"SHOULD marked as such, and exits 1 if a MUST is violated: docs/spec.md.",
	Flags: slices.Concat(options.Only(options.SourceFlags(), "username", "password", "plain-http", "insecure", "max-layer-size", "stall-timeout"), options.LoginFlags(), []cli.Flag{
		&cli.StringFlag{Name: "tmpdir", Usage: "where each EROFS layer is copied to be read, one at a time, and a docker-archive from a pipe or compressed (default $TMPDIR)"},
		&cli.BoolFlag{Name: "quiet", Aliases: []string{"q"}, Usage: "print only differences"},
		&cli.BoolFlag{Name: "spec", Usage: "check one image against the EROFS image layer specification, no source"},
	}),
	Action: func(c *cli.Context) error {
		ctx, stop := interruptible(c.Context)
		defer stop()
		if c.Bool("spec") {
			if c.NArg() != 1 {
				return fmt.Errorf("check --spec: want IMAGE")
			}
			return runSpecCheck(ctx, c, c.Args().Get(0))
		}
		if c.NArg() < 1 || c.NArg() > 2 {
			return fmt.Errorf("check: want CONVERTED [SOURCE]")
		}
		return runCheck(ctx, c, c.Args().Get(0), c.Args().Get(1))
	},
}

func runCheck(ctx context.Context, c *cli.Context, converted, source string) error {
	start := time.Now()
	plain := c.Bool("plain-http") || c.Bool("insecure")
	conv, err := oci.ParseRef(converted, plain)
	if err != nil {
		return err
	}
	// Credentials are asked for once (a prompt, stdin): for both images
	// where SOURCE is given, else for CONVERTED's registry, SOURCE's too.
	maxLayer, err := options.MaxLayerSize(c)
	if err != nil {
		return err
	}
	rem := oci.Remote{Insecure: c.Bool("insecure"), StallTimeout: options.StallTimeout(c), ArchiveTempDir: c.String("tmpdir"), MaxArchiveFile: maxLayer}
	var src oci.Ref
	var convRem, srcRem oci.Remote
	if source != "" {
		if src, err = oci.ParseRef(source, plain); err != nil {
			return err
		}
		convRem, srcRem, err = options.Credentials(ctx, c, rem, conv, &src)
	} else {
		convRem, _, err = options.Credentials(ctx, c, rem, conv, nil)
		srcRem = convRem
	}
	if err != nil {
		return err
	}
	art, err := oci.Get(ctx, conv, convRem)
	if err != nil {
		return err
	}
	if source == "" {
		var raw []byte
		if art.Index != nil {
			raw, err = art.Index.RawManifest()
		} else {
			raw, err = art.Image.RawManifest()
		}
		if err != nil {
			return fmt.Errorf("%s: %w", conv, err)
		}
		from := convert.SourceAnnotation(raw)
		if from == "" {
			from = subjectOf(raw)
		}
		switch {
		case from == "" && conv.Kind == oci.Registry:
			// Not a conversion: the source, whose conversions are its
			// referrers.
			return runReferrerCheck(ctx, c, art, convRem, start)
		case from == "":
			return fmt.Errorf("%s names no source (%s, or a subject): give SOURCE", conv, convert.AnnotationSourceManifest)
		case conv.Kind != oci.Registry:
			return fmt.Errorf("%s: give SOURCE (the source %s is looked up by itself in registries only)", conv, from)
		}
		d, err := name.NewDigest(conv.Name.Context().String()+"@"+from, name.WeakValidation)
		if err != nil {
			return fmt.Errorf("%s: its source %q: %w", conv, from, err)
		}
		src = oci.Ref{Kind: oci.Registry, Name: d}
	}
	sart, err := oci.Get(ctx, src, srcRem)
	if err != nil {
		return err
	}
	res, err := check.Converted(ctx, art, sart, check.Options{
		TempDir:      c.String("tmpdir"),
		Report:       func(s string) { fmt.Fprintln(c.App.Writer, s) },
		MaxLayerSize: maxLayer,
	})
	if err != nil {
		return err
	}
	if res.Differences > 0 {
		return cli.Exit(fmt.Sprintf("check: %s between %s and its source %s", count(res.Differences, "difference"), conv, src), 1)
	}
	if !c.Bool("quiet") {
		fmt.Fprintf(c.App.Writer, "%s matches its source %s: %s, %s, %s (%.1f s)\n",
			conv, src, count(res.Images, "image"), count(res.Layers, "layer"), count(res.Paths, "path"), time.Since(start).Seconds())
	}
	return nil
}

// runSpecCheck checks one image or index against the EROFS image layer
// specification.
func runSpecCheck(ctx context.Context, c *cli.Context, image string) error {
	start := time.Now()
	ref, err := oci.ParseRef(image, c.Bool("plain-http") || c.Bool("insecure"))
	if err != nil {
		return err
	}
	maxLayer, err := options.MaxLayerSize(c)
	if err != nil {
		return err
	}
	rem := oci.Remote{Insecure: c.Bool("insecure"), StallTimeout: options.StallTimeout(c), ArchiveTempDir: c.String("tmpdir"), MaxArchiveFile: maxLayer}
	if rem, _, err = options.Credentials(ctx, c, rem, ref, nil); err != nil {
		return err
	}
	art, err := oci.Get(ctx, ref, rem)
	if err != nil {
		return err
	}
	opt := spec.Options{Contents: true, TempDir: c.String("tmpdir"), MaxLayerSize: maxLayer}
	var vs []spec.Violation
	if art.Index != nil {
		vs, err = spec.CheckIndex(ctx, art.Index, opt)
	} else {
		vs, err = spec.CheckImage(ctx, art.Image, opt)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", ref, err)
	}
	for _, v := range vs {
		fmt.Fprintln(c.App.Writer, v)
	}
	if !spec.Conformant(vs) {
		return cli.Exit(fmt.Sprintf("check: %s does not conform to the EROFS image layer specification", ref), 1)
	}
	if !c.Bool("quiet") {
		fmt.Fprintf(c.App.Writer, "%s conforms to the EROFS image layer specification (%s unmet) (%.1f s)\n",
			ref, count(len(vs), "SHOULD"), time.Since(start).Seconds())
	}
	return nil
}

// subjectOf is the digest a manifest's subject names, "" for none.
func subjectOf(rawManifest []byte) string {
	var m struct {
		Subject *v1.Descriptor `json:"subject"`
	}
	if json.Unmarshal(rawManifest, &m) != nil || m.Subject == nil {
		return ""
	}
	return m.Subject.Digest.String()
}

// runReferrerCheck checks each EROFS image that refers to the source src
// (or, for an index, to one of its images) against what it refers to.
func runReferrerCheck(ctx context.Context, c *cli.Context, src *oci.Artifact, rem oci.Remote, start time.Time) error {
	type pair struct {
		conv, src *oci.Artifact
	}
	var pairs []pair
	repo := src.Ref.Name.Context()
	// lookup adds the EROFS referrers of the image img of descriptor d.
	lookup := func(img v1.Image, d v1.Descriptor) error {
		refs, err := oci.ErofsReferrers(ctx, repo, d.Digest, rem)
		if err != nil {
			return fmt.Errorf("%s: the referrers of %s: %w", src.Ref, d.Digest, err)
		}
		for _, r := range refs {
			pairs = append(pairs, pair{
				conv: &oci.Artifact{Ref: oci.Ref{Kind: oci.Registry, Name: repo.Digest(r.Digest.String())}, Descriptor: r.Descriptor, Image: r.Image},
				src:  &oci.Artifact{Ref: oci.Ref{Kind: oci.Registry, Name: repo.Digest(d.Digest.String())}, Descriptor: d, Image: img},
			})
		}
		return nil
	}
	if src.Index != nil {
		im, err := src.Index.IndexManifest()
		if err != nil {
			return fmt.Errorf("%s: %w", src.Ref, err)
		}
		for _, d := range im.Manifests {
			if !d.MediaType.IsImage() {
				continue
			}
			img, err := src.Index.Image(d.Digest)
			if err != nil {
				return fmt.Errorf("%s: %s: %w", src.Ref, d.Digest, err)
			}
			if err := lookup(img, d); err != nil {
				return err
			}
		}
	} else if err := lookup(src.Image, src.Descriptor); err != nil {
		return err
	}
	if len(pairs) == 0 {
		return fmt.Errorf("%s names no source and no EROFS image refers to it (convert --referrer): give SOURCE, or check a conversion", src.Ref)
	}
	maxLayer, err := options.MaxLayerSize(c)
	if err != nil {
		return err
	}
	diffs := 0
	for _, p := range pairs {
		res, err := check.Converted(ctx, p.conv, p.src, check.Options{
			TempDir:      c.String("tmpdir"),
			Report:       func(s string) { fmt.Fprintln(c.App.Writer, s) },
			MaxLayerSize: maxLayer,
		})
		if err != nil {
			return err
		}
		diffs += res.Differences
		if res.Differences == 0 && !c.Bool("quiet") {
			fmt.Fprintf(c.App.Writer, "%s, which refers to %s, matches it: %s, %s\n",
				p.conv.Ref, p.src.Ref, count(res.Layers, "layer"), count(res.Paths, "path"))
		}
	}
	if diffs > 0 {
		return cli.Exit(fmt.Sprintf("check: %s between %s and the EROFS images that refer to it", count(diffs, "difference"), src.Ref), 1)
	}
	if !c.Bool("quiet") {
		fmt.Fprintf(c.App.Writer, "%s matches the EROFS images that refer to it: %s (%.1f s)\n", src.Ref, count(len(pairs), "image"), time.Since(start).Seconds())
	}
	return nil
}
