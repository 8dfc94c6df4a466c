package erofs

import (
	"fmt"
	"strconv"
	"strings"
)

// feature is one on-disk feature, with the first kernel that mounts it
// (for an incompatible one: a kernel mounts an image whatever compatible
// features it does not know, so those have none).
type feature struct {
	incompat bool
	bit      uint32
	name     string
	kernel   [2]int
}

// features lists the superblock feature bits by name (erofs-format.md §2.1).
var features = []feature{
	{false, FeatureCompatSBChksum, "sb_csum", [2]int{}},
	{false, FeatureCompatMtime, "mtime", [2]int{}},
	{false, FeatureCompatXattrFilter, "xattr_filter", [2]int{}},
	{false, 0x08, "shared_ea_in_metabox", [2]int{}},
	{false, 0x10, "plain_xattr_pfx", [2]int{}},
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
// superblock fields: the newest of its incompatible features (a kernel
// mounts an image whatever compatible features it does not know, the
// superblock checksum among them), and 5.4 (EROFS out of staging) at
// least. Kernels before 6.4 take blocks of their page size only, and none
// takes blocks larger than its pages: for 4 KiB pages (x86, most arm64),
// smaller blocks need 6.4; larger blocks need pages as large, which the
// result says.
func MinKernel(s SuperInfo) string {
	k := [2]int{5, 4}
	newer := func(v [2]int) {
		if v[0] > k[0] || v[0] == k[0] && v[1] > k[1] {
			k = v
		}
	}
	for _, f := range features {
		if f.incompat && s.FeatureIncompat&f.bit != 0 {
			newer(f.kernel)
		}
	}
	if s.BlockSize < 4096 {
		newer([2]int{6, 4})
	}
	if s.FeatureIncompat&FeatureIncompatComprCfgs != 0 {
		// u1 is the bitmap of the algorithms the image uses.
		for a := AlgLZ4; a <= AlgZstd; a++ {
			if k := codecs[a]; k != nil && s.U1&(1<<a) != 0 {
				newer(k.kernel)
			}
		}
	}
	if s.BlockSize > 4096 {
		return fmt.Sprintf("%d.%d with pages of %d KiB (or larger, from 6.4)", k[0], k[1], s.BlockSize>>10)
	}
	return fmt.Sprintf("%d.%d", k[0], k[1])
}

// Kernel is a Linux version, major and minor.
type Kernel [2]int

// ParseKernel reads "X.Y" (a third component, "6.1.55", is ignored).
func ParseKernel(s string) (Kernel, error) {
	var k Kernel
	parts := strings.SplitN(s, ".", 3)
	if len(parts) < 2 {
		return k, fmt.Errorf("kernel version %q: want X.Y", s)
	}
	for i := range 2 {
		v, err := strconv.Atoi(parts[i])
		if err != nil || v < 0 {
			return k, fmt.Errorf("kernel version %q: want X.Y", s)
		}
		k[i] = v
	}
	return k, nil
}

func (k Kernel) String() string { return fmt.Sprintf("%d.%d", k[0], k[1]) }

// before reports whether k is set and older than v.
func (k Kernel) before(v Kernel) bool {
	return k != Kernel{} && (k[0] < v[0] || k[0] == v[0] && k[1] < v[1])
}

// The first kernels that mount what the options ask for (erofs-format.md §12.1).
var (
	kernelSmallBlocks = Kernel{6, 4}  // blocks smaller than 4 KiB
	kernelBigPcluster = Kernel{5, 13} // pclusters larger than a block
	kernelTailPacking = Kernel{5, 17}
	kernelFragments   = Kernel{6, 1}
	kernelChunked     = Kernel{5, 15} // sparse files become chunk-based
	kernelDevices     = Kernel{5, 16} // the device table
)

// checkKernel refuses options whose images the target kernel cannot mount,
// naming the feature and the kernel it needs.
func (o *Options) checkKernel(bs int) error {
	k := o.MinKernel
	refuse := func(what string, need Kernel) error {
		return fmt.Errorf("erofs: %s needs Linux %s, the image is for %s (--min-kernel)", what, need, k)
	}
	if bs < 4096 && k.before(kernelSmallBlocks) {
		return refuse(fmt.Sprintf("block size %d", bs), kernelSmallBlocks)
	}
	if (o.ChunkSize != 0 || o.Blob != nil) && k.before(kernelChunked) {
		return refuse("chunk-based files", kernelChunked)
	}
	if (len(o.Devices) > 0 || o.Blob != nil) && k.before(kernelDevices) {
		return refuse("extra devices (a blob, a tar index, a merged image)", kernelDevices)
	}
	c := o.Compression
	if c == nil {
		return nil
	}
	if kc := codecs[c.Algorithm]; kc != nil && k.before(kc.kernel) {
		return refuse(c.Algorithm.String()+" compression", kc.kernel)
	}
	if c.PclusterSize > bs && k.before(kernelBigPcluster) {
		return refuse(fmt.Sprintf("pcluster size %d (big pclusters)", c.PclusterSize), kernelBigPcluster)
	}
	if c.TailPacking && k.before(kernelTailPacking) {
		return refuse("tail packing (ztailpacking)", kernelTailPacking)
	}
	if c.Fragments && k.before(kernelFragments) {
		return refuse("fragments", kernelFragments)
	}
	if c.Dedupe && k.before(kernelFragments) {
		return refuse("extent dedupe", kernelFragments)
	}
	return nil
}
