package lz4

import (
	"encoding/binary"
	"math/bits"
	"unsafe"
)

// The fast parser keeps one position per hash of the next 5 bytes, in a
// table of 16-bit entries: 8192 of them fill 16 KiB, half a level-1 data
// cache, where a table of 32-bit positions would spill from it. An entry
// holds its position modulo 64 Ki; the distance back from a later position
// is the difference modulo 64 Ki, so it is never beyond MaxDistance, only
// possibly stale, and every candidate is verified anyway. The table is
// cleared for each block (16 KiB of stores, small beside a 4 KiB
// pcluster's work): its entries then never lie ahead of the position
// searched, so a candidate never falls before the input, and a block never
// depends on the blocks before it.
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
// destSize mode folded into its limits. The search reads src without bounds
// checks. Its positions stay in bounds as follows, with n = len(src):
//   - a search position ip is at most ipLimit <= n-mfLimit, so the 8 bytes
//     hashed there (and at ip-2 after a match, since then ip <= n-mfLimit
//     too) are inside src;
//   - a candidate lies in [0, ip): the table is cleared for each block and
//     receives only positions up to the one searched, so ip minus the
//     distance modulo 64 Ki is an earlier position of this block, or
//     position 0 for a cleared entry; its 4 bytes end before ip+4;
//   - a match is extended forwards while its 8 bytes at ip end by
//     n-lastLiterals, the candidate's end before them, and backwards while
//     both positions stay above anchor >= 0 and 0.
//
// It is long on purpose: the hot loop stays in one function so that the
// compiler keeps its state in registers.
func (e *Encoder) compressFast(dst, src []byte) (int, int) {
	t := e.fast
	clear(t[:])
	n := len(src)
	sn := n - mfLimit // last position where a match may start
	if sn < 1 {
		return finish(dst, 0, src, 0)
	}
	sp := unsafe.Pointer(unsafe.SliceData(src))
	matchLimit := n - lastLiterals
	di, anchor := 0, 0
	// ipLimit is the last search position whose literal run still fits the
	// budget together with its offset and the end reserve.
	ipLimit := min(sn, maxLiterals(len(dst)-seqReserve))
	// Position 0 is in every slot of the cleared table.
	ip := 1
	step0 := e.accel << skipTrigger
	for {
		var cand int
		ip, cand = fastSearch(t, sp, ip, ipLimit, step0)
		if cand < 0 {
			return finish(dst, di, src, anchor)
		}
		// Extend backwards over pending literals.
		for ip > anchor && cand > 0 && ld8(sp, ip-1) == ld8(sp, cand-1) {
			ip--
			cand--
		}
		// Extend forwards, 8 bytes at a time.
		end := ip + minMatch
		for a := cand + minMatch; ; {
			if end+8 > matchLimit {
				for end < matchLimit && ld8(sp, a) == ld8(sp, end) {
					a++
					end++
				}
				break
			}
			if x := ld64(sp, a) ^ ld64(sp, end); x != 0 {
				end += bits.TrailingZeros64(x) >> 3
				break
			}
			a += 8
			end += 8
		}

		// Write the sequence. The literals fit by ipLimit; only a long
		// match may need shortening.
		lits := ip - anchor
		mc := end - ip - minMatch
		if lits < 15 && mc < 15 && di+17 <= len(dst) && anchor+16 <= n {
			// A short sequence with room to spare: its token, 16
			// bytes from anchor whatever the run's length (one move
			// instead of a variable-length copy) and the offset all
			// land in dst[di:di+17] and read src[anchor:anchor+16].
			dp := unsafe.Add(unsafe.Pointer(unsafe.SliceData(dst)), di)
			*(*byte)(dp) = byte(lits<<4 | mc)
			*(*[16]byte)(unsafe.Add(dp, 1)) = *(*[16]byte)(unsafe.Add(sp, anchor))
			binary.LittleEndian.PutUint16((*[2]byte)(unsafe.Add(dp, 1+lits))[:], uint16(ip-cand))
			di += 3 + lits
		} else {
			tok := di
			if lits < 15 {
				dst[di] = byte(lits << 4)
				di++
			} else {
				dst[di] = 0xF0
				di = putExt(dst, di+1, lits)
			}
			di += copy(dst[di:], src[anchor:ip])
			binary.LittleEndian.PutUint16(dst[di:di+2], uint16(ip-cand))
			di += 2
			if mc < 15 {
				dst[tok] |= byte(mc)
			} else {
				if room := len(dst) - di - endReserve; extBytes(mc) > room {
					// Shorten the match to the length bytes that
					// fit; the budget is used up then.
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
		}
		anchor, ip = end, end
		if ip > sn {
			return finish(dst, di, src, anchor)
		}
		ipLimit = min(sn, anchor+maxLiterals(len(dst)-di-seqReserve))
		// Index a position inside the match, so that the next one can
		// refer to it.
		t[fastHash(ld64(sp, ip-2))] = uint16(ip - 2)
	}
}

// fastSearch looks for a match at ip or after, up to limit, and returns its
// start, the position it copies from and its end, or cand < 0 if there is
// none. One 8-byte load serves two positions; with no match at either, the
// step grows with the number of probes. The match is extended backwards
// down to anchor and forwards up to matchLimit. Its own function, so that
// its variables stay in registers.
func fastSearch(t *fastTable, sp unsafe.Pointer, ip, limit, probes int) (start, cand int) {
	for ; ; probes += 2 {
		if ip >= limit {
			if ip > limit {
				return ip, -1
			}
			// The last position, alone.
			u := ld64(sp, ip)
			d := uint16(ip) - t[fastHash(u)]
			if d == 0 || ld32(sp, ip-int(d)) != uint32(u) {
				return ip, -1
			}
			cand = ip - int(d)
			break
		}
		u := ld64(sp, ip)
		h0, h1 := fastHash(u), fastHash(u>>8)
		d0 := uint16(ip) - t[h0]
		d1 := uint16(ip+1) - t[h1]
		t[h0] = uint16(ip)
		t[h1] = uint16(ip + 1)
		if d0 != 0 && ld32(sp, ip-int(d0)) == uint32(u) {
			cand = ip - int(d0)
			break
		}
		if d1 != 0 && ld32(sp, ip+1-int(d1)) == uint32(u>>8) {
			ip++
			cand = ip - int(d1)
			break
		}
		ip += 1 + probes>>skipTrigger
	}
	return ip, cand
}
