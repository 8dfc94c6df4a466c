package lz4

import "math/bits"

// The fast parser keeps one position per hash of the next 5 bytes.
const (
	fastHashLog = 14
	// skipTrigger: after 2^skipTrigger probes without a match the step grows
	// by one byte, so incompressible data is crossed quickly.
	skipTrigger = 5
)

func fastHash(u uint64) uint32 {
	// Multiplicative hash of the low 5 bytes.
	return uint32(((u << 24) * 0x9E3779B97F4A7C15) >> (64 - fastHashLog))
}

// compressFast is the greedy parse of LevelFast with the budget checks of
// destSize mode folded into its limits.
func (e *Encoder) compressFast(dst, src []byte) (int, int) {
	t := e.fast
	off := e.off
	n := len(src)
	sn := n - mfLimit // last position where a match may start
	if sn < 1 {
		return finish(dst, 0, src, 0)
	}
	matchLimit := n - lastLiterals
	di, anchor := 0, 0
	// ipLimit is the last search position whose literal run still fits the
	// budget together with its offset and the end reserve.
	ipLimit := min(sn, maxLiterals(len(dst)-seqReserve))
	t[fastHash(le64(src, 0))] = uint32(off)
	ip := 1
	step0 := e.accel << skipTrigger
	for {
		// Find a 4-byte match. One 8-byte load serves two positions, ip
		// and ip+1; with no match at either, the step grows with the
		// number of probes since the last match.
		var cand int
		probes := step0
		for {
			if ip > ipLimit {
				return finish(dst, di, src, anchor)
			}
			u := le64(src, ip)
			h0, h1 := fastHash(u), fastHash(u>>8)
			c0, c1 := int(t[h0])-off, int(t[h1])-off
			t[h0] = uint32(ip + off)
			if ip-c0 <= MaxDistance && le32(src, c0) == uint32(u) {
				cand = c0
				break
			}
			if ip < ipLimit {
				t[h1] = uint32(ip + 1 + off)
				if ip+1-c1 <= MaxDistance && le32(src, c1) == uint32(u>>8) {
					cand = c1
					ip++
					break
				}
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
		end, c := ip+minMatch, cand+minMatch
		for end+8 <= matchLimit {
			if x := le64(src, end) ^ le64(src, c); x != 0 {
				end += bits.TrailingZeros64(x) >> 3
				goto extended
			}
			end += 8
			c += 8
		}
		for end < matchLimit && src[end] == src[c] {
			end++
			c++
		}
	extended:
		// Write the sequence. The literals fit by ipLimit; only a long
		// match may need shortening.
		lits := ip - anchor
		mc := end - ip - minMatch
		tok := di
		if lits < 15 {
			dst[di] = byte(lits << 4)
			di++
			if di+16 <= len(dst) && anchor+16 <= n {
				copy(dst[di:di+16], src[anchor:anchor+16])
			} else {
				copy(dst[di:], src[anchor:ip])
			}
			di += lits
		} else {
			dst[di] = 0xF0
			di = putExt(dst, di+1, lits)
			di += copy(dst[di:], src[anchor:ip])
		}
		offset := ip - cand
		dst[di] = byte(offset)
		dst[di+1] = byte(offset >> 8)
		di += 2
		full := false
		if mc >= 15 {
			if room := len(dst) - di - endReserve; extBytes(mc) > room {
				// Shorten the match to the length bytes that fit; the
				// budget is used up then.
				mc = maxMatchLen(room) - minMatch
				end = ip + minMatch + mc
				full = true
			}
		}
		if mc < 15 {
			dst[tok] |= byte(mc)
		} else {
			dst[tok] |= 0x0F
			di = putExt(dst, di, mc)
		}
		if full {
			return finish(dst, di, src, end)
		}
		anchor, ip = end, end
		if ip > sn {
			return finish(dst, di, src, anchor)
		}
		ipLimit = min(sn, anchor+maxLiterals(len(dst)-di-seqReserve))
		// Index a position inside the match so the next one can refer to it.
		t[fastHash(le64(src, ip-2))] = uint32(ip - 2 + off)
	}
}
