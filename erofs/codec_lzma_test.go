package erofs

// The compressed round trip (zdata_test.go) covers LZMA at the fast levels
// 0 and 1, the default 6 and the densest 9.
func init() { zLevels[AlgLZMA] = []int{0, 1, 6, 9} }
