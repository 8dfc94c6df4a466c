// Package options holds the command-line flags that the ocierofs programs
// share (image layout, sources, conversion) and turns them into the
// options of package convert, so that ocierofs and ocierofs-mirror read
// them alike.
package options

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/urfave/cli/v2"

	"github.com/ocierofs/ocierofs/cmd/internal/progress"
	"github.com/ocierofs/ocierofs/convert"
	"github.com/ocierofs/ocierofs/erofs"
	"github.com/ocierofs/ocierofs/erofs/compress/lz4"
	"github.com/ocierofs/ocierofs/oci"
	"github.com/ocierofs/ocierofs/whiteout"
)

// ConvertFlags are the flags that shape a converted image beyond its
// layers: convert's, and the mirror's (serve, sync).
func ConvertFlags() []cli.Flag {
	return InCategory("Converted image",
		&cli.StringFlag{Name: "suffix", Value: "-erofs", Usage: "tag suffix of the default target; a source whose tag has it is refused"},
		&cli.StringFlag{Name: "layer-compression", Value: "none", Usage: "none, or zstd to wrap each EROFS layer in zstd (…layer.v1+zstd)"},
		&cli.StringFlag{Name: "media-type", Value: "containerd", Usage: "containerd (application/vnd.erofs.layer.v1) or spec (the draft EROFS image spec's application/vnd.erofs)"},
		&cli.BoolFlag{Name: "flatten", Usage: "one EROFS layer holding the merged filesystem of all layers"},
		&cli.StringFlag{Name: "layout", Value: "overlay", Usage: "with --media-type spec: overlay (each layer an overlayfs lower layer), device (each layer a device, org.erofs.role device, under one metadata layer that stacks them by EROFS multi-device addressing: mount it with device= each layer in order) or overlay-data (the layers stacked into an org.erofs.role overlay-data layer of the files' contents, each once, under one metadata layer of overlayfs metacopy files redirected to them: mount overlayfs with lowerdir=META::DATA, metacopy=on)"},
		&cli.BoolFlag{Name: "no-index-os-features", Usage: "leave platform.os.features out of index entries"},
		&cli.BoolFlag{Name: "referrer", Usage: "set each converted manifest's subject to its source manifest"},
		&cli.StringFlag{Name: "chunk-index", Value: "none", Usage: "with --media-type spec: none, embedded (after each layer's image, a skippable frame in +zstd layers) or standalone (a layer after each but the top one, which the spec keeps last): the spec's chunk index, for reads by range"},
		&cli.StringFlag{Name: "chunk-index-size", Value: "512K", Usage: "the chunk index's chunk: a power of two from 4K to 64M"},
		&cli.StringFlag{Name: "prefetch-list", Usage: "lay out the files `FILE` names (one path a line, as mount --record writes it) last in each layer's data, in its order, next to the metadata, so that a lazy mount fetches them first and in few requests; paths a layer lacks are skipped"},
		&cli.BoolFlag{Name: "dmverity", Usage: "with --media-type spec: append a dm-verity tree to each layer's image, annotated (org.erofs.dmverity.*), as the spec lays it out (cache --dmverity writes containerd's sidecar instead)"},
	)
}

// HostPlatform is the platform this program runs on, as --platform takes
// it: what containerd pulls on this node by default.
func HostPlatform() string { return runtime.GOOS + "/" + runtime.GOARCH }

// CacheFlags adapts flags (SourceFlags) to cache, which prepares this
// node: --platform defaults to HostPlatform, and --output and --tmpdir say
// what they are there.
func CacheFlags(flags []cli.Flag) []cli.Flag {
	out := slices.Clone(flags)
	for i, f := range out {
		sf, ok := f.(*cli.StringFlag)
		if !ok {
			continue
		}
		c := *sf
		switch sf.Name {
		case "platform":
			c.Value = HostPlatform()
			c.Usage = "platforms of an index to take: this node's (as containerd pulls), all, or a list like linux/amd64,linux/arm64/v8"
		case "output":
			c.Usage = "text or json (each layer's entry, size, dm-verity root hash, seconds on stdout)"
		case "tmpdir":
			c.Usage = "where layers are converted before they are linked into DIR (default: DIR itself, where linking copies nothing)"
		default:
			continue
		}
		out[i] = &c
	}
	return out
}

// SourceFlags are the flags of every command that reads images.
func SourceFlags() []cli.Flag {
	return InCategory("Source and registry",
		&cli.StringFlag{Name: "platform", Usage: "platforms of an index to convert: all, or a list like linux/amd64,linux/arm64/v8", Value: "all"},
		&cli.IntFlag{Name: "jobs", Aliases: []string{"j"}, Value: runtime.NumCPU(), Usage: "layers converted at once"},
		&cli.StringFlag{Name: "username", EnvVars: []string{"OCIEROFS_USERNAME"}, Usage: "user for the one registry the command reads and writes (default: docker's config.json and credential helpers, or podman's auth.json)"},
		&cli.StringFlag{Name: "password", EnvVars: []string{"OCIEROFS_PASSWORD"}, Usage: "password for the registry (with --username; asked for on a terminal when not given)"},
		&cli.BoolFlag{Name: "plain-http", Usage: "allow plain HTTP registries"},
		&cli.BoolFlag{Name: "insecure", Usage: "skip TLS verification, and allow plain HTTP (as crane's --insecure)"},
		&cli.StringFlag{Name: "output", Aliases: []string{"o"}, Value: "text", Usage: "text or json (target, digests, sizes, per-layer timings on stdout)"},
		&cli.StringFlag{Name: "tmpdir", Usage: "where converted layers wait to be published, and a docker-archive from a pipe or compressed is copied (default $TMPDIR)"},
		&cli.StringFlag{Name: "max-layer-size", DefaultText: "none", Usage: "fail a layer whose uncompressed tar is larger than this size (K, M, G, T): a bound on the disk a small compressed layer can fill"},
		&cli.DurationFlag{Name: "stall-timeout", Value: oci.DefaultStallTimeout, Usage: "fail a registry download or upload that moves no bytes for this long; it is then retried"},
	)
}

// StallTimeout is --stall-timeout, as oci.Remote takes it (0 is never).
func StallTimeout(c *cli.Context) time.Duration {
	if d := c.Duration("stall-timeout"); d > 0 {
		return d
	}
	return -1
}

// Only is the flags of flags with the names given, in that order.
func Only(flags []cli.Flag, names ...string) []cli.Flag {
	var out []cli.Flag
	for _, n := range names {
		for _, f := range flags {
			if slices.Contains(f.Names(), n) {
				out = append(out, f)
			}
		}
	}
	return out
}

// LoginFlags are convert's and cache's ways to log in besides --username:
// docker login's --password-stdin and skopeo's --authfile.
func LoginFlags() []cli.Flag {
	return InCategory("Registry login",
		&cli.BoolFlag{Name: "password-stdin", Usage: "read --username's password from stdin (as docker login does)"},
		&cli.StringFlag{Name: "authfile", EnvVars: []string{"REGISTRY_AUTH_FILE"}, Usage: "the logins to use, a docker config.json or podman auth.json (as skopeo's --authfile), instead of docker's and podman's own"},
	)
}

// CredentialFlags are convert's flags for a source and a target with
// credentials of their own (skopeo's names).
func CredentialFlags() []cli.Flag {
	return InCategory("Registry login",
		&cli.StringFlag{Name: "src-creds", EnvVars: []string{"OCIEROFS_SRC_CREDS"}, Usage: "USER:PASSWORD for reading SOURCE from its registry (the environment variable keeps it out of ps; USER alone: asked for the password on a terminal)"},
		&cli.StringFlag{Name: "dest-creds", EnvVars: []string{"OCIEROFS_DEST_CREDS"}, Usage: "USER:PASSWORD for writing TARGET to its registry (USER alone: asked for the password on a terminal)"},
	)
}

// Credentials returns the registry access for reading src and for writing
// dst (nil: the command writes to no registry): rem with the credentials
// the flags give. --username and --password are for the one registry the
// command talks to; they are refused where src and dst are on two, so that
// no registry is sent another's password. --src-creds and --dest-creds are
// each for one side. A user given without a password is asked for it on
// the terminal, as docker login and skopeo ask; without a terminal that is
// an error.
func Credentials(ctx context.Context, c *cli.Context, rem oci.Remote, src oci.Ref, dst *oci.Ref) (srcRem, dstRem oci.Remote, err error) {
	rem.AuthFile = c.String("authfile")
	if rem.AuthFile != "" {
		if _, err := os.Stat(rem.AuthFile); err != nil {
			return rem, rem, fmt.Errorf("--authfile: %w", err)
		}
	}
	user, pass, perSide, err := loginFlags(c, src)
	if err != nil {
		return rem, rem, err
	}
	if user != "" || pass != "" {
		if perSide {
			return rem, rem, errors.New("--username: give either --username and --password, or --src-creds and --dest-creds")
		}
		return oneLogin(ctx, rem, user, pass, registries(src, dst))
	}
	srcRem, dstRem = rem, rem
	if err := sideLogin(ctx, c, "src-creds", "source", &src, &srcRem); err != nil {
		return srcRem, dstRem, err
	}
	return srcRem, dstRem, sideLogin(ctx, c, "dest-creds", "target", dst, &dstRem)
}

// loginFlags reads --username and --password (the password from stdin
// with --password-stdin), and whether --src-creds or --dest-creds are
// given (perSide). With those, a user and password from the environment
// (a mirror's, say) give way to the flags given for this run.
func loginFlags(c *cli.Context, src oci.Ref) (user, pass string, perSide bool, err error) {
	user, pass = c.String("username"), c.String("password")
	perSide = c.String("src-creds") != "" || c.String("dest-creds") != ""
	if perSide {
		if user == os.Getenv("OCIEROFS_USERNAME") {
			user = ""
		}
		if pass == os.Getenv("OCIEROFS_PASSWORD") {
			pass = ""
		}
	}
	if c.Bool("password-stdin") {
		if user == "" || c.IsSet("password") {
			return "", "", false, errors.New("--password-stdin: give --username, and no --password")
		}
		if src.Kind == oci.DockerArchive && slices.Contains([]string{"/dev/stdin", "/dev/fd/0", "/proc/self/fd/0", "-"}, src.Path) {
			return "", "", false, errors.New("--password-stdin: stdin is the docker archive (give the password with --password or $OCIEROFS_PASSWORD)")
		}
		raw, err := io.ReadAll(io.LimitReader(os.Stdin, 64<<10))
		if err != nil {
			return "", "", false, fmt.Errorf("--password-stdin: %w", err)
		}
		if pass = strings.TrimRight(string(raw), "\r\n"); pass == "" {
			return "", "", false, errors.New("--password-stdin: stdin is empty")
		}
	}
	if user == "" && pass != "" {
		return "", "", false, errors.New("--password without --username")
	}
	return user, pass, perSide, nil
}

// registries is the registries of src and dst (nil: none) that are in
// one, each once.
func registries(src oci.Ref, dst *oci.Ref) []string {
	refs := []oci.Ref{src}
	if dst != nil {
		refs = append(refs, *dst)
	}
	var regs []string
	for _, r := range refs {
		if r.Kind == oci.Registry && !slices.Contains(regs, r.Name.Context().RegistryStr()) {
			regs = append(regs, r.Name.Context().RegistryStr())
		}
	}
	return regs
}

// oneLogin gives rem the credential of --username for the one registry
// in regs, for both sides, asking for the password on the terminal when
// none is given. Two registries are refused: neither must be sent the
// other's password.
func oneLogin(ctx context.Context, rem oci.Remote, user, pass string, regs []string) (srcRem, dstRem oci.Remote, err error) {
	switch len(regs) {
	case 0:
		return rem, rem, errors.New("--username: no registry to log in to")
	case 2:
		return rem, rem, fmt.Errorf("--username: the source is on %s and the target on %s: give each its own with --src-creds and --dest-creds", regs[0], regs[1])
	}
	if pass == "" {
		pass, err = askPassword(ctx, user, regs[0])
		if errors.Is(err, errNoTerminal) {
			return rem, rem, fmt.Errorf("--username %s: no password: give --password, --password-stdin or $OCIEROFS_PASSWORD, or run on a terminal to be asked for it", user)
		}
		if err != nil {
			return rem, rem, fmt.Errorf("--username %s: %w", user, err)
		}
	}
	cred := oci.Credential{Username: user, Password: pass}
	if srcRem, err = rem.WithCredential(regs[0], cred); err != nil {
		return srcRem, rem, err
	}
	dstRem, err = rem.WithCredential(regs[0], cred)
	return srcRem, dstRem, err
}

// sideLogin gives *rem the credential of --src-creds or --dest-creds
// (flag), USER:PASSWORD, for the registry of r, the source or the target
// (what). USER alone, as skopeo takes it, asks for the password on the
// terminal.
func sideLogin(ctx context.Context, c *cli.Context, flag, what string, r *oci.Ref, rem *oci.Remote) error {
	v := c.String(flag)
	if v == "" {
		return nil
	}
	if r == nil || r.Kind != oci.Registry {
		return fmt.Errorf("--%s: the %s is not in a registry", flag, what)
	}
	user, pass, ok := strings.Cut(v, ":")
	if user == "" {
		return fmt.Errorf("--%s: want USER:PASSWORD", flag)
	}
	reg := r.Name.Context().RegistryStr()
	if !ok {
		var err error
		pass, err = askPassword(ctx, user, reg)
		if errors.Is(err, errNoTerminal) {
			return fmt.Errorf("--%s: want USER:PASSWORD, or run on a terminal to be asked for the password", flag)
		}
		if err != nil {
			return fmt.Errorf("--%s: %w", flag, err)
		}
	}
	var err error
	*rem, err = rem.WithCredential(reg, oci.Credential{Username: user, Password: pass})
	return err
}

// Image reads ErofsFlags and SourceFlags (convert, cache); done ends the
// progress display it may start on a terminal. Its registry access has no
// credentials yet: Credentials gives them.
func Image(c *cli.Context) (opt convert.ImageOptions, rem oci.Remote, done func(), err error) {
	done = func() {}
	rem = oci.Remote{Insecure: c.Bool("insecure"), StallTimeout: StallTimeout(c)}
	lopt, err := Layer(c)
	if err != nil {
		return opt, rem, done, err
	}
	opt = convert.ImageOptions{Layer: lopt, Jobs: c.Int("jobs"), TempDir: c.String("tmpdir")}
	if opt.Layer.MaxTarSize, err = MaxLayerSize(c); err != nil {
		return opt, rem, done, err
	}
	// A docker-archive from a pipe, or compressed, is copied first: into
	// --tmpdir too, and as bounded.
	rem.ArchiveTempDir, rem.MaxArchiveFile = opt.TempDir, opt.Layer.MaxTarSize
	if p := c.String("platform"); p != "all" && p != "" {
		for _, s := range strings.Split(p, ",") {
			pl, err := ParsePlatform(strings.TrimSpace(s))
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
	case progress.IsTerminal(os.Stderr):
		// A display per layer instead of log lines.
		v := progress.NewView(os.Stderr)
		opt.Progress = v.Update
		done = v.Close
	default:
		opt.Log = func(s string) { fmt.Fprintf(os.Stderr, "%s %s\n", time.Now().Format("15:04:05"), s) }
		opt.Progress = progress.Every(10*time.Second, opt.Log)
	}
	return opt, rem, done, nil
}

// Conversion reads every flag of convert that shapes the converted
// image (Image and ConvertFlags); serve and sync share it.
func Conversion(c *cli.Context) (opt convert.ImageOptions, rem oci.Remote, done func(), err error) {
	opt, rem, done, err = Image(c)
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
	if opt.Spec, err = specOptions(c, opt.SpecMediaTypes); err != nil {
		return opt, rem, done, err
	}
	switch l := c.String("layout"); l {
	case "overlay", "":
	case "device", "overlay-data":
		if !opt.SpecMediaTypes {
			return opt, rem, done, fmt.Errorf("--layout %s: roles are the EROFS image spec's: it needs --media-type spec", l)
		}
		if opt.Flatten {
			return opt, rem, done, fmt.Errorf("--layout %s with --flatten: the %s layout stacks the layers in a metadata layer of its own", l, l)
		}
		opt.Layout = convert.Layout(l)
	default:
		return opt, rem, done, fmt.Errorf("--layout %q: want overlay, device or overlay-data", l)
	}
	if name := c.String("prefetch-list"); name != "" {
		if opt.Layer.PrefetchList, err = convert.ReadPrefetchList(name); err != nil {
			return opt, rem, done, fmt.Errorf("--prefetch-list: %w", err)
		}
		if len(opt.Layer.PrefetchList) == 0 {
			fmt.Fprintf(os.Stderr, "--prefetch-list %s: no paths in it: the layers are laid out as without it\n", name)
		}
	}
	if opt.SpecMediaTypes && opt.Layer.Whiteouts == whiteout.Keep {
		return opt, rem, done, errors.New("--media-type spec with --whiteouts keep: the EROFS image spec wants no .wh. names in a layer (§3.6)")
	}
	if opt.SpecMediaTypes && opt.NoIndexOSFeatures {
		return opt, rem, done, errors.New("--media-type spec with --no-index-os-features: the EROFS image spec wants \"erofs\" in the os.features of an index entry (§6)")
	}
	return opt, rem, done, nil
}

// ErofsFlags are the EROFS image options of every command that builds
// images.
func ErofsFlags() []cli.Flag {
	return InCategory("EROFS image",
		&cli.IntFlag{Name: "block-size", Aliases: []string{"b"}, Value: 4096, Usage: "block size: 512…65536, a power of two (kernels before 6.4 need the page size, and none mounts blocks larger than its pages)"},
		&cli.StringFlag{Name: "uuid", Aliases: []string{"U"}, Usage: "superblock UUID (default: derived from the diffID as containerd does, or by mkfs without --diff-id from a fast hash of the tar; given, no hash is computed)"},
		&cli.StringFlag{Name: "build-time", Aliases: []string{"T"}, EnvVars: []string{"SOURCE_DATE_EPOCH"}, Usage: "build time in Unix seconds: recorded in the superblock, and the mtime of implied directories"},
		&cli.StringFlag{Name: "label", Aliases: []string{"L"}, Usage: "volume label (at most 15 bytes)"},
		&cli.StringFlag{Name: "whiteouts", Value: "overlay", Usage: "overlay: turn OCI whiteouts into overlayfs ones; keep: store the tar as it is"},
		&cli.BoolFlag{Name: "no-inline-data", Usage: "store no file tails inline next to their inodes (containerd's -Enoinline_data)"},
		&cli.BoolFlag{Name: "extended-inodes", Usage: "write every inode in the 64-byte extended form (mkfs.erofs -Eforce-inode-extended); by default an inode whose metadata fits takes the 32-byte compact form"},
		&cli.StringFlag{Name: "compress", Aliases: []string{"z"}, Value: "none", Usage: "none, lz4, lz4hc[,level=N] (N 1…12, default 9), or lzma, deflate, zstd [,level=N]"},
		&cli.StringFlag{Name: "pcluster-size", Value: "64K", Usage: "largest compressed physical cluster: a multiple of the block size up to 1M (4K for kernels before 5.13)"},
		&cli.StringFlag{Name: "max-extent", Value: "1M", Usage: "largest decompressed extent (up to 12M)"},
		&cli.BoolFlag{Name: "tail-packing", Value: true, Usage: "store each compressed file's last extent inline after its inode (ztailpacking, 5.17; off for older --min-kernel)"},
		&cli.BoolFlag{Name: "fragments", Usage: "pack small files and file tails together into the packed inode (6.1): smallest images, slower random reads of small files"},
		&cli.BoolFlag{Name: "dedupe", Usage: "let compressed extents share pclusters with identical data written before them, in any file at any offset (6.1; needs --compress)"},
		&cli.StringFlag{Name: "min-kernel", Usage: "oldest Linux X.Y that must mount the image: refuse what it cannot mount"},
		&cli.StringFlag{Name: "chunk-size", Usage: "store files of at least SIZE chunk-based in chunks of SIZE (a power of two ≥ the block size, e.g. 64K): each distinct chunk once, zero chunks as holes (uncompressed images; Linux 5.15+)"},
		&cli.BoolFlag{Name: "no-file-dedupe", Usage: "store every file's data, even when an earlier file has the same content (by default they share its blocks)"},
		&cli.IntFlag{Name: "workers", DefaultText: "the number of CPUs", Usage: "goroutines compressing each image; the image does not depend on it"},
		&cli.BoolFlag{Name: "quiet", Aliases: []string{"q"}, Usage: "print nothing but errors"},
	)
}

// Layer reads ErofsFlags: how each layer becomes an image.
func Layer(c *cli.Context) (convert.Options, error) {
	var opt convert.Options
	opt.Erofs.BlockSize = c.Int("block-size")
	if s := c.String("uuid"); s != "" {
		u, err := ParseUUID(s)
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
	opt.Erofs.ExtendedInodes = c.Bool("extended-inodes")
	opt.Erofs.NoDedupe = c.Bool("no-file-dedupe")
	if s := c.String("chunk-size"); s != "" {
		n, err := ParseSize(s)
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
	if opt.Erofs.Compression, err = compression(c, opt.Erofs.BlockSize, opt.Erofs.MinKernel); err != nil {
		return opt, err
	}
	// Check the options here so that the error names the flags.
	if err := opt.Erofs.Validate(); err != nil {
		return opt, fmt.Errorf("image options: %w", err)
	}
	return opt, nil
}

// ParseCompress reads --compress: none, lz4, lz4hc[,level=N], or
// ALG[,level=N][,dictsize=SIZE] for the other algorithms erofs writes
// (mkfs.erofs' -zALG,N is accepted too). It returns nil for none.
func ParseCompress(spec string) (*erofs.Compression, error) {
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
			if z.DictSize, err = ParseSize(v); err != nil {
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

// compression reads --compress and its companions. Defaults that
// the --min-kernel cannot mount give way to what it can; values asked for
// explicitly are kept, and refused by Validate.
func compression(c *cli.Context, bs int, k erofs.Kernel) (*erofs.Compression, error) {
	z, err := ParseCompress(c.String("compress"))
	if z == nil && err == nil && c.Bool("dedupe") {
		return nil, fmt.Errorf("--dedupe shares compressed extents: it needs --compress")
	}
	if z == nil || err != nil {
		return nil, err
	}
	z.TailPacking, z.Fragments, z.Dedupe = c.Bool("tail-packing"), c.Bool("fragments"), c.Bool("dedupe")
	if z.PclusterSize, err = ParseSize(c.String("pcluster-size")); err != nil {
		return nil, fmt.Errorf("--pcluster-size: %w", err)
	}
	if z.MaxExtent, err = ParseSize(c.String("max-extent")); err != nil {
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

// MaxLayerSize is --max-layer-size in bytes; 0 where it is not given.
func MaxLayerSize(c *cli.Context) (int64, error) {
	s := c.String("max-layer-size")
	if s == "" {
		return 0, nil
	}
	n, err := parseBytes(s)
	if err != nil {
		return 0, fmt.Errorf("--max-layer-size: %w", err)
	}
	return n, nil
}

// ParseSize reads a byte count with an optional K or M suffix (powers of
// 1024) of at most 1 GiB: a block, pcluster or extent size.
func ParseSize(s string) (int, error) {
	n, err := parseBytes(s)
	if err != nil || n > 1<<30 {
		return 0, fmt.Errorf("size %q: want bytes, or a number with K or M, up to 1G", s)
	}
	return int(n), nil
}

// parseBytes reads a byte count with an optional K, M, G or T suffix
// (powers of 1024).
func parseBytes(s string) (int64, error) {
	n, unit := s, int64(1)
	if i := len(s) - 1; i > 0 {
		if k := strings.IndexByte("KMGT", s[i]&^0x20); k >= 0 {
			n, unit = s[:i], int64(1)<<(10*(k+1))
		}
	}
	v, err := strconv.ParseInt(n, 10, 64)
	if err != nil || v <= 0 || v > math.MaxInt64/unit {
		return 0, fmt.Errorf("size %q: want bytes, or a number with K, M, G or T", s)
	}
	return v * unit, nil
}

// ParseUUID reads the 8-4-4-4-12 hex form; "0" or "nil" is the zero UUID.
func ParseUUID(s string) ([16]byte, error) {
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

// FormatUUID writes u in the form ParseUUID reads.
func FormatUUID(u [16]byte) string {
	return fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
}

// ParsePlatform reads a --platform value as docker and ctr do (containerd's
// platforms.Parse): OS[/ARCH[/VARIANT]], or one word, an architecture
// (arm64: linux/arm64; armhf: linux/arm/v7) or an operating system (every
// architecture of it). v1.ParsePlatform took arm64 for an operating system
// and matched nothing.
func ParsePlatform(s string) (*v1.Platform, error) {
	if s == "" || strings.Contains(s, "/") {
		return v1.ParsePlatform(s)
	}
	w := strings.ToLower(s)
	switch w {
	case "armhf":
		return &v1.Platform{OS: "linux", Architecture: "arm", Variant: "v7"}, nil
	case "armel":
		return &v1.Platform{OS: "linux", Architecture: "arm", Variant: "v6"}, nil
	case "i386":
		return &v1.Platform{OS: "linux", Architecture: "386"}, nil
	case "amd64", "x86_64", "x86-64", "arm64", "aarch64", "arm", "386", "ppc64le", "ppc64", "s390x",
		"riscv64", "mips64le", "mips64", "mipsle", "mips", "loong64":
		return &v1.Platform{OS: "linux", Architecture: w}, nil
	case "linux", "windows", "darwin", "freebsd", "netbsd", "openbsd", "solaris", "illumos", "aix",
		"android", "ios", "plan9", "dragonfly", "js", "wasip1":
		return &v1.Platform{OS: w}, nil
	}
	return nil, fmt.Errorf("%q is neither a known operating system nor architecture (OS/ARCH[/VARIANT], e.g. linux/arm64)", s)
}

// specOptions reads the flags of the EROFS image spec's layer features,
// which only its media types have a place for.
func specOptions(c *cli.Context, spec bool) (o convert.SpecOptions, err error) {
	switch m := c.String("chunk-index"); m {
	case "none", "":
	case "embedded", "standalone":
		o.ChunkIndex = convert.ChunkIndexMode(m)
	default:
		return o, fmt.Errorf("--chunk-index %q: want none, embedded or standalone", m)
	}
	o.DMVerity = c.Bool("dmverity")
	if !spec && (o.ChunkIndex != convert.ChunkIndexNone || o.DMVerity) {
		return o, errors.New("--chunk-index and --dmverity are parts of the EROFS image spec's layers: they need --media-type spec")
	}
	size, err := ParseSize(c.String("chunk-index-size"))
	if err != nil || size < 4096 || size > 64<<20 || size&(size-1) != 0 {
		return o, fmt.Errorf("--chunk-index-size %q: want a power of two from 4K to 64M", c.String("chunk-index-size"))
	}
	o.ChunkSize = int(size)
	return o, nil
}
