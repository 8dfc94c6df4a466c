// Package convtest holds the helpers that the tests of convert and of its
// packages (cache, check, mkfs, merge …) share: tars and image layers
// built entry by entry, test images, the trees of directories and tars
// compared with fstree, and the mount of a converted image's layers
// stacked with overlayfs, compared with umoci's unpacking of its source.
//
// Every helper takes the test's testing.TB and fails the test on error.
package convtest
