package erofs

func init() { zLevels[AlgZstd] = []int{1, 3, 9} }
