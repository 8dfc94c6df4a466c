// Package mountinfo reads the fields of /proc/self/mountinfo, whose paths
// the kernel writes with octal escapes (\040 for a space).
package mountinfo

import (
	"strconv"
	"strings"
)

// Unescape undoes the octal escapes of a mountinfo field.
func Unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
