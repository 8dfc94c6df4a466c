package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/urfave/cli/v2"

	"github.com/ocierofs/ocierofs/cmd/internal/options"
	"github.com/ocierofs/ocierofs/convert"
	"github.com/ocierofs/ocierofs/erofs"
	"github.com/ocierofs/ocierofs/oci"
)

// imageRefFlags let inspect, ls, cat, extract and verify read a layer of
// an image in a registry or an OCI layout, not only an image file.
func imageRefFlags() []cli.Flag {
	return options.InCategory("Image reference",
		&cli.StringFlag{Name: "layer", Usage: "the layer of an IMAGE given as a reference: its index from 0 (bottom), digest or diff_id (default: the only one)"},
		&cli.StringFlag{Name: "platform", DefaultText: options.HostPlatform(), Usage: "the image of an index to read a layer of"},
		&cli.BoolFlag{Name: "plain-http", Usage: "allow a plain HTTP registry"},
		&cli.BoolFlag{Name: "insecure", Usage: "skip TLS verification, and allow plain HTTP"},
	)
}

// openedImage is an image opened from a file or fetched from a layer.
type openedImage struct {
	img  *erofs.Image
	path string // the local file: arg itself, or the fetched layer
	size int64
	io.Closer
}

// openImageArg opens arg: an image file, or, where no such file exists
// and arg is a reference (oci:DIR[:TAG], docker-archive:FILE, or
// HOST/REPO…), the EROFS layer that --layer names, fetched into a
// temporary file (decompressed if +zstd).
func openImageArg(c *cli.Context, arg string) (*openedImage, error) {
	if fi, err := os.Stat(arg); err == nil || !isReference(arg) {
		img, cl, err := openImage(arg)
		if err != nil {
			return nil, err
		}
		return &openedImage{img: img, path: arg, size: fi.Size(), Closer: cl}, nil
	}
	path, err := fetchLayer(c.Context, c, arg)
	if err != nil {
		return nil, err
	}
	img, cl, err := openImage(path)
	if err != nil {
		os.Remove(path)
		return nil, fmt.Errorf("%s: %w", arg, err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		cl.Close()
		return nil, err
	}
	return &openedImage{img: img, path: path, size: fi.Size(), Closer: removeOnClose{cl, path}}, nil
}

// isReference tells an image reference from a file name: a layout or an
// archive by its prefix, a registry reference by the host before its
// first slash (a dot, a colon or localhost), so that a mistyped file
// name is not looked up on Docker Hub.
func isReference(s string) bool {
	if strings.HasPrefix(s, "oci:") || strings.HasPrefix(s, "docker-archive:") {
		return true
	}
	host, _, ok := strings.Cut(s, "/")
	return ok && (strings.ContainsAny(host, ".:") || host == "localhost")
}

type removeOnClose struct {
	io.Closer
	path string
}

func (r removeOnClose) Close() error {
	err := r.Closer.Close()
	os.Remove(r.path)
	return err
}

// fetchLayer copies the EROFS layer of ref that --layer names into a
// temporary file and returns its name.
func fetchLayer(ctx context.Context, c *cli.Context, ref string) (string, error) {
	r, err := oci.ParseRef(ref, c.Bool("plain-http") || c.Bool("insecure"))
	if err != nil {
		return "", err
	}
	art, err := oci.Get(ctx, r, oci.Remote{Insecure: c.Bool("insecure")})
	if err != nil {
		return "", err
	}
	img := art.Image
	if art.Index != nil {
		if img, err = platformImage(art, c.String("platform")); err != nil {
			return "", err
		}
	}
	l, which, err := selectLayer(img, c.String("layer"))
	if err != nil {
		return "", fmt.Errorf("%s: %w", ref, err)
	}
	mt, err := l.MediaType()
	if err != nil {
		return "", err
	}
	if !convert.IsEROFS(mt) {
		return "", fmt.Errorf("%s: layer %s is %s, not EROFS (convert the image first)", ref, which, mt)
	}
	rc, err := l.Compressed()
	if err != nil {
		return "", fmt.Errorf("%s: layer %s: %w", ref, which, err)
	}
	defer rc.Close()
	var src io.Reader = rc
	if strings.HasSuffix(string(mt), "+zstd") {
		zr, err := oci.Decompressor("zstd", rc)
		if err != nil {
			return "", err
		}
		defer zr.Close()
		src = zr
	}
	f, err := os.CreateTemp("", "ocierofs-layer-*.erofs")
	if err != nil {
		return "", err
	}
	if _, err = io.Copy(f, src); err == nil {
		err = f.Close()
	}
	if err != nil {
		f.Close()
		os.Remove(f.Name())
		return "", fmt.Errorf("%s: layer %s: %w", ref, which, err)
	}
	return f.Name(), nil
}

// platformImage is the image of art's index for platform (default: this
// machine's).
func platformImage(art *oci.Artifact, platform string) (v1.Image, error) {
	if platform == "" {
		platform = options.HostPlatform()
	}
	want, err := options.ParsePlatform(platform)
	if err != nil {
		return nil, fmt.Errorf("--platform %q: %w", platform, err)
	}
	im, err := art.Index.IndexManifest()
	if err != nil {
		return nil, err
	}
	for _, d := range im.Manifests {
		if p := d.Platform; p != nil && p.OS == want.OS && p.Architecture == want.Architecture && (want.Variant == "" || p.Variant == want.Variant) {
			return art.Index.Image(d.Digest)
		}
	}
	return nil, fmt.Errorf("%s: no image for %s in the index (give --platform)", art.Ref, platform)
}

// selectLayer is the layer of img that sel names: an index from 0, a
// digest or a diff_id; "" for the only layer.
func selectLayer(img v1.Image, sel string) (v1.Layer, string, error) {
	layers, err := img.Layers()
	if err != nil {
		return nil, "", err
	}
	if sel == "" {
		if len(layers) != 1 {
			return nil, "", fmt.Errorf("the image has %s: give --layer (an index from 0, a digest or a diff_id)", count(len(layers), "layer"))
		}
		sel = "0"
	}
	if i, err := strconv.Atoi(sel); err == nil {
		if i < 0 || i >= len(layers) {
			return nil, "", fmt.Errorf("--layer %d: the image has %s", i, count(len(layers), "layer"))
		}
		return layers[i], sel, nil
	}
	for _, l := range layers {
		d, _ := l.Digest()
		id, _ := l.DiffID()
		if d.String() == sel || id.String() == sel {
			return l, sel, nil
		}
	}
	return nil, "", fmt.Errorf("--layer %s: no layer of the image has that digest or diff_id", sel)
}
