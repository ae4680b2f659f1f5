package mcpgateway

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestToolName(t *testing.T) {
	long := strings.Repeat("a", 80)
	tests := []struct {
		prefix, tool, want string
	}{
		{"ev", "echo", "ev_echo"},
		{"ev", "get-sum", "ev_get-sum"},
		{"github", "create_issue", "github_create_issue"},
		{"fs", "read.file", "fs_read_file"},
		{"fs", "read file/ä", "fs_read_file__"},
		{"x", "搜索", "x___"},
		{"ev", long, "ev_" + strings.Repeat("a", 52) + "_" + CleanName("ev_"+long, 64)[56:]},
	}
	for _, tt := range tests {
		got := ToolName(tt.prefix, tt.tool)
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("ToolName(%q, %q) (-want +got):\n%s", tt.prefix, tt.tool, diff)
		}
		if !toolNameRE.MatchString(got) {
			t.Errorf("ToolName(%q, %q) = %q does not match %s", tt.prefix, tt.tool, got, toolNameRE)
		}
	}
}

func TestCleanNameClamp(t *testing.T) {
	a := CleanName(strings.Repeat("x", 70)+"one", 64)
	b := CleanName(strings.Repeat("x", 70)+"two", 64)
	if len(a) != 64 || len(b) != 64 {
		t.Fatalf("clamped names %q (%d) and %q (%d) should be 64 long", a, len(a), b, len(b))
	}
	if a == b {
		t.Fatalf("two long names with the same head clamp to the same %q", a)
	}
	if a != CleanName(strings.Repeat("x", 70)+"one", 64) {
		t.Fatal("clamping is not deterministic")
	}
	if !strings.HasPrefix(a, strings.Repeat("x", 55)+"_") {
		t.Fatalf("clamped name %q should keep a readable head", a)
	}
	if got := CleanName("", 64); got != "_" {
		t.Fatalf("CleanName(\"\") = %q, want _", got)
	}
}

func TestFilter(t *testing.T) {
	tests := []struct {
		name             string
		include, exclude []string
		tool             string
		want             bool
	}{
		{"no filters", nil, nil, "echo", true},
		{"included", []string{"get-*"}, nil, "get-sum", true},
		{"not included", []string{"get-*"}, nil, "echo", false},
		{"excluded", nil, []string{"trigger-*"}, "trigger-sampling-request", false},
		{"included then excluded", []string{"*"}, []string{"echo"}, "echo", false},
		{"class", []string{"[eg]*"}, nil, "get-env", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, why := filter{include: tt.include, exclude: tt.exclude}.allows(tt.tool)
			if got != tt.want {
				t.Fatalf("allows(%q) = %v (%s), want %v", tt.tool, got, why, tt.want)
			}
			if !got && why == "" {
				t.Fatal("a filtered tool needs a reason")
			}
		})
	}
	if err := validatePatterns([]string{"[a-"}); err == nil {
		t.Fatal("a malformed glob was accepted")
	}
}

func FuzzCleanName(f *testing.F) {
	for _, s := range []string{"", "echo", "get-sum", "a.b.c", "搜索", strings.Repeat("z", 100), "\x00\xff", "ev_ok-Name_09"} {
		f.Add(s, 64)
		f.Add(s, 32)
	}
	f.Add("abc", 1)
	f.Fuzz(func(t *testing.T, raw string, max int) {
		if max < 1 || max > 256 {
			t.Skip()
		}
		got := CleanName(raw, max)
		if got == "" || len(got) > max {
			t.Fatalf("CleanName(%q, %d) = %q: length %d out of 1..%d", raw, max, got, len(got), max)
		}
		for _, r := range got {
			if !validName(r) {
				t.Fatalf("CleanName(%q, %d) = %q contains %q", raw, max, got, r)
			}
		}
		if got != CleanName(raw, max) {
			t.Fatalf("CleanName(%q, %d) is not deterministic", raw, max)
		}
		valid := raw != "" && len(raw) <= max
		for _, r := range raw {
			valid = valid && validName(r)
		}
		if valid && got != raw {
			t.Fatalf("CleanName changed the valid name %q to %q", raw, got)
		}
		if max >= 16 && CleanName(got, max) != got {
			t.Fatalf("CleanName is not idempotent on %q: %q then %q", raw, got, CleanName(got, max))
		}
	})
}
