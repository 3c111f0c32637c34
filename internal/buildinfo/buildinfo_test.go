package buildinfo

import (
	"runtime/debug"
	"testing"
)

func TestFrom(t *testing.T) {
	for _, c := range []struct {
		name  string
		bi    *debug.BuildInfo
		ok    bool
		short string
	}{
		{"no build info", nil, false, "(unknown)"},
		{"a checkout without vcs", &debug.BuildInfo{GoVersion: "go1.26"}, true, "(devel)"},
		{"a release", &debug.BuildInfo{GoVersion: "go1.26", Main: debug.Module{Version: "v1.2.3"},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "0123456789abcdef0123"}}}, true, "v1.2.3 0123456789ab"},
		{"a modified tree", &debug.BuildInfo{GoVersion: "go1.26", Main: debug.Module{Version: "(devel)"},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "abc"}, {Key: "vcs.modified", Value: "true"}}}, true, "(devel) abc+dirty"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := from(c.bi, c.ok).Short(); got != c.short {
				t.Fatalf("Short() = %q, want %q", got, c.short)
			}
		})
	}
	if Read().GoVersion == "" {
		t.Fatal("the test binary's build info has no Go version")
	}
}
