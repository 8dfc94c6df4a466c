// Package mkfserofs reads mkfs.erofs's command line (erofs-utils 1.9) into
// the options of ocierofs's mkfs, so that ocierofs can stand in for
// mkfs.erofs where other tools run it: containerd's EROFS differ converts
// tar layers with `mkfs.erofs --tar=f --aufs --quiet -Enoinline_data -U …
// LAYER` (the tar on stdin) or `--tar=i` (an index, the tar appended
// afterwards), and its snapshotter commits directories with `mkfs.erofs
// --quiet -Enoinline_data LAYER DIR`.
//
// The options are parsed as getopt_long parses them: short options with
// their value attached (-zlz4hc,12) or following, long options as
// --name=value or --name value, unambiguous prefixes of long names, and
// options after the operands. What the image means follows mkfs.erofs:
// its defaults (pclusters of one block, no tail packing, no sharing of
// equal files' blocks, OCI whiteouts kept unless --aufs), and -T, which also sets every file's mtime unless
// --mkfs-time is given. An option ocierofs does not implement is refused
// by name rather than ignored.
package mkfserofs

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/ocierofs/ocierofs/cmd/internal/options"
	"github.com/ocierofs/ocierofs/convert"
	"github.com/ocierofs/ocierofs/whiteout"
)

// Command is one mkfs.erofs invocation.
type Command struct {
	// Output is the image (FILE); Input the SOURCE: a directory, a tar
	// file with --tar, or "-" (stdin) for --tar without a SOURCE.
	Output, Input string
	Options       convert.Options
	// Tar says --tar was given: Input is a tar, never a directory.
	Tar   bool
	Quiet bool
	// Help and Version ask for the usage text or the version line, and
	// nothing else.
	Help, Version bool
}

// Parse reads mkfs.erofs's arguments (without the program name); getenv
// supplies $SOURCE_DATE_EPOCH, as mkfs.erofs reads it.
func Parse(args []string, getenv func(string) string) (*Command, error) {
	p := &parser{cmd: &Command{}, bs: 4096}
	var operands []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		next := func() (string, bool) {
			if i+1 < len(args) {
				i++
				return args[i], true
			}
			return "", false
		}
		switch {
		case a == "--":
			operands = append(operands, args[i+1:]...)
			i = len(args)
		case strings.HasPrefix(a, "--"):
			if err := p.long(a[2:], next); err != nil {
				return nil, err
			}
		case strings.HasPrefix(a, "-") && a != "-":
			if err := p.short(a[1:], next); err != nil {
				return nil, err
			}
		default:
			operands = append(operands, a)
		}
		if p.cmd.Help || p.cmd.Version {
			// mkfs.erofs answers at once, whatever follows.
			return p.cmd, nil
		}
	}
	c := p.cmd
	switch {
	case len(operands) == 0:
		return nil, errors.New("missing argument: FILE")
	case len(operands) == 1 && !c.Tar:
		return nil, errors.New("missing argument: SOURCE(s)")
	case len(operands) > 2 && c.Tar:
		return nil, fmt.Errorf("%d SOURCEs: --tar takes one tar", len(operands)-1)
	case len(operands) > 2:
		return nil, fmt.Errorf("%d SOURCEs: several EROFS images to rebuild from are not supported by ocierofs (ocierofs merge stacks layer images)", len(operands)-1)
	}
	c.Output, c.Input = operands[0], "-"
	if len(operands) == 2 {
		// A SOURCE named "-" is a file of that name to mkfs.erofs, not
		// stdin.
		if c.Input = operands[1]; c.Input == "-" {
			c.Input = "./-"
		}
	}
	if err := p.finish(getenv); err != nil {
		return nil, err
	}
	return c, nil
}

// parser holds what the options say until they can be put together.
type parser struct {
	cmd *Command

	bs           int
	compress     string
	pcluster     int
	maxExtent    int
	tailPacking  bool
	fragments    bool
	dedupe       bool
	noInline     bool
	aufs         bool
	tarIndex     bool
	uuid         string
	buildTime    *int64
	mkfsTime     bool // --mkfs-time (true) or --all-time (false), the last one
	chunkSize    int
	blobdev      string
	workers      int
	label        string
	extendedInos bool
}

// argKind is how a long option takes its value (getopt_long's has_arg).
type argKind int

const (
	noArg argKind = iota
	requiredArg
	optionalArg // only as --name=value
)

type longOpt struct {
	kind argKind
	// set applies the option; nil marks an option of mkfs.erofs that
	// ocierofs does not implement.
	set func(p *parser, v string, given bool) error
}

// longOpts are mkfs.erofs 1.9.3's long options, those ocierofs implements
// and those it refuses.
var longOpts = map[string]longOpt{
	"help":    {noArg, func(p *parser, _ string, _ bool) error { p.cmd.Help = true; return nil }},
	"version": {noArg, func(p *parser, _ string, _ bool) error { p.cmd.Version = true; return nil }},
	"quiet":   {noArg, func(p *parser, _ string, _ bool) error { p.cmd.Quiet = true; return nil }},
	"tar": {optionalArg, func(p *parser, v string, given bool) error {
		p.cmd.Tar = true
		mode, mapfile, _ := strings.Cut(v, ",")
		// Index mode, once asked for, stays (a later --tar=f does not
		// undo it in mkfs.erofs); any mode but i, 0 and headerball is a
		// full image.
		switch {
		case mapfile != "":
			return fmt.Errorf("--tar=%s: a map file is not supported by ocierofs", v)
		case mode == "i" || mode == "0":
			p.tarIndex = true
		case mode == "headerball":
			return errors.New("--tar=headerball is not supported by ocierofs")
		}
		return nil
	}},
	"aufs":      {noArg, func(p *parser, _ string, _ bool) error { p.aufs = true; return nil }},
	"mkfs-time": {noArg, func(p *parser, _ string, _ bool) error { p.mkfsTime = true; return nil }},
	"all-time":  {noArg, func(p *parser, _ string, _ bool) error { p.mkfsTime = false; return nil }},
	// ocierofs lays data out in input order whatever --sort asks (as
	// mkfs.erofs, it takes any value): the order only places blocks, what
	// the kernel shows is the same.
	"sort": {requiredArg, func(*parser, string, bool) error { return nil }},
	// 0: the default (one per CPU; 1 MiB).
	"workers": {requiredArg, func(p *parser, v string, _ bool) (err error) {
		p.workers, err = number("--workers", v, 0)
		return err
	}},
	"max-extent-bytes": {requiredArg, func(p *parser, v string, _ bool) (err error) {
		p.maxExtent, err = number("--max-extent-bytes", v, 0)
		return err
	}},
	"chunksize": {requiredArg, func(p *parser, v string, _ bool) (err error) {
		p.chunkSize, err = number("--chunksize", v, 1)
		return err
	}},
	"blobdev": {requiredArg, func(p *parser, v string, _ bool) error { p.blobdev = v; return nil }},
	// The tar's compression is detected from its first bytes.
	"gzip": {noArg, func(*parser, string, bool) error { return nil }},
	"ungzip": {optionalArg, func(_ *parser, v string, given bool) error {
		if given {
			return fmt.Errorf("--ungzip=%s: dumping the decompressed stream is not supported by ocierofs", v)
		}
		return nil
	}},
	"zD": {optionalArg, func(_ *parser, v string, given bool) error {
		if given && v == "0" {
			return nil // directories are never compressed
		}
		return errors.New("--zD: compressed directories are not supported by ocierofs")
	}},
	"ovlfs-strip": {optionalArg, func(_ *parser, v string, given bool) error {
		if given && v != "1" {
			return nil // only "1" (or no value) strips
		}
		return errors.New("--ovlfs-strip: not supported by ocierofs")
	}},

	"exclude-path": {requiredArg, nil}, "exclude-regex": {requiredArg, nil},
	"file-contexts": {requiredArg, nil}, "force-uid": {requiredArg, nil},
	"force-gid": {requiredArg, nil}, "all-root": {noArg, nil},
	"uid-offset": {requiredArg, nil}, "gid-offset": {requiredArg, nil},
	"ignore-mtime": {noArg, nil}, "preserve-mtime": {noArg, nil},
	"random-pclusterblks": {noArg, nil}, "random-algorithms": {noArg, nil},
	"compress-hints": {requiredArg, nil}, "mount-point": {requiredArg, nil},
	"offset": {requiredArg, nil}, "unlzma": {optionalArg, nil}, "unxz": {optionalArg, nil},
	"gzinfo": {optionalArg, nil}, "zfeature-bits": {requiredArg, nil},
	"clean": {optionalArg, nil}, "incremental": {optionalArg, nil},
	"root-xattr-isize": {requiredArg, nil}, "hard-dereference": {noArg, nil},
	"dsunit": {requiredArg, nil}, "async-queue-limit": {requiredArg, nil},
	"fsalignblks": {requiredArg, nil}, "vmdk-desc": {requiredArg, nil},
	"MZ": {optionalArg, nil}, "xattr-prefix": {requiredArg, nil},
	"xattr-inode-digest": {optionalArg, nil},
}

// long handles "--name[=value]".
func (p *parser) long(s string, next func() (string, bool)) error {
	name, v, given := strings.Cut(s, "=")
	o, ok := longOpts[name]
	if !ok {
		// getopt_long takes an unambiguous prefix of a name.
		var found []string
		for n := range longOpts {
			if strings.HasPrefix(n, name) {
				found = append(found, n)
			}
		}
		switch len(found) {
		case 0:
			return fmt.Errorf("unrecognized option '--%s'", name)
		case 1:
			name, o = found[0], longOpts[found[0]]
		default:
			return fmt.Errorf("option '--%s' is ambiguous", name)
		}
	}
	switch o.kind {
	case noArg:
		if given {
			return fmt.Errorf("option '--%s' doesn't allow an argument", name)
		}
	case requiredArg:
		if !given {
			if v, given = next(); !given {
				return fmt.Errorf("option '--%s' requires an argument", name)
			}
		}
	}
	if o.set == nil {
		return fmt.Errorf("--%s: not supported by ocierofs", name)
	}
	return o.set(p, v, given)
}

// short handles a short option: "-b4096", "-b 4096", "-h". Of a cluster
// such as "-Vh" the first letter decides, as with mkfs.erofs: -h and -V
// end the run, and every other option takes the rest as its value.
func (p *parser) short(s string, next func() (string, bool)) error {
	if s == "" {
		return nil
	}
	switch c := s[0]; c {
	case 'h':
		p.cmd.Help = true
		return nil
	case 'V':
		p.cmd.Version = true
		return nil
	case 'b', 'd', 'x', 'z', 'C', 'E', 'L', 'T', 'U', 'm':
		v := s[1:]
		if v == "" {
			var ok bool
			if v, ok = next(); !ok {
				return fmt.Errorf("option requires an argument -- '%c'", c)
			}
		}
		return p.shortValue(c, v)
	default:
		return fmt.Errorf("invalid option -- '%c'", c)
	}
}

func (p *parser) shortValue(c byte, v string) (err error) {
	switch c {
	case 'b':
		// erofs-utils caps it at EROFS_MAX_BLOCK_SIZE, 4096.
		if p.bs, err = number("-b", v, 512); err == nil && p.bs > 4096 {
			return fmt.Errorf("invalid block size %s: mkfs.erofs takes 512 to 4096", v)
		}
	case 'd':
		// Verbosity: ocierofs prints a line, or nothing with --quiet.
		if n, err := strconv.Atoi(v); err != nil || n < 0 || n > 9 {
			return fmt.Errorf("invalid debug level %s", v)
		}
	case 'x':
		// How many xattrs may stay inline rather than shared places them
		// only; below 0 drops them all, which ocierofs does not.
		n, err := cNumber(v)
		switch {
		case err != nil:
			return fmt.Errorf("invalid xattr tolerance %s", v)
		case n < 0:
			return fmt.Errorf("-x %s: disabling xattrs is not supported by ocierofs", v)
		}
	case 'm':
		return fmt.Errorf("-m %s: metadata compression is not supported by ocierofs", v)
	case 'z':
		if strings.Contains(v, ":") || p.compress != "" {
			// A second -z adds an alternative in mkfs.erofs.
			return fmt.Errorf("-z %s: alternative compressors are not supported by ocierofs", v)
		}
		p.compress = v
	case 'C':
		p.pcluster, err = number("-C", v, 1)
	case 'E':
		return p.extended(v)
	case 'L':
		if len(v) > 15 {
			return fmt.Errorf("invalid volume label %q: longer than 15 bytes", v)
		}
		p.label = v
	case 'T':
		t, err := cNumber(v)
		if err != nil || t < 0 {
			return fmt.Errorf("invalid UNIX timestamp %s", v)
		}
		p.buildTime = &t
	case 'U':
		p.uuid = v
	}
	return err
}

// extended handles -E's comma-separated list; ^NAME clears NAME. As in
// mkfs.erofs, the list may end with a comma.
func (p *parser) extended(list string) error {
	for _, tok := range strings.Split(strings.TrimSuffix(list, ","), ",") {
		name, v, hasValue := strings.Cut(tok, "=")
		clear := strings.HasPrefix(name, "^")
		name = strings.TrimPrefix(name, "^")
		if hasValue && v == "" || name == "" {
			return fmt.Errorf("-E %s: invalid extended option %q", list, tok)
		}
		if hasValue {
			return fmt.Errorf("-E %s: %s=%s: values are not supported by ocierofs", list, name, v)
		}
		switch name {
		case "noinline_data":
			p.noInline = true
		case "inline_data":
			p.noInline = clear
		case "ztailpacking":
			p.tailPacking = !clear
		case "fragments":
			p.fragments = !clear
		case "dedupe":
			p.dedupe = !clear
		case "force-inode-extended":
			p.extendedInos = true
		case "force-inode-compact", "nosbcrc", "force-inode-blockmap", "force-chunk-indexes",
			"xattr-name-filter", "plain-xattr-prefixes", "legacy-compress", "all-fragments",
			"fragdedupe", "48bit", "dot-omitted":
			return fmt.Errorf("-E %s: %s is not supported by ocierofs", list, name)
		default:
			return fmt.Errorf("-E %s: unknown extended option %s", list, name)
		}
	}
	return nil
}

// number reads a count as strtol does (decimal, 0x hex, 0 octal), or with
// a K or M suffix.
func number(opt, v string, least int) (int, error) {
	n, err := cNumber(v)
	if errors.Is(err, strconv.ErrSyntax) {
		m, serr := options.ParseSize(v)
		if serr != nil {
			return 0, fmt.Errorf("%s %s: want a number", opt, v)
		}
		n, err = int64(m), nil
	}
	switch {
	case err != nil || n > 1<<31-1:
		return 0, fmt.Errorf("%s %s: out of range", opt, v)
	case n < int64(least):
		return 0, fmt.Errorf("%s %s: want at least %d", opt, v, least)
	}
	return int(n), nil
}

// cNumber reads an integer in C's forms: decimal, 0x hex, 0 octal (not
// Go's 0b, 0o and digit separators).
func cNumber(v string) (int64, error) {
	digits := strings.TrimPrefix(strings.TrimPrefix(v, "-"), "+")
	if strings.ContainsRune(v, '_') || len(digits) > 1 && digits[0] == '0' && strings.ContainsAny(digits[1:2], "bBoO") {
		return 0, &strconv.NumError{Func: "cNumber", Num: v, Err: strconv.ErrSyntax}
	}
	return strconv.ParseInt(v, 0, 64)
}

// finish puts the options together as mkfs.erofs would.
func (p *parser) finish(getenv func(string) string) error {
	c := p.cmd
	o := &c.Options
	e := &o.Erofs
	e.BlockSize = p.bs
	e.NoInlineData = p.noInline
	// mkfs.erofs stores every file's data: sharing the blocks of equal
	// files would cost hashing all of it (much CPU time for a small
	// part of a typical layer), where containerd waits for the layer.
	e.NoDedupe = true
	e.ExtendedInodes = p.extendedInos
	e.VolumeName = p.label
	e.Workers = p.workers
	e.ChunkSize = p.chunkSize
	o.Blob = p.blobdev
	o.Whiteouts = whiteout.Keep
	if p.aufs {
		o.Whiteouts = whiteout.Overlay
	}
	if p.pcluster != 0 && (p.pcluster < p.bs || p.pcluster%p.bs != 0) {
		return fmt.Errorf("invalid physical clustersize %d: a multiple of the block size %d", p.pcluster, p.bs)
	}
	if p.tarIndex {
		// An index of 512-byte blocks whatever -b says, its files' data
		// left in the tar whatever -z, -C, -E and --chunksize say, as
		// mkfs.erofs makes it (containerd passes the same options to
		// both modes).
		if p.blobdev != "" {
			return errors.New("--tar=i: the data stays in the tar: no --blobdev")
		}
		o.TarIndex = true
		e.BlockSize, e.ChunkSize = 0, 0
		p.compress = ""
	}

	// -T is the build time and, unless --mkfs-time, every file's mtime;
	// $SOURCE_DATE_EPOCH, read after the options, overrides both: it is
	// the build time, and the latest mtime.
	if p.buildTime != nil {
		e.BuildTime = time.Unix(*p.buildTime, 0)
		e.FixedMtime = !p.mkfsTime
	}
	if s := getenv("SOURCE_DATE_EPOCH"); s != "" {
		t, err := strconv.ParseUint(s, 10, 63)
		if err != nil {
			return fmt.Errorf("environment variable $SOURCE_DATE_EPOCH %s is invalid", s)
		}
		e.BuildTime = time.Unix(int64(t), 0)
		e.FixedMtime, e.ClampMtime = false, true
	}

	switch p.uuid {
	case "":
		// mkfs.erofs takes a random one; ocierofs derives it from the
		// tar's diffID, as containerd does, or from a hash of a
		// directory's entries.
	case "random":
		if _, err := io.ReadFull(rand.Reader, e.UUID[:]); err != nil {
			return err
		}
		e.UUID[6] = e.UUID[6]&0x0f | 0x40
		e.UUID[8] = e.UUID[8]&0x3f | 0x80
		o.KeepUUID, o.NoDiffID = true, true
	case "clear":
		o.KeepUUID, o.NoDiffID = true, true
	default:
		u, err := options.ParseUUID(p.uuid)
		if err != nil || p.uuid == "0" || p.uuid == "nil" {
			return fmt.Errorf("invalid UUID %s", p.uuid)
		}
		e.UUID = u
		o.KeepUUID, o.NoDiffID = true, true
	}

	if p.compress != "" {
		z, err := options.ParseCompress(zeroLevel(p.compress))
		if err != nil {
			return fmt.Errorf("-z: %w", err)
		}
		if z != nil {
			// One block per pcluster unless -C says more, as mkfs.erofs.
			z.PclusterSize = max(p.pcluster, e.BlockSize)
			z.MaxExtent = p.maxExtent
			z.TailPacking, z.Fragments, z.Dedupe = p.tailPacking, p.fragments, p.dedupe
		}
		e.Compression = z
	}
	// Without -z, ztailpacking, fragments and dedupe (of compressed
	// extents) have nothing to act on, and mkfs.erofs ignores them too.
	if p.tarIndex {
		return nil // Mkfs checks the rest of a tar index
	}
	return e.Validate()
}

// Usage writes the help text, in mkfs.erofs's form, of the options
// ocierofs implements. containerd's EROFS differ looks for "--tar=" in it.
func Usage(w io.Writer, prog string) {
	fmt.Fprintf(w, `Usage: %s [OPTIONS] FILE SOURCE
Generate EROFS image (FILE) from SOURCE: a directory, or with --tar a tar
file (plain, gzip or zstd), or stdin if SOURCE is left out.
This is ocierofs standing in for mkfs.erofs (erofs-utils 1.9); the options
below are those it implements, and it refuses the others by name.

General options:
 -V, --version          print the version number and exit
 -h, --help             display this help and exit

 -b#                    set block size to # (512 to 4096; default 4096)
 -d<0-9>                accepted; ocierofs prints one line, or nothing with --quiet
 -x#                    accepted for # >= 0 (where xattrs are placed is ocierofs's choice)
 -zX[,level=Y]          X=compressor: lz4, lz4hc, lzma, deflate, zstd
    [,dictsize=Z]       (Y=compression level, Z=dictionary size, optional)
 -C#                    largest compressed physical cluster in bytes (default: one block)
 -EX[,...]              X=extended options: noinline_data (^inline_data),
                        [^]ztailpacking, [^]fragments, [^]dedupe, force-inode-extended
 -L volume-label        set the volume label (maximum 15 bytes)
 -T#                    specify a fixed UNIX timestamp # as build time
    --all-time          the timestamp is also applied to all files (default)
    --mkfs-time         the timestamp is applied as build time only
 -UX                    use a given filesystem UUID (or clear, random; default:
                        derived from the tar's diffID, as containerd does)
 --blobdev=X            specify an extra device X to store chunked data
 --chunksize=#          generate chunk-based files with #-byte chunks
 --max-extent-bytes=#   set maximum decompressed extent size # in bytes
 --workers=#            set the number of compressing goroutines (0: one per CPU)
 --quiet                quiet execution
 --aufs                 replace aufs special files with overlayfs metadata
 --sort=X               accepted; data is laid out in the tar's order
 --tar=X                generate a full or index-only image from a tarball source
                        (X = f|i; f=full mode, i=index mode: 512-byte blocks, the
                        tar to be appended to the image or given as -o device=)
 --ungzip, --gzip       accepted; a gzip or zstd tar is detected from its first bytes
 $SOURCE_DATE_EPOCH     the build time, and no file's mtime is later
`, prog)
}

// zeroLevel drops a level of 0 from -z lz4hc and zstd, which mkfs.erofs
// reads as their default level. (lzma's 0 is a level of its own.)
func zeroLevel(spec string) string {
	alg, rest, _ := strings.Cut(spec, ",")
	if alg != "lz4hc" && alg != "zstd" {
		return spec
	}
	var keep []string
	for _, a := range strings.Split(rest, ",") {
		if a != "0" && a != "level=0" && a != "" {
			keep = append(keep, a)
		}
	}
	return strings.Join(append([]string{alg}, keep...), ",")
}
