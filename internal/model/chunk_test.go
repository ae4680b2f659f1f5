package model

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// Stream events as providers send them (OpenAI, Azure, vLLM, Ollama, DeepSeek, Groq, Mistral,
// llama.cpp shapes), and the odd ones the decoder must hand to encoding/json.
var chunkSeeds = []string{
	`{"id":"chatcmpl-AbC123","object":"chat.completion.chunk","created":1733000000,"model":"gpt-4o-mini-2024-07-18","system_fingerprint":"fp_0ba0d124f1","choices":[{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"logprobs":null,"finish_reason":null}],"usage":null,"obfuscation":"x9Q"}`,
	`{"id":"chatcmpl-AbC123","object":"chat.completion.chunk","created":1733000000,"model":"gpt-4o-mini","service_tier":"default","system_fingerprint":"fp_0ba0d124f1","choices":[{"index":0,"delta":{"content":" calculator"},"logprobs":null,"finish_reason":null}],"obfuscation":"ab"}`,
	`{"id":"c","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_y","type":"function","function":{"name":"calculator","arguments":""}}]},"finish_reason":null}]}`,
	`{"id":"c","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"expression\":\"12*3\"}"}}]}}]}`,
	`{"id":"c","choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}`,
	`{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":2100,"completion_tokens":40,"total_tokens":2140,"prompt_tokens_details":{"cached_tokens":1920,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":0}}}`,
	`{"choices":[],"created":0,"id":"","model":"","object":"","prompt_filter_results":[{"prompt_index":0,"content_filter_results":{"hate":{"filtered":false,"severity":"safe"}}}]}`,
	`{"id":"cmpl-1","object":"chat.completion.chunk","created":1,"model":"Qwen/Qwen2.5-7B","choices":[{"index":0,"delta":{"content":"Hi"},"logprobs":null,"finish_reason":null,"stop_reason":null}]}`,
	`{"id":"chatcmpl-9","object":"chat.completion.chunk","created":1,"model":"llama3.2","system_fingerprint":"fp_ollama","choices":[{"index":0,"delta":{"role":"assistant","content":"\n\n"},"finish_reason":null}]}`,
	`{"id":"x","object":"chat.completion.chunk","created":1,"model":"deepseek-reasoner","choices":[{"index":0,"delta":{"content":null,"reasoning_content":"Let me think"},"logprobs":null,"finish_reason":null}]}`,
	`{"id":"x","choices":[{"index":0,"delta":{"content":"caf\u00e9 \ud83d\ude00 \"quoted\" back\\slash \/ tab\t"}}],"x_groq":{"id":"req_1","usage":{"queue_time":0.01}}}`,
	`{"id":"x","choices":[{"index":0,"delta":{"content":"中文回答 ünïcödé"},"finish_reason":null}]}`,
	`{"id":"x","choices":[{"index":1,"delta":{"content":"second choice"}},{"index":0,"delta":{"content":"first"}}]}`,
	` { "id" : "spaced" , "choices" : [ { "index" : 0 , "delta" : { "content" : "a" } } ] } `,
	`{"id":"x","choices":[{"index":0,"delta":{"content":"a"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1e2}}`,
	`{"id":"x","choices":[{"index":1.0}]}`,
	`{"id":5,"choices":[]}`,
	`{"ID":"folded","choices":[]}`,
	`{"id":"a","id":"b"}`,
	`{"error":{"message":"overloaded","type":"server_error"}}`,
	`{"error":null,"id":"x"}`,
	`{"id":"x","choices":[{"index":0,"delta":{"content":"lone \ud83d surrogate"}}]}`,
	"{\"id\":\"bad utf8 \xff\",\"choices\":[]}",
	"{\"id\":\"x\",\"choices\":[],\"skipped\":\"bad utf8 \xff is fine here\"}",
	`{"id":"x","choices":[{"index":0,"delta":{"content":"a"}}]}trailing`,
	`{"id":"x","choices":[{"index":99999999999999999999}]}`,
	`{"id":"x","choices":[null,{"index":0,"delta":null}],"usage":{}}`,
	`{"id":"x","choices":[{"index":-0,"delta":{"tool_calls":[null,{"index":2,"id":null,"function":null}]}}]}`,
	`{"id":"x","nested":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}`,
	`{"id":"x","n":-0.5e+10,"t":true,"f":false,"s":"\u0041\b\f\n\r\t","o":{"a":[1,{"b":null}]}}`,
	`{"id":"x","n":01}`,
	`{"id":"x","s":"\x"}`,
	`{"id":"x",}`,
	`[]`,
	`null`,
	``,
}

// decodeStd is the Stream's fallback: encoding/json, type mismatches dropped.
func decodeStd(data []byte) (wireChunk, error) {
	var c wireChunk
	err := lenient(json.Unmarshal(data, &c))
	return c, err
}

// checkChunk fails t when the decoder read data and encoding/json did not, or read it
// differently.
func checkChunk(t *testing.T, d *chunkDecoder, data []byte) (read bool) {
	t.Helper()
	var got wireChunk
	if !d.decode(data, &got) {
		return false
	}
	var want wireChunk
	if err := json.Unmarshal(data, &want); err != nil {
		t.Fatalf("decoded %q, which encoding/json refuses: %v", data, err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("decoding %q (-encoding/json +decoder):\n%s", data, diff)
	}
	return true
}

// TestChunkDecoder: the decoder reads the common events exactly as encoding/json does and
// leaves the others to it, and Stream's result is the same either way.
func TestChunkDecoder(t *testing.T) {
	mustRead := map[int]bool{0: true, 1: true, 2: true, 3: true, 4: true, 5: true, 6: true, 7: true, 8: true, 9: true, 10: true, 11: true, 12: true, 13: true, 23: true, 26: true, 27: true, 29: true, 34: true}
	var d chunkDecoder
	for i, s := range chunkSeeds {
		read := checkChunk(t, &d, []byte(s))
		if read != mustRead[i] {
			t.Errorf("seed %d %q: read %v, want %v", i, s, read, mustRead[i])
		}
	}
}

// TestChunkDecoderInterns: an event that repeats the previous one's id and model shares their
// strings, and one that changes them gets its own.
func TestChunkDecoderInterns(t *testing.T) {
	var d chunkDecoder
	var a, b, c wireChunk
	if !d.decode([]byte(`{"id":"one","model":"m","choices":[]}`), &a) || !d.decode([]byte(`{"id":"one","model":"m","choices":[]}`), &b) ||
		!d.decode([]byte(`{"id":"two","model":"m","choices":[]}`), &c) {
		t.Fatal("not decoded")
	}
	if got := []string{a.ID, b.ID, c.ID, a.Model, c.Model}; !cmp.Equal(got, []string{"one", "one", "two", "m", "m"}) {
		t.Errorf("ids and models %q", got)
	}
}

// FuzzChunkDecoder: whatever the decoder reads, encoding/json reads the same, without error.
func FuzzChunkDecoder(f *testing.F) {
	for _, s := range chunkSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var d chunkDecoder
		checkChunk(t, &d, data)
		// The same decoder again, as a stream uses it: its remembered id and model change
		// nothing.
		checkChunk(t, &d, data)
	})
}

// TestChunkDecoderGenerated decodes events built from parts of every kind (strings with each
// escape and script, numbers, nulls, unknown fields of every type, key orders) and compares with
// encoding/json; most must be read here.
func TestChunkDecoderGenerated(t *testing.T) {
	texts := []string{"", "plain", " leading space", `say \"hi\"`, `a\\b`, `line\nbreak\r\n`, `tab\tend`, `\u00e9t\u00e9`, `emoji \ud83d\ude80`, "直接的中文", "ελληνικά", `\/slash`, `\b\f`, "mixed é and \\u00e9"}
	extras := []string{`"object":"chat.completion.chunk"`, `"created":1733000000`, `"logprobs":null`, `"x":{"a":[1,2.5,-3e-2,true,false,null,"s"]}`, `"system_fingerprint":"fp"`}
	var d chunkDecoder
	read, total := 0, 0
	for i, text := range texts {
		for j, extra := range extras {
			for order := range 3 {
				choice := fmt.Sprintf(`{"index":%d,"delta":{"content":"%s","tool_calls":[{"index":%d,"id":"call_%d","function":{"name":"f%d","arguments":"%s"}}]},"finish_reason":%s}`,
					order, text, j, i, j, text, []string{"null", `"stop"`, `"tool_calls"`}[order])
				parts := []string{`"id":"chatcmpl-` + fmt.Sprint(i) + `"`, `"model":"m` + fmt.Sprint(order) + `"`, `"choices":[` + choice + `]`, extra,
					`"usage":{"prompt_tokens":` + fmt.Sprint(i*j) + `,"completion_tokens":3,"total_tokens":` + fmt.Sprint(i*j+3) + `}`}
				// Three key orders.
				for k := 0; k < order; k++ {
					parts = append(parts[1:], parts[0])
				}
				data := []byte("{" + strings.Join(parts, ",") + "}")
				total++
				if checkChunk(t, &d, data) {
					read++
				}
			}
		}
	}
	// Only the texts the decoder leaves to encoding/json (none of these) may fall back.
	if read != total {
		t.Errorf("read %d of %d generated events", read, total)
	}
}

func BenchmarkChunkDecode(b *testing.B) {
	events := [][]byte{[]byte(chunkSeeds[1]), []byte(chunkSeeds[3])}
	b.Run("decoder", func(b *testing.B) {
		b.ReportAllocs()
		var d chunkDecoder
		for b.Loop() {
			for _, e := range events {
				var c wireChunk
				if !d.decode(e, &c) {
					b.Fatal("not decoded")
				}
			}
		}
	})
	b.Run("encoding/json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			for _, e := range events {
				if _, err := decodeStd(e); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
}
