// Package buildinfo says which build of Norn runs, from what the Go
// toolchain recorded in the binary: the module's version, the commit it
// was built from and whether the tree had changes, and the Go version.
package buildinfo

import (
	"runtime/debug"
	"sync"
)

// Info is one build's identity.
type Info struct {
	// Version is the module version ("v1.2.3"), or "(devel)" for a build
	// from a checkout.
	Version string `json:"version"`
	// Revision is the commit the binary was built from ("" if unknown),
	// Modified whether the tree had uncommitted changes then.
	Revision string `json:"revision,omitempty"`
	Modified bool   `json:"modified,omitempty"`
	// Time is the commit's time ("" if unknown).
	Time      string `json:"time,omitempty"`
	GoVersion string `json:"go_version"`
}

// Short is the version with the commit's first 12 characters, and
// "+dirty" for a modified tree: "(devel) 0123456789ab+dirty".
func (i Info) Short() string {
	s := i.Version
	if i.Revision != "" {
		s += " " + i.Revision[:min(12, len(i.Revision))]
		if i.Modified {
			s += "+dirty"
		}
	}
	return s
}

var read = sync.OnceValue(func() Info { return from(debug.ReadBuildInfo()) })

// Read returns this binary's build.
func Read() Info { return read() }

func from(bi *debug.BuildInfo, ok bool) Info {
	if !ok || bi == nil {
		return Info{Version: "(unknown)"}
	}
	i := Info{Version: bi.Main.Version, GoVersion: bi.GoVersion}
	if i.Version == "" {
		i.Version = "(devel)"
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			i.Revision = s.Value
		case "vcs.time":
			i.Time = s.Value
		case "vcs.modified":
			i.Modified = s.Value == "true"
		}
	}
	return i
}
