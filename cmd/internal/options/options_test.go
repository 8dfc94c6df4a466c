package options

import (
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/ocierofs/ocierofs/convert"
	"github.com/ocierofs/ocierofs/erofs"
	"github.com/ocierofs/ocierofs/erofs/compress/lz4"
)

func TestParseCompress(t *testing.T) {
	for _, tc := range []struct {
		spec  string
		alg   erofs.Algorithm
		level int
		dict  int
		err   string // a part of the error; "" for none
	}{
		{spec: "none"},
		{spec: "lz4", alg: erofs.AlgLZ4, level: -1},
		{spec: "lz4hc", alg: erofs.AlgLZ4, level: lz4.LevelHC},
		{spec: "lz4hc,level=12", alg: erofs.AlgLZ4, level: 12},
		{spec: "lz4hc,3", alg: erofs.AlgLZ4, level: 3}, // mkfs.erofs' -zlz4hc,3
		{spec: "zstd,level=1", alg: erofs.AlgZstd, level: 1},
		{spec: "lzma,6,dictsize=64K", alg: erofs.AlgLZMA, level: 6, dict: 64 << 10},
		{spec: "deflate,level=9", alg: erofs.AlgDeflate, level: 9},
		{spec: "lz4,level=3", err: "lz4 takes no level"},
		{spec: "lz4hc,level=13", err: "level must be"},
		{spec: "zstd,window=3", err: `unknown setting "window"`},
		{spec: "brotli", err: "want none, lz4"},
		{spec: "lzma,dictsize=1X", err: "dictsize"},
	} {
		z, err := ParseCompress(tc.spec)
		switch {
		case tc.err != "":
			if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), tc.spec) {
				t.Errorf("%q: err %v, want one naming the spec and %q", tc.spec, err, tc.err)
			}
		case err != nil:
			t.Errorf("%q: %v", tc.spec, err)
		case tc.spec == "none":
			if z != nil {
				t.Errorf("none: %+v, want nil", z)
			}
		case z.Algorithm != tc.alg || (tc.level >= 0 && z.Level != tc.level) || z.DictSize != tc.dict:
			t.Errorf("%q: %+v, want algorithm %v level %d dictsize %d", tc.spec, z, tc.alg, tc.level, tc.dict)
		}
	}
}

func TestParseSize(t *testing.T) {
	for s, want := range map[string]int{"4096": 4096, "4K": 4096, "64k": 64 << 10, "1M": 1 << 20, "12m": 12 << 20} {
		if n, err := ParseSize(s); err != nil || n != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", s, n, err, want)
		}
	}
	for _, s := range []string{"", "0", "-4K", "4G", "K", "1.5M", "2048M"} {
		if n, err := ParseSize(s); err == nil {
			t.Errorf("ParseSize(%q) = %d, want an error", s, n)
		}
	}
}

func TestUUID(t *testing.T) {
	const s = "6f636965-726f-4673-a062-656e63680001"
	u, err := ParseUUID(s)
	if err != nil {
		t.Fatal(err)
	}
	if u[0] != 0x6f || u[15] != 0x01 || FormatUUID(u) != s {
		t.Errorf("%q read as %x, written back as %q", s, u, FormatUUID(u))
	}
	if u, err := ParseUUID("nil"); err != nil || u != ([16]byte{}) {
		t.Errorf("nil: %x, %v", u, err)
	}
	for _, bad := range []string{"6f636965726f4673a062656e63680001", "6f636965-726f-4673-a062-656e6368000g", "6f636965-726f-4673-a062-656e636800"} {
		if _, err := ParseUUID(bad); err == nil {
			t.Errorf("ParseUUID(%q): no error", bad)
		}
	}
}

// TestParsePlatform: --platform as docker and ctr read it; one word is an
// architecture of linux or an operating system.
func TestParsePlatform(t *testing.T) {
	have := []string{"linux/amd64", "linux/arm64/v8", "linux/arm/v7", "linux/arm/v6", "windows/amd64"}
	for _, tc := range []struct{ spec, want string }{
		{"arm64", "linux/arm64/v8"},
		{"aarch64", "linux/arm64/v8"},
		{"armhf", "linux/arm/v7"},
		{"armel", "linux/arm/v6"},
		{"x86_64", "linux/amd64"},
		{"AMD64", "linux/amd64"},
		{"linux", "linux/amd64 linux/arm64/v8 linux/arm/v7 linux/arm/v6"},
		{"windows", "windows/amd64"},
		{"linux/aarch64", "linux/arm64/v8"},
		{"linux/arm", "linux/arm/v7 linux/arm/v6"},
	} {
		p, err := ParsePlatform(tc.spec)
		if err != nil {
			t.Errorf("%q: %v", tc.spec, err)
			continue
		}
		var got []string
		for _, h := range have {
			hp, err := v1.ParsePlatform(h)
			if err != nil {
				t.Fatal(err)
			}
			if convert.PlatformSelected([]v1.Platform{*p}, *hp) {
				got = append(got, h)
			}
		}
		if strings.Join(got, " ") != tc.want {
			t.Errorf("--platform %s takes %q, want %q", tc.spec, got, tc.want)
		}
	}
	if _, err := ParsePlatform("amiga"); err == nil || !strings.Contains(err.Error(), `"amiga" is neither a known operating system nor architecture`) {
		t.Errorf("amiga: %v", err)
	}
}

func TestParseBytes(t *testing.T) {
	for s, want := range map[string]int64{"512": 512, "1k": 1 << 10, "64M": 64 << 20, "20G": 20 << 30, "2T": 2 << 40} {
		if got, err := parseBytes(s); err != nil || got != want {
			t.Errorf("parseBytes(%q) = %d, %v; want %d", s, got, err, want)
		}
	}
	for _, s := range []string{"", "0", "-1", "G", "1.5G", "12X", "9999999999T"} {
		if got, err := parseBytes(s); err == nil {
			t.Errorf("parseBytes(%q) = %d, want an error", s, got)
		}
	}
}
