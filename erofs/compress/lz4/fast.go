package lz4

import (
	"encoding/binary"
	"math/bits"
)

// The fast parser keeps one position per hash of the next 5 bytes, in a
// table of 16-bit entries: 8192 of them fill 16 KiB, half a level-1 data
// cache, where a table of 32-bit positions would spill from it. An entry
// holds its position modulo 64 Ki; the distance back from a later position
// is the difference modulo 64 Ki, so it is never beyond MaxDistance, only
// possibly stale, and every candidate is verified anyway. The table is
// cleared for each block (16 KiB of stores, about 1% of a 4 KiB pcluster's
// work): its entries then never lie ahead of the position searched, so a
// candidate never falls before the input, and a block never depends on the
// blocks before it.
const (
	fastHashLog = 13
	// skipTrigger: after 2^skipTrigger probes without a match the step grows
	// by one byte, so incompressible data is crossed quickly.
	skipTrigger = 5
)

type fastTable [1 << fastHashLog]uint16

func fastHash(u uint64) uint32 {
	// Multiplicative hash of the low 5 bytes.
	return uint32(((u << 24) * 0x9E3779B97F4A7C15) >> (64 - fastHashLog))
}

// compressFast is the greedy parse of LevelFast with the budget checks of
// destSize mode folded into its limits.
func (e *Encoder) compressFast(dst, src []byte) (int, int) {
	t := e.fast
	clear(t[:])
	n := len(src)
	sn := n - mfLimit // last position where a match may start
	if sn < 1 {
		return finish(dst, 0, src, 0)
	}
	di, anchor := 0, 0
	// ipLimit is the last search position whose literal run still fits the
	// budget together with its offset and the end reserve.
	ipLimit := min(sn, maxLiterals(len(dst)-seqReserve))
	// Position 0 is in every slot of the cleared table.
	ip := 1
	step0 := e.accel << skipTrigger
	for {
		var cand, end int
		ip, cand, end = fastSearch(t, src, anchor, ip, ipLimit, step0)
		if cand < 0 {
			return finish(dst, di, src, anchor)
		}
		// Write the sequence. The literals fit by ipLimit; only a long
		// match may need shortening.
		lits := ip - anchor
		mc := end - ip - minMatch
		tok := di
		if lits < 15 && di+17 <= len(dst) && anchor+16 <= n {
			// Copy 16 bytes whatever the run's length: one move
			// instead of a variable-length copy.
			dst[di] = byte(lits << 4)
			*(*[16]byte)(dst[di+1 : di+17]) = *(*[16]byte)(src[anchor : anchor+16])
			di += 1 + lits
		} else {
			if lits < 15 {
				dst[di] = byte(lits << 4)
				di++
			} else {
				dst[di] = 0xF0
				di = putExt(dst, di+1, lits)
			}
			di += copy(dst[di:], src[anchor:ip])
		}
		binary.LittleEndian.PutUint16(dst[di:di+2], uint16(ip-cand))
		di += 2
		if mc < 15 {
			dst[tok] |= byte(mc)
		} else {
			if room := len(dst) - di - endReserve; extBytes(mc) > room {
				// Shorten the match to the length bytes that fit; the
				// budget is used up then.
				mc = maxMatchLen(room) - minMatch
				if mc < 15 {
					dst[tok] |= byte(mc)
				} else {
					dst[tok] |= 0x0F
					di = putExt(dst, di, mc)
				}
				return finish(dst, di, src, ip+minMatch+mc)
			}
			dst[tok] |= 0x0F
			di = putExt(dst, di, mc)
		}
		anchor, ip = end, end
		if ip > sn {
			return finish(dst, di, src, anchor)
		}
		ipLimit = min(sn, anchor+maxLiterals(len(dst)-di-seqReserve))
	}
}

// fastSearch looks for a match at ip or after, up to limit, and returns its
// start, the position it copies from and its end, or cand < 0 if there is
// none. One 8-byte load serves two positions; with no match at either, the
// step grows with the number of probes. The match is extended backwards
// down to anchor and forwards up to the last literals. Its own function, so
// that its variables stay in registers.
func fastSearch(t *fastTable, src []byte, anchor, ip, limit, probes int) (start, cand, end int) {
	if anchor > 0 {
		// Index a position inside the last match, so that the next
		// one can refer to it.
		t[fastHash(le64(src, ip-2))] = uint16(ip - 2)
	}
	for {
		if ip >= limit {
			if ip > limit {
				return ip, -1, 0
			}
			// The last position, alone.
			u := le64(src, ip)
			h := fastHash(u)
			d := uint16(ip) - t[h]
			if d == 0 || le32(src, ip-int(d)) != uint32(u) {
				return ip, -1, 0
			}
			cand = ip - int(d)
			break
		}
		u := le64(src, ip)
		h0, h1 := fastHash(u), fastHash(u>>8)
		d0 := uint16(ip) - t[h0]
		d1 := uint16(ip+1) - t[h1]
		t[h0] = uint16(ip)
		t[h1] = uint16(ip + 1)
		if d0 != 0 && le32(src, ip-int(d0)) == uint32(u) {
			cand = ip - int(d0)
			break
		}
		if d1 != 0 && le32(src, ip+1-int(d1)) == uint32(u>>8) {
			ip++
			cand = ip - int(d1)
			break
		}
		ip += 1 + probes>>skipTrigger
		probes += 2
	}
	// Extend backwards over pending literals.
	for ip > anchor && cand > 0 && src[ip-1] == src[cand-1] {
		ip--
		cand--
	}
	// Extend forwards, 8 bytes at a time.
	limit = len(src) - lastLiterals
	a, b := cand+minMatch, ip+minMatch
	for b+8 <= limit {
		if x := le64(src, a) ^ le64(src, b); x != 0 {
			return ip, cand, b + bits.TrailingZeros64(x)>>3
		}
		a += 8
		b += 8
	}
	for b < limit && src[a] == src[b] {
		a++
		b++
	}
	return ip, cand, b
}

// matchLen counts the bytes at a that equal those at b (a < b), up to limit.
func matchLen(src []byte, a, b, limit int) int {
	start := b
	for b+8 <= limit {
		if x := le64(src, a) ^ le64(src, b); x != 0 {
			return b - start + bits.TrailingZeros64(x)>>3
		}
		a += 8
		b += 8
	}
	for b < limit && src[a] == src[b] {
		a++
		b++
	}
	return b - start
}
