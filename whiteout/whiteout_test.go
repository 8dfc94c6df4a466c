package whiteout

import "testing"

func TestClassify(t *testing.T) {
	tr := NewTranslator(Overlay)
	cases := []struct {
		in     string
		kind   Kind
		target string
	}{
		{"a/b", Plain, "a/b"},
		{"a/.wh.b", Whiteout, "a/b"},
		{".wh.top", Whiteout, "top"},
		{"a/.wh..wh..opq", Opaque, "a"},
		{".wh..wh..opq", Opaque, ""},
		{"a/.wh..wh.plnk", Drop, ""},
		{"a/.whx", Plain, "a/.whx"},
	}
	for _, c := range cases {
		k, target, err := tr.Classify(c.in)
		if err != nil || k != c.kind || target != c.target {
			t.Errorf("Classify(%q) = %v %q %v, want %v %q", c.in, k, target, err, c.kind, c.target)
		}
	}
	if _, _, err := tr.Classify("a/.wh."); err == nil {
		t.Error("Classify(a/.wh.): want an error")
	}
	if _, _, err := tr.Classify("a/.wh.."); err == nil {
		t.Error("Classify(a/.wh..): want an error")
	}
}

func TestKeep(t *testing.T) {
	tr := NewTranslator(Keep)
	if k, p, _ := tr.Classify("a/.wh.b"); k != Plain || p != "a/.wh.b" {
		t.Errorf("keep: got %v %q", k, p)
	}
	if m, err := ParseMode("keep"); err != nil || m != Keep {
		t.Error("ParseMode(keep)")
	}
	if _, err := ParseMode("aufs"); err == nil {
		t.Error("ParseMode(aufs): want an error")
	}
}

// TestWhitedOut: the translator remembers what the layer whited out.
func TestWhitedOut(t *testing.T) {
	tr := NewTranslator(Overlay)
	if tr.AnyWhitedOut() {
		t.Fatal("a new translator has whited something out")
	}
	if _, _, err := tr.Classify("a/.wh.d"); err != nil {
		t.Fatal(err)
	}
	if !tr.AnyWhitedOut() || !tr.WhitedOut("a/d") || tr.WhitedOut("a") {
		t.Errorf("after a/.wh.d: any %v, a/d %v, a %v", tr.AnyWhitedOut(), tr.WhitedOut("a/d"), tr.WhitedOut("a"))
	}
	keep := NewTranslator(Keep)
	keep.Classify("a/.wh.d")
	if keep.AnyWhitedOut() {
		t.Error("keep mode whites nothing out")
	}
}
