package mountinfo

import "testing"

func TestUnescape(t *testing.T) {
	for in, want := range map[string]string{
		"/a/b": "/a/b", `/a\040b`: "/a b", `/t\011x\134y`: "/t\tx\\y", `/bad\9`: `/bad\9`, `/end\04`: `/end\04`,
	} {
		if got := Unescape(in); got != want {
			t.Errorf("Unescape(%q) = %q, want %q", in, got, want)
		}
	}
}
