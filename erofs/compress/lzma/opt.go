package lzma

// The optimal parser (levels 4–9) prices every way through a window of up
// to optWindow input bytes: at each position a literal (matched after a
// match), a short rep, every length of every repeated distance and every
// length of every match the finder returns, each priced with the adaptive
// model in the state (and repeated distances) of the cheapest path to that
// position. The cheapest path through the window is then coded. A match or
// repeated match of the nice length or more ends the window early and is
// taken as it is, as xz does: long matches leave little to choose.

const optWindow = 1024

type optNode struct {
	price  uint32
	from   int32 // node the cheapest path comes from
	back   int32 // its last symbol: -1 literal, 0–3 rep index, 4+ dist+4
	length int32
	state  uint32
	reps   [numReps]uint32
}

// litRep0 marks an edge of two symbols: a literal, then a match of
// length-1 bytes at rep0.
const litRep0 = -2

type optStep struct {
	back, length int32
}

type optimum struct {
	nodes  [optWindow + matchLenMax + 1]optNode
	path   [optWindow + 1]optStep
	prices prices
	stale  int // bytes coded since the price tables were refreshed
}

// parseOptimal codes src until it ends or the budget is full and returns
// the bytes consumed.
func (e *Encoder) parseOptimal() int {
	o := e.op
	src := e.src
	o.stale = refreshEvery
	pos, check := 0, checkFirst
	for pos < len(src) {
		for pos >= check {
			if e.incompressible(pos) {
				return pos
			}
			check = nextCheck(check)
		}
		if o.stale >= refreshEvery {
			o.prices.refresh(&e.p)
			o.stale = 0
		}
		n, last := e.optWindow(pos)
		start := pos
		for _, s := range o.path[:n] {
			if !e.emit(pos, int(s.back), int(s.length)) {
				return pos
			}
			pos += int(s.length)
		}
		if last.length > 0 {
			if !e.emit(pos, int(last.back), int(last.length)) {
				return pos
			}
			pos += int(last.length)
			e.mf.skip(pos)
		}
		o.stale += pos - start
	}
	return pos
}

// optWindow finds the cheapest path from p0 and stores it in o.path; it
// returns the number of steps and, when the window ended at a long match,
// that match (length 0 otherwise), to be coded after the path.
//
// It is long on purpose: the hot loop stays in one function so that the
// compiler keeps its state in registers.
func (e *Encoder) optWindow(p0 int) (int, optStep) {
	o := e.op
	src := e.src
	nodes := o.nodes[:]
	ms := e.ms[0][:]
	nice := e.lv.nice
	limit := min(len(src)-p0, optWindow)
	nodes[0] = optNode{state: e.state, reps: e.reps}
	end := 0 // nodes[:end+1] are initialized
	relax := func(j int, price uint32, from int, back int, length int) {
		for end < j {
			end++
			nodes[end].price = infinity
		}
		if price < nodes[j].price {
			nodes[j] = optNode{price: price, from: int32(from), back: int32(back), length: int32(length)}
		}
	}
	var last optStep
	i := 0
	for ; i < limit; i++ {
		nd := &nodes[i]
		if i > 0 {
			nd.state, nd.reps = after(&nodes[nd.from], nd.back, nd.length)
		}
		pos := p0 + i
		nm := e.mf.find(pos, ms)
		st, reps := nd.state, nd.reps
		ps := uint32(pos) & e.pbMask
		avail := len(src) - pos
		lim := min(avail, matchLenMax)

		// Repeated distances: their lengths, and a long one ends the
		// window.
		var repLens [numReps]int
		bestRep := 0
		if avail >= 2 {
			for j := range numReps {
				d := int(reps[j]) + 1
				if d > pos || src[pos-d] != src[pos] || src[pos-d+1] != src[pos+1] {
					continue
				}
				repLens[j] = extend(src, pos-d, pos, 2, lim)
				if repLens[j] > repLens[bestRep] {
					bestRep = j
				}
			}
		}
		if repLens[bestRep] >= nice {
			last = optStep{int32(bestRep), int32(repLens[bestRep])}
			break
		}
		if nm > 0 && ms[nm-1].length >= nice {
			last = optStep{int32(ms[nm-1].dist) + numReps, int32(ms[nm-1].length)}
			break
		}

		isMatch := &e.p.isMatch[st<<posBitsMax|ps]
		// Literal.
		var mbyte uint32
		if st >= 7 {
			mbyte = uint32(src[pos-int(reps[0])-1])
		}
		lit := nd.price + bitPrice(*isMatch, 0) + literalPrice(e.litProbs(pos), uint32(src[pos]), st >= 7, mbyte)
		relax(i+1, lit, i, -1, 1)
		// A literal and then a match at rep0: the pair is one edge, so
		// the match is priced in the state after the literal.
		if d := int(reps[0]) + 1; d <= pos && avail >= 3 && src[pos-d] != src[pos] &&
			src[pos+1-d] == src[pos+1] && src[pos+2-d] == src[pos+2] {
			l2 := extend(src, pos+1-d, pos+1, 2, min(avail-1, matchLenMax))
			st2, ps2 := stateLiteral(st), uint32(pos+1)&e.pbMask
			price := lit + bitPrice(e.p.isMatch[st2<<posBitsMax|ps2], 1) + bitPrice(e.p.isRep[st2], 1) +
				e.repIndexPrice(0, st2, ps2) + o.prices.repLen[ps2][l2-matchLenMin]
			relax(i+1+l2, price, i, litRep0, 1+l2)
		}

		matchBase := nd.price + bitPrice(*isMatch, 1)
		repBase := matchBase + bitPrice(e.p.isRep[st], 1)
		// Short rep: one byte at rep0.
		if d := int(reps[0]) + 1; d <= pos && src[pos-d] == src[pos] {
			price := repBase + bitPrice(e.p.isRepG0[st], 0) + bitPrice(e.p.isRep0Long[st<<posBitsMax|ps], 0)
			relax(i+1, price, i, 0, 1)
		}
		for j, L := range repLens {
			if L < 2 {
				continue
			}
			price := repBase + e.repIndexPrice(j, st, ps)
			lens := &o.prices.repLen[ps]
			for l := 2; l <= L; l++ {
				relax(i+l, price+lens[l-matchLenMin], i, j, l)
			}
		}
		// Matches: each length priced with the nearest match that long.
		// The distance's price depends on the length only below 5.
		if nm > 0 {
			price := matchBase + bitPrice(e.p.isRep[st], 0)
			lens := &o.prices.matchLen[ps]
			if top := i + ms[nm-1].length; top > end {
				for end < top {
					end++
					nodes[end].price = infinity
				}
			}
			l := 2
			for _, m := range ms[:nm] {
				far := price + o.prices.distPrice(m.dist, distStates+matchLenMin)
				for ; l <= m.length; l++ {
					p := far
					if l < distStates+matchLenMin {
						p = price + o.prices.distPrice(m.dist, l)
					}
					p += lens[l-matchLenMin]
					if nx := &nodes[i+l]; p < nx.price {
						*nx = optNode{price: p, from: int32(i), back: int32(m.dist) + numReps, length: int32(l)}
					}
				}
			}
		}
	}
	// Walk back from node i to node 0.
	n := 0
	for j := i; j > 0; j = int(nodes[j].from) {
		n++
		if nodes[j].back == litRep0 {
			n++
		}
	}
	for j, k := i, n; j > 0; j = int(nodes[j].from) {
		nd := &nodes[j]
		if nd.back == litRep0 {
			k -= 2
			o.path[k] = optStep{-1, 1}
			o.path[k+1] = optStep{0, nd.length - 1}
			continue
		}
		k--
		o.path[k] = optStep{nd.back, nd.length}
	}
	return n, last
}

// after returns the state and repeated distances after symbol (back,
// length) from node f.
func after(f *optNode, back, length int32) (uint32, [numReps]uint32) {
	st, reps := f.state, f.reps
	switch {
	case back == litRep0:
		return stateRep(stateLiteral(st)), reps
	case back < 0:
		return stateLiteral(st), reps
	case back < numReps:
		if length == 1 {
			return stateShortRep(st), reps
		}
		d := reps[back]
		copy(reps[1:back+1], reps[:back])
		reps[0] = d
		return stateRep(st), reps
	}
	return stateMatch(st), [numReps]uint32{uint32(back - numReps), reps[0], reps[1], reps[2]}
}

// repIndexPrice is the price of choosing repeated distance j (a long rep
// for j = 0).
func (e *Encoder) repIndexPrice(j int, st, ps uint32) uint32 {
	p := &e.p
	if j == 0 {
		return bitPrice(p.isRepG0[st], 0) + bitPrice(p.isRep0Long[st<<posBitsMax|ps], 1)
	}
	price := bitPrice(p.isRepG0[st], 1)
	if j == 1 {
		return price + bitPrice(p.isRepG1[st], 0)
	}
	return price + bitPrice(p.isRepG1[st], 1) + bitPrice(p.isRepG2[st], uint32(j-2))
}
