package erofs

func init() { zLevels[AlgDeflate] = []int{1, 6, 9} }
