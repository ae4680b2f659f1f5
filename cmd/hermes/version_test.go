package main

import (
	"runtime/debug"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestBuildInfoFrom(t *testing.T) {
	vcs := []debug.BuildSetting{
		{Key: "-buildmode", Value: "exe"},
		{Key: "vcs", Value: "git"},
		{Key: "vcs.revision", Value: "c326128e6f0ab1e3c0f1f8a0e6d4b1c2a3b4c5d6"},
		{Key: "vcs.time", Value: "2026-10-20T12:00:00Z"},
		{Key: "vcs.modified", Value: "true"},
	}
	for _, tc := range []struct {
		name     string
		bi       *debug.BuildInfo
		override string
		want     buildInfo
		revision string
	}{
		{"go build in a checkout", &debug.BuildInfo{Main: debug.Module{Version: "v0.0.0-20261020120000-c326128e6f0a+dirty"}, Settings: vcs}, "",
			buildInfo{Version: "v0.0.0-20261020120000-c326128e6f0a+dirty", Revision: "c326128e6f0ab1e3c0f1f8a0e6d4b1c2a3b4c5d6", Time: "2026-10-20T12:00:00Z", Modified: true},
			"c326128e6f0ab1e3c0f1f8a0e6d4b1c2a3b4c5d6-modified"},
		{"-X main.version", &debug.BuildInfo{Main: debug.Module{Version: "v1.0.0"}}, "v1.2.3", buildInfo{Version: "v1.2.3"}, "unknown"},
		{"go run", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "", buildInfo{Version: "dev"}, "unknown"},
		{"no build info", nil, "", buildInfo{Version: "dev"}, "unknown"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := buildInfoFrom(tc.bi, tc.override)
			if got.GoVersion == "" || got.Platform == "" {
				t.Errorf("no Go version or platform: %+v", got)
			}
			if diff := cmp.Diff(tc.want, got, cmpopts.IgnoreFields(buildInfo{}, "GoVersion", "Platform")); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			if r := got.shortRevision(); r != tc.revision {
				t.Errorf("revision %q, want %q", r, tc.revision)
			}
		})
	}
}
