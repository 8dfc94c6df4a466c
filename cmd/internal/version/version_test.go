package version

import (
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

func TestName(t *testing.T) {
	stamped := func(rev, modified string) *debug.BuildInfo {
		bi := &debug.BuildInfo{Main: debug.Module{Path: "github.com/ocierofs/ocierofs", Version: "(devel)"}}
		bi.Settings = append(bi.Settings, debug.BuildSetting{Key: "vcs", Value: "git"})
		if rev != "" {
			bi.Settings = append(bi.Settings, debug.BuildSetting{Key: "vcs.revision", Value: rev})
		}
		if modified != "" {
			bi.Settings = append(bi.Settings, debug.BuildSetting{Key: "vcs.modified", Value: modified})
		}
		return bi
	}
	installed := &debug.BuildInfo{Main: debug.Module{Path: "github.com/ocierofs/ocierofs", Version: "v0.4.0"}}
	for _, tc := range []struct {
		set  string
		bi   *debug.BuildInfo
		want string
	}{
		{"v0.4.0-3-g012dc40", stamped("012dc40aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "false"), "v0.4.0-3-g012dc40"},
		{"", installed, "v0.4.0"},
		{"", stamped("012dc40aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "false"), "012dc40aaaaa"},
		{"", stamped("012dc40aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "true"), "012dc40aaaaa+dirty"},
		{"", stamped("", ""), "devel"},
		{"", nil, "devel"},
	} {
		if got := name(tc.set, tc.bi); got != tc.want {
			t.Errorf("name(%q, %+v) = %q, want %q", tc.set, tc.bi, got, tc.want)
		}
	}
}

func TestString(t *testing.T) {
	s := String()
	if !strings.HasSuffix(s, " ("+runtime.Version()+" "+runtime.GOOS+"/"+runtime.GOARCH+")") {
		t.Errorf("String() = %q: no Go version and platform at its end", s)
	}
}
