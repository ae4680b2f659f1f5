package toolmedia

import "testing"

func TestDescribe(t *testing.T) {
	for _, tc := range []struct {
		typ, mime, uri, text string
		size                 int64
		omitted, want        string
	}{
		{"image", "image/png", "", "", 4033, "", "[image image/png 4033 bytes]"},
		{"audio", "audio/wav", "", "", 9, "over the cap", "[audio audio/wav 9 bytes; not passed on: over the cap]"},
		{"resource", "text/plain", "file:///a", "hello", 5, "", "[resource text/plain file:///a 5 bytes] hello"},
		{"resource_link", "", "https://x", "a link", 0, "", "[resource_link https://x] a link"},
	} {
		if got := Describe(tc.typ, tc.mime, tc.uri, tc.text, tc.size, tc.omitted); got != tc.want {
			t.Errorf("Describe(%q, …) = %q, want %q", tc.typ, got, tc.want)
		}
	}
}
