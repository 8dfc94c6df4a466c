package erofs

import "fmt"

// feature is one on-disk feature, with the first kernel that mounts it.
type feature struct {
	incompat bool
	bit      uint32
	name     string
	kernel   [2]int
}

// features lists the superblock feature bits by name (erofs-format.md §2.1).
var features = []feature{
	{false, FeatureCompatSBChksum, "sb_csum", [2]int{5, 5}},
	{false, FeatureCompatMtime, "mtime", [2]int{0, 0}},
	{false, FeatureCompatXattrFilter, "xattr_filter", [2]int{0, 0}}, // older kernels ignore it
	{false, 0x08, "shared_ea_in_metabox", [2]int{6, 17}},
	{false, 0x10, "plain_xattr_pfx", [2]int{0, 0}},
	{true, FeatureIncompatZeroPadding, "0padding", [2]int{5, 4}},
	{true, FeatureIncompatComprCfgs, "compr_cfgs/big_pcluster", [2]int{5, 13}},
	{true, FeatureIncompatChunkedFile, "chunked_file", [2]int{5, 15}},
	{true, FeatureIncompatDeviceTable, "device_table", [2]int{5, 16}},
	{true, FeatureIncompatZTailPacking, "ztailpacking", [2]int{5, 17}},
	{true, FeatureIncompatFragments, "fragments/dedupe", [2]int{6, 1}},
	{true, FeatureIncompatXattrPrefixes, "xattr_prefixes", [2]int{6, 4}},
	{true, FeatureIncompat48Bit, "48bit", [2]int{6, 15}},
	{true, FeatureIncompatMetabox, "metabox", [2]int{6, 17}},
}

// FeatureNames names the set bits of the compat and incompat words;
// unknown bits are shown in hex.
func FeatureNames(compat, incompat uint32) []string {
	var names []string
	for _, f := range features {
		w := compat
		if f.incompat {
			w = incompat
		}
		if w&f.bit != 0 {
			names = append(names, f.name)
			if f.incompat {
				incompat &^= f.bit
			} else {
				compat &^= f.bit
			}
		}
	}
	if compat != 0 {
		names = append(names, fmt.Sprintf("compat:%#x", compat))
	}
	if incompat != 0 {
		names = append(names, fmt.Sprintf("incompat:%#x", incompat))
	}
	return names
}

// MinKernel is the oldest Linux version that mounts an image with these
// superblock fields: the newest of its features, 6.4 for blocks smaller
// than 4 KiB, and 5.4 (EROFS out of staging) at least.
func MinKernel(s SuperInfo) string {
	k := [2]int{5, 4}
	newer := func(v [2]int) {
		if v[0] > k[0] || v[0] == k[0] && v[1] > k[1] {
			k = v
		}
	}
	for _, f := range features {
		w := s.FeatureCompat
		if f.incompat {
			w = s.FeatureIncompat
		}
		if w&f.bit != 0 {
			newer(f.kernel)
		}
	}
	if s.BlockSize < 4096 {
		newer([2]int{6, 4})
	}
	return fmt.Sprintf("%d.%d", k[0], k[1])
}
