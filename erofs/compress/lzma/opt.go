package lzma

type optimum struct{}

func (e *Encoder) parseOptimal() int { return e.parseFast() }
