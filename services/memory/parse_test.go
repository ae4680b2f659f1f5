package memory

import (
	"errors"
	"math"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
)

func TestParseExtraction(t *testing.T) {
	one := []rawCandidate{{Type: "preference", Content: "用户喜欢川菜", Confidence: 0.9}}
	tests := []struct {
		name  string
		reply string
		want  []rawCandidate
		err   error
	}{
		{"plain", `{"memories":[{"type":"preference","content":"用户喜欢川菜","confidence":0.9}]}`, one, nil},
		{"code fence and chatter", "Here you go:\n```json\n{\"memories\":[{\"type\":\"Preference\",\"content\":\" 用户喜欢川菜 \",\"confidence\":0.9}]}\n```\nAnything else?", one, nil},
		{"braces in chatter before", `I think {this} is it: {"memories":[{"type":"preference","content":"用户喜欢川菜","confidence":0.9}]}`, one, nil},
		{"bare list", `[{"type":"preference","content":"用户喜欢川菜","confidence":0.9}]`, one, nil},
		{"string and percentage confidence", `{"memories":[{"type":"preference","content":"用户喜欢川菜","confidence":"90%"}]}`, one, nil},
		{"confidence out of 100", `{"memories":[{"type":"preference","content":"用户喜欢川菜","confidence":90}]}`, one, nil},
		{"empty", `{"memories":[]}`, []rawCandidate{}, nil},
		{"null", `{"memories":null}`, nil, nil},
		{"attributes and keywords", `{"memories":[{"type":"fact","content":"c","confidence":1,"subject":"s","attributes":{"n":3,"b":true,"x":{"y":1},"e":""},"keywords":"订位，订餐厅、聚餐"}]}`,
			[]rawCandidate{{Type: "fact", Content: "c", Confidence: 1, Subject: "s", Attributes: map[string]string{"n": "3", "b": "true"}, Keywords: []string{"订位", "订餐厅", "聚餐"}}}, nil},
		{"braces inside strings", `{"memories":[{"type":"fact","content":"uses {curly} and \"quotes\" ]","confidence":0.85}]}`,
			[]rawCandidate{{Type: "fact", Content: `uses {curly} and "quotes" ]`, Confidence: 0.85}}, nil},
		{"bad confidence", `{"memories":[{"type":"fact","content":"c","confidence":"high"}]}`,
			[]rawCandidate{{Type: "fact", Content: "c", Invalid: `confidence "high" is not a number`}}, nil},
		{"missing content", `{"memories":[{"type":"fact","confidence":0.9}]}`, []rawCandidate{{Type: "fact", Confidence: 0.9, Invalid: "no content"}}, nil},
		{"not JSON", "I'm sorry, I can't help with that.", nil, errNotJSON},
		{"truncated", `{"memories":[{"type":"fact","content":"c"`, nil, errNotJSON},
		{"wrong shape", `{"facts":["a"]}`, nil, errNotJSON},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseExtraction(tc.reply)
			if !errors.Is(err, tc.err) {
				t.Fatalf("error = %v, want %v", err, tc.err)
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("candidates (-want +got):\n%s", d)
			}
		})
	}
}

// FuzzParseExtraction: any reply parses without panicking, and what it returns is usable as
// is: confidences in [0, 1], usable items with content and type, valid UTF-8 where the input was.
func FuzzParseExtraction(f *testing.F) {
	for _, s := range []string{
		`{"memories":[{"type":"preference","content":"用户喜欢川菜","confidence":0.9,"attributes":{"a":"b"}}]}`,
		"```json\n{\"memories\":[]}\n```",
		`[{"type":"fact","content":"x","confidence":"80%"}]`,
		`{"memories":[{"type":"fact","content":"x","confidence":1e309}]}`,
		`{{{{[[[["`, `{"memories":[{"content":"\u0000","confidence":-1}]}`, "", "}{][",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, reply string) {
		got, err := parseExtraction(reply)
		if err != nil && !errors.Is(err, errNotJSON) {
			t.Fatalf("unexpected error %v", err)
		}
		for _, c := range got {
			if math.IsNaN(c.Confidence) || c.Confidence < 0 || c.Confidence > 1 {
				t.Errorf("confidence %v", c.Confidence)
			}
			if c.Invalid == "" && (c.Content == "" || c.Type == "") {
				t.Errorf("usable candidate without content or type: %+v", c)
			}
			if utf8.ValidString(reply) && !utf8.ValidString(c.Content) {
				t.Errorf("content %q is not UTF-8", c.Content)
			}
		}
	})
}

// FuzzDecodeEntry: a corrupt stored record is an error, never a panic; a record that decodes
// re-encodes to one that decodes to the same entry (-0 may come back as 0: the sparse form
// keeps only non-zero components).
func FuzzDecodeEntry(f *testing.F) {
	e := Entry{Memory: testMemory("u", newID(), pref, "用户喜欢川菜", timeZero()), Vector: vecOf(1, 2, 0.5)}
	good, _ := encodeEntry(e)
	f.Add(good)
	dense, _ := encodeEntry(Entry{Memory: e.Memory, Vector: []float32{0.5, 0.5, 0.5, 0.5}})
	f.Add(dense)
	f.Add([]byte{})
	f.Add([]byte{1, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := decodeEntry(b)
		if err != nil {
			return
		}
		again, err := encodeEntry(got)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		back, err := decodeEntry(again)
		if err != nil {
			t.Fatalf("decode of a re-encoded entry: %v", err)
		}
		if !proto.Equal(back.Memory, got.Memory) {
			t.Fatalf("memory changed in a round trip: %v then %v", got.Memory, back.Memory)
		}
		if len(back.Vector) != len(got.Vector) {
			t.Fatalf("vector of %d components came back with %d", len(got.Vector), len(back.Vector))
		}
		for i, v := range got.Vector {
			if w := back.Vector[i]; math.Float32bits(v) != math.Float32bits(w) && !(v == 0 && w == 0) {
				t.Fatalf("component %d changed from %v to %v", i, v, w)
			}
		}
	})
}

// FuzzPageToken: a page token from a client is either rejected or names a valid position.
func FuzzPageToken(f *testing.F) {
	f.Add(pageCursor{createdMs: 1700000000000, id: newID()}.token())
	f.Add("")
	f.Add("!!!")
	f.Fuzz(func(t *testing.T, s string) {
		c, err := parsePageToken(s)
		if err != nil || c == nil {
			return
		}
		if !validID(c.id) {
			t.Errorf("accepted id %q", c.id)
		}
		if back, err := parsePageToken(c.token()); err != nil || *back != *c {
			t.Errorf("round trip of %v: %v %v", c, back, err)
		}
	})
}

func timeZero() time.Time { return time.Unix(1700000000, 0) }
