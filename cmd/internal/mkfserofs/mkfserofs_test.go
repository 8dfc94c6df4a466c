package mkfserofs

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/ocierofs/ocierofs/erofs"
	"github.com/ocierofs/ocierofs/whiteout"
)

const uuid = "6b1ff4b0-4a6e-4c45-bc3b-1d1f0cf9d3c2"

var uuidBytes = [16]byte{0x6b, 0x1f, 0xf4, 0xb0, 0x4a, 0x6e, 0x4c, 0x45, 0xbc, 0x3b, 0x1d, 0x1f, 0x0c, 0xf9, 0xd3, 0xc2}

func noEnv(string) string { return "" }

func parse(t *testing.T, line string, env map[string]string) *Command {
	t.Helper()
	c, err := Parse(strings.Fields(line), func(k string) string { return env[k] })
	if err != nil {
		t.Fatalf("%s: %v", line, err)
	}
	return c
}

// The command lines containerd 2.4 and erofsbench run.
func TestParseKnownCallers(t *testing.T) {
	// containerd's EROFS differ, a tar layer, with the mkfs_options its
	// documentation recommends; the tar comes on stdin.
	c := parse(t, "--tar=f --aufs --quiet -Enoinline_data -b4096 -T0 --mkfs-time --sort=none -U "+uuid+" /s/1/layer.erofs", nil)
	o, e := c.Options, c.Options.Erofs
	if c.Output != "/s/1/layer.erofs" || c.Input != "-" || !c.Tar || !c.Quiet {
		t.Errorf("containerd full: %+v", c)
	}
	if !e.NoInlineData || !e.NoDedupe || e.BlockSize != 4096 || o.Whiteouts != whiteout.Overlay || e.Compression != nil || o.TarIndex {
		t.Errorf("containerd full: options %+v", o)
	}
	if !e.BuildTime.Equal(time.Unix(0, 0)) || e.FixedMtime || e.ClampMtime {
		t.Errorf("-T0 --mkfs-time: build time %v, fixed %v, clamp %v; want 0, only the build time", e.BuildTime, e.FixedMtime, e.ClampMtime)
	}
	if e.UUID != uuidBytes || !o.KeepUUID || !o.NoDiffID {
		t.Errorf("-U: %x keep %v no diffID %v", e.UUID, o.KeepUUID, o.NoDiffID)
	}

	// Tar index mode gets the same mkfs_options: the index has 512-byte
	// blocks and stores no data, whatever -b, -z and -C say.
	c = parse(t, "--tar=i --aufs --quiet -b4096 -zlz4hc -C65536 -Eztailpacking,fragments -U "+uuid+" layer.erofs", nil)
	if !c.Options.TarIndex || c.Options.Erofs.BlockSize != 0 || c.Options.Erofs.Compression != nil || c.Input != "-" {
		t.Errorf("containerd index: %+v", c.Options)
	}

	// The snapshotter commits an upper directory: no --tar, no --aufs
	// (its whiteouts are overlayfs's already).
	c = parse(t, "--quiet -Enoinline_data layer.erofs /s/2/fs", nil)
	if c.Tar || c.Input != "/s/2/fs" || c.Options.Whiteouts != whiteout.Keep || c.Options.KeepUUID {
		t.Errorf("containerd commit: %+v", c)
	}

	// erofsbench's mkfs.erofs line.
	c = parse(t, "-C4096 --max-extent-bytes=65536 -b4096 --quiet -Eforce-inode-extended,^ztailpacking,^fragments,^dedupe --zD=0 -U "+uuid+" -zlzma,1 --workers=2 --tar=f out.img in.tar", nil)
	e = c.Options.Erofs
	z := e.Compression
	if z == nil || z.Algorithm != erofs.AlgLZMA || z.Level != 1 || z.PclusterSize != 4096 || z.MaxExtent != 65536 ||
		z.TailPacking || z.Fragments || z.Dedupe || !e.ExtendedInodes || e.Workers != 2 || c.Input != "in.tar" {
		t.Errorf("erofsbench: %+v, compression %+v", e, z)
	}
}

// getopt_long's ways of writing the same thing.
func TestParseSpellings(t *testing.T) {
	for _, line := range []string{
		"-zlz4hc,12 -C65536 -Eztailpacking out in",
		"-z lz4hc,12 -C 65536 -E ztailpacking out in",
		"-z lz4hc,level=12 -C 0x10000 -E ^fragments,ztailpacking out in",
		"out -zlz4hc,12 in -C64K -Eztailpacking",
		"-zlz4hc,12 -C65536 -E^ztailpacking -Eztailpacking, -- out in",
		"-zlz4hc,level=12 --sort=size --workers=0 --max-extent-bytes=0 --ovlfs-strip=2 -x 0x2 -C65536 -Eztailpacking out in",
	} {
		c := parse(t, line, nil)
		z := c.Options.Erofs.Compression
		if z == nil || z.Algorithm != erofs.AlgLZ4 || z.Level != 12 || z.PclusterSize != 65536 || !z.TailPacking || c.Output != "out" || c.Input != "in" {
			t.Errorf("%s: %+v %+v", line, c, z)
		}
	}
	// Defaults are mkfs.erofs's: a pcluster of one block, no tail packing.
	z := parse(t, "-zlz4 -b 1024 out in", nil).Options.Erofs.Compression
	if z.PclusterSize != 1024 || z.TailPacking || z.Fragments || z.Dedupe || z.Level != 0 {
		t.Errorf("-zlz4 -b1024: %+v", z)
	}
	if c := parse(t, "--qui --wo 3 --tar out", nil); !c.Quiet || c.Options.Erofs.Workers != 3 || !c.Tar {
		t.Errorf("abbreviated long options: %+v", c)
	}
	// -h and -V answer at once, as in mkfs.erofs: what follows is not read.
	for _, line := range []string{"-h", "--help", "-hV", "--he", "-b1024 -h --bogus -x -1"} {
		if c := parse(t, line, nil); !c.Help || c.Version {
			t.Errorf("%s: %+v, want the help only", line, c)
		}
	}
	for _, line := range []string{"-V", "-Vh", "--version --all-root", "-zlz4 -V -E nosuch"} {
		if c := parse(t, line, nil); !c.Version || c.Help {
			t.Errorf("%s: %+v, want the version only", line, c)
		}
	}
	var b bytes.Buffer
	Usage(&b, "mkfs.erofs")
	if !strings.Contains(b.String(), "--tar=") {
		t.Errorf("the usage text has no --tar=: containerd's differ would not load:\n%s", b.String())
	}
}

// -T and $SOURCE_DATE_EPOCH, as mkfs.erofs 1.9 reads them.
func TestParseTimes(t *testing.T) {
	for _, tc := range []struct {
		line          string
		env           map[string]string
		build         int64
		fixed, clamp  bool
		noBuildTimeOK bool
	}{
		{line: "-T100 o i", build: 100, fixed: true},
		{line: "-T 100 --all-time o i", build: 100, fixed: true},
		{line: "--mkfs-time -T100 o i", build: 100},
		{line: "-T100 --mkfs-time --all-time o i", build: 100, fixed: true},
		{line: "-T100 o i", env: map[string]string{"SOURCE_DATE_EPOCH": "2000"}, build: 2000, clamp: true},
		{line: "--mkfs-time o i", env: map[string]string{"SOURCE_DATE_EPOCH": "2000"}, build: 2000, clamp: true},
		{line: "o i", noBuildTimeOK: true},
	} {
		e := parse(t, tc.line, tc.env).Options.Erofs
		if tc.noBuildTimeOK {
			if !e.BuildTime.IsZero() || e.FixedMtime || e.ClampMtime {
				t.Errorf("%s: %+v", tc.line, e)
			}
			continue
		}
		if e.BuildTime.Unix() != tc.build || e.FixedMtime != tc.fixed || e.ClampMtime != tc.clamp {
			t.Errorf("%s %v: build %d fixed %v clamp %v, want %d %v %v", tc.line, tc.env, e.BuildTime.Unix(), e.FixedMtime, e.ClampMtime, tc.build, tc.fixed, tc.clamp)
		}
	}
}

func TestParseUUID(t *testing.T) {
	a := parse(t, "-U random o i", nil).Options
	b := parse(t, "-Urandom o i", nil).Options
	if a.Erofs.UUID == b.Erofs.UUID || a.Erofs.UUID[6]>>4 != 4 || !a.KeepUUID {
		t.Errorf("-U random: %x and %x", a.Erofs.UUID, b.Erofs.UUID)
	}
	if c := parse(t, "-U clear o i", nil).Options; c.Erofs.UUID != ([16]byte{}) || !c.KeepUUID || !c.NoDiffID {
		t.Errorf("-U clear: %+v", c)
	}
	if c := parse(t, "o i", nil).Options; c.KeepUUID || c.NoDiffID {
		t.Errorf("no -U: the UUID should derive from the diffID: %+v", c)
	}
}

// What ocierofs does not do is refused by name, never ignored.
func TestParseRefused(t *testing.T) {
	for _, tc := range []struct{ line, want string }{
		{"", "missing argument: FILE"},
		{"out", "missing argument: SOURCE"},
		{"out a.erofs b.erofs", "several EROFS images"},
		{"--tar out a.tar b.tar", "--tar takes one tar"},
		{"-Efoo out in", "unknown extended option foo"},
		{"-Enoinline_data=1 out in", "values are not supported"},
		{"-Eforce-inode-compact out in", "force-inode-compact is not supported"},
		{"-E48bit out in", "48bit is not supported"},
		{"-x -1 out in", "disabling xattrs"},
		{"-m 4096 out in", "metadata compression"},
		{"-zlz4:lzma out in", "alternative compressors"},
		{"-zlz5 out in", "lz5"},
		{"-zlz4hc,13 out in", "level"},
		{"--all-root out in", "--all-root: not supported"},
		{"--exclude-regex x out in", "--exclude-regex: not supported"},
		{"--tar=headerball out", "headerball is not supported"},
		{"--tar=f,map out", "map file"},
		{"--tar=i --blobdev=b out", "--tar=i"},
		{"-zlz4 -zlzma out in", "alternative compressors"},
		{"-Enoinline_data,,ztailpacking out in", "invalid extended option"},
		{"-b 8192 out in", "512 to 4096"},
		{"-C 6000 out in", "invalid physical clustersize 6000"},
		{"-zlzma,level=105 out in", "level"},
		{"--workers=4_096 out in", "want a number"},
		{"--chunksize=0b1000 out in", "want a number"},
		{"--workers=99999999999 out in", "out of range"},
		{"-x 0x2z out in", "invalid xattr tolerance"},
		{"--ovlfs-strip=1 out in", "--ovlfs-strip"},
		{"--zD=1 out in", "compressed directories"},
		{"--ovlfs-strip out in", "--ovlfs-strip"},
		{"--ungzip=dump --tar out", "dumping"},
		{"--quiet=1 out in", "doesn't allow an argument"},
		{"--workers", "requires an argument"},
		{"--workers=-1 out in", "at least 0"},
		{"--u out in", "ambiguous"},
		{"--nosuch out in", "unrecognized option '--nosuch'"},
		{"-q out in", "invalid option -- 'q'"},
		{"-b", "requires an argument -- 'b'"},
		{"-b 1000 out in", "block size"},
		{"-U 0 out in", "invalid UUID"},
		{"-U xyz out in", "invalid UUID"},
		{"-T -5 out in", "invalid UNIX timestamp"},
		{"-L 0123456789abcdef out in", "volume label"},
		{"-d 12 out in", "debug level"},
		{"-zlz4 -C 6144 out in", "6144"},
	} {
		_, err := Parse(strings.Fields(tc.line), noEnv)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want one saying %q", tc.line, err, tc.want)
		}
	}
	if _, err := Parse([]string{"o", "i"}, func(string) string { return "yesterday" }); err == nil || !strings.Contains(err.Error(), "SOURCE_DATE_EPOCH") {
		t.Errorf("a bad $SOURCE_DATE_EPOCH: %v", err)
	}
}

// What mkfs.erofs makes of odd but valid command lines.
func TestParseLenient(t *testing.T) {
	// Index mode stays once asked for, and ignores what only a full image
	// uses; containerd gives both modes the same mkfs_options.
	c := parse(t, "--tar=i --tar=f --tar --chunksize=65536 -zlz4hc -C65536 out", nil)
	if !c.Options.TarIndex || c.Options.Erofs.ChunkSize != 0 || c.Options.Erofs.Compression != nil {
		t.Errorf("--tar=i --tar=f --chunksize: %+v", c.Options)
	}
	// Level 0 of lz4hc and zstd is their default.
	for line, level := range map[string]int{"-zlz4hc,0 o i": 9, "-zzstd,level=0 o i": 3, "-zlzma,0 o i": 0} {
		z := parse(t, line, nil).Options.Erofs.Compression
		if z == nil || z.Level != level {
			t.Errorf("%s: %+v, want level %d", line, z, level)
		}
	}
	if c := parse(t, "--workers=0 --max-extent-bytes=0 -zlz4 o i", nil); c.Options.Erofs.Workers != 0 || c.Options.Erofs.Compression.MaxExtent != 0 {
		t.Errorf("0 for the defaults: %+v", c.Options.Erofs)
	}
	if c := parse(t, "--tar o -", nil); c.Input != "./-" {
		t.Errorf("a SOURCE named -: %q, want the file ./-, not stdin", c.Input)
	}
	if c := parse(t, "-T 0x10 o i", nil); c.Options.Erofs.BuildTime.Unix() != 16 {
		t.Errorf("-T 0x10: %v", c.Options.Erofs.BuildTime)
	}
}

// FuzzParse: no command line makes Parse panic, and what it accepts the
// image options accept.
func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		"--tar=f --aufs --quiet -Enoinline_data -b4096 -T0 --mkfs-time --sort=none -U " + uuid + " out",
		"--tar=i --aufs --quiet -b4096 -zlz4hc -C65536 -U " + uuid + " out",
		"-zlz4hc,12 -C 65536 -E^ztailpacking,fragments, -x 0x2 out in",
		"--qui --wo=3 -T 0x10 --all-time -L label -U random --chunksize=64K out in",
		"-Vh --bogus", "-- -out -in", "-b", "--tar=i,map out",
	} {
		f.Add(seed, "")
	}
	f.Add("-T 5 o i", "1000")
	f.Fuzz(func(t *testing.T, line, epoch string) {
		args := strings.Split(line, " ")
		c, err := Parse(args, func(string) string { return epoch })
		if err != nil || c.Help || c.Version || c.Options.TarIndex {
			return
		}
		if err := c.Options.Erofs.Validate(); err != nil {
			t.Errorf("%q: accepted, but the image options are not: %v", line, err)
		}
	})
}
