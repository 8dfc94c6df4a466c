// Command ocierofs-image builds the container image of ocierofs from the
// release binaries that `make release` wrote (DIST/PROGRAM-OS-ARCH) and
// writes it where ocierofs writes images: an OCI layout (oci:DIR:TAG) or a
// registry. `make image` and `make image-push` run it; it is release
// tooling, not part of the ocierofs CLI.
//
//	ocierofs-image -dist dist -version v1.2.3 -epoch 1700000000 -o oci:dist/image:v1.2.3
//
// It prints the digest of the index it wrote.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/ocierofs/ocierofs/internal/imagebuild"
	"github.com/ocierofs/ocierofs/oci"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "ocierofs-image:", err)
		os.Exit(1)
	}
}

func run() error {
	dist := flag.String("dist", "dist", "directory of the release binaries, named PROGRAM-OS-ARCH")
	platforms := flag.String("platforms", "linux/amd64,linux/arm64", "platforms of the index, in order")
	programs := flag.String("programs", "ocierofs,ocierofs-mirror", "programs installed in "+imagebuild.BinDir)
	version := flag.String("version", "", "release version (labels and annotations)")
	revision := flag.String("revision", "", "commit of the release (label org.opencontainers.image.revision)")
	source := flag.String("source", "https://github.com/ocierofs/ocierofs", "repository URL (label org.opencontainers.image.source)")
	epoch := flag.String("epoch", os.Getenv("SOURCE_DATE_EPOCH"), "every timestamp of the image, in Unix seconds (default $SOURCE_DATE_EPOCH, else 0)")
	certs := flag.String("ca-certs", imagebuild.CACertsPath, "CA bundle to install (Debian's ca-certificates)")
	out := flag.String("o", "", "where to write: oci:DIR:TAG, or a registry reference")
	plainHTTP := flag.Bool("plain-http", false, "allow a plain HTTP registry")
	flag.Parse()
	if flag.NArg() != 0 {
		return fmt.Errorf("no arguments expected, got %q", flag.Args())
	}
	if *out == "" {
		return fmt.Errorf("-o is required")
	}
	secs := int64(0)
	if *epoch != "" {
		var err error
		if secs, err = strconv.ParseInt(*epoch, 10, 64); err != nil {
			return fmt.Errorf("-epoch %q: %w", *epoch, err)
		}
	}
	opt := imagebuild.Options{Version: *version, Revision: *revision, Source: *source,
		Created: time.Unix(secs, 0), CACerts: *certs}
	for _, p := range strings.Split(*platforms, ",") {
		parts := strings.Split(p, "/")
		if len(parts) < 2 || len(parts) > 3 {
			return fmt.Errorf("-platforms: %q is not OS/ARCH[/VARIANT]", p)
		}
		pl := imagebuild.Platform{OS: parts[0], Architecture: parts[1]}
		if len(parts) == 3 {
			pl.Variant = parts[2]
		}
		for _, prog := range strings.Split(*programs, ",") {
			pl.Programs = append(pl.Programs, imagebuild.Program{Name: prog,
				Path: filepath.Join(*dist, prog+"-"+pl.OS+"-"+pl.Architecture)})
		}
		opt.Platforms = append(opt.Platforms, pl)
	}
	idx, err := imagebuild.Index(opt)
	if err != nil {
		return err
	}
	ref, err := oci.ParseRef(*out, *plainHTTP)
	if err != nil {
		return err
	}
	if ref.Kind == oci.DockerArchive {
		return fmt.Errorf("-o %s: write an OCI layout or to a registry", *out)
	}
	if err := oci.Write(context.Background(), ref, nil, idx, oci.Remote{UserAgent: "ocierofs-image"}); err != nil {
		return err
	}
	d, err := idx.Digest()
	if err != nil {
		return err
	}
	fmt.Printf("%s %s\n", ref, d)
	return nil
}
