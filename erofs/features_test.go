package erofs

import "testing"

// TestMinKernel: compatible features (the superblock checksum) do not
// raise the oldest kernel; incompatible ones, codecs and block sizes do.
func TestMinKernel(t *testing.T) {
	for _, c := range []struct {
		s    SuperInfo
		want string
	}{
		{SuperInfo{BlockSize: 4096, FeatureCompat: FeatureCompatSBChksum | FeatureCompatMtime}, "5.4"},
		{SuperInfo{BlockSize: 4096, FeatureIncompat: FeatureIncompatZTailPacking}, "5.17"},
		{SuperInfo{BlockSize: 4096, FeatureIncompat: FeatureIncompatComprCfgs, U1: 1 << AlgZstd}, "6.10"},
		{SuperInfo{BlockSize: 512}, "6.4"},
		{SuperInfo{BlockSize: 16384, FeatureIncompat: FeatureIncompatFragments}, "6.1 with pages of 16 KiB (or larger, from 6.4)"},
		{SuperInfo{BlockSize: 65536}, "5.4 with pages of 64 KiB (or larger, from 6.4)"},
	} {
		if got := MinKernel(c.s); got != c.want {
			t.Errorf("MinKernel(%+v) = %s, want %s", c.s, got, c.want)
		}
	}
}
