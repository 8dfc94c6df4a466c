// Package roundtrip is the kernel round-trip harness of the conversion
// tests: it loop-mounts EROFS images, extracts tars with GNU tar as the
// reference, maps OCI whiteouts in an extracted tree to their overlayfs
// form, and reads images with the independent checkers (go-erofs,
// fsck.erofs). Tests only: nothing in the build imports it. Under go test
// -short, RequireMount skips and Fsck declines: the fast tier mounts nothing
// and needs no erofs-utils.
//
//	roundtrip.RequireMount(t)
//	mnt := roundtrip.Mount(t, "layer.erofs")
//	got, _ := fstree.FromDir(mnt)
//	ref := t.TempDir()
//	roundtrip.ExtractGNU(t, "layer.tar", ref)
//	roundtrip.MapWhiteouts(t, ref, want)
package roundtrip
