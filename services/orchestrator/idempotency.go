package orchestrator

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/big"
	"sort"
	"strconv"
	"strings"
)

// CanonicalJSON rewrites a JSON value so that equal values have equal text: object keys sorted,
// no insignificant whitespace, numbers in one form (1, 1.0 and 1e0 are all "1"), strings
// escaped minimally. It rejects invalid JSON and trailing data.
func CanonicalJSON(raw string) (string, error) {
	dec := json.NewDecoder(strings.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return "", fmt.Errorf("not valid JSON: %w", err)
	}
	// Only white space may follow the value: anything else, valid JSON or not, is refused.
	if _, err := dec.Token(); err != io.EOF {
		return "", errors.New("not valid JSON: data after the value")
	}
	var b bytes.Buffer
	if err := writeCanonical(&b, v); err != nil {
		return "", err
	}
	return b.String(), nil
}

func writeCanonical(b *bytes.Buffer, v any) error {
	switch x := v.(type) {
	case nil:
		b.WriteString("null")
	case bool:
		b.WriteString(strconv.FormatBool(x))
	case json.Number:
		b.WriteString(canonicalNumber(x))
	case string:
		writeString(b, x)
	case []any:
		b.WriteByte('[')
		for i, e := range x {
			if i > 0 {
				b.WriteByte(',')
			}
			if err := writeCanonical(b, e); err != nil {
				return err
			}
		}
		b.WriteByte(']')
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		b.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				b.WriteByte(',')
			}
			writeString(b, k)
			b.WriteByte(':')
			if err := writeCanonical(b, x[k]); err != nil {
				return err
			}
		}
		b.WriteByte('}')
	default:
		return fmt.Errorf("unexpected JSON value %T", v)
	}
	return nil
}

func writeString(b *bytes.Buffer, s string) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)
	b.Write(bytes.TrimRight(buf.Bytes(), "\n"))
}

// maxExponent bounds the decimal exponent of a number that is rewritten: "1e999999" would cost
// seconds of CPU and a megabyte of digits. A number beyond it is kept as written.
const maxExponent = 1000

// canonicalNumber writes integers exactly and other numbers in Go's shortest round-trip form of
// their float64 value. Whatever it writes reads back as itself.
func canonicalNumber(n json.Number) string {
	s := string(n)
	if i := strings.IndexAny(s, "eE"); i >= 0 {
		if exp, err := strconv.Atoi(s[i+1:]); err != nil || exp > maxExponent || exp < -maxExponent {
			return s
		}
	}
	r, ok := new(big.Rat).SetString(s)
	if !ok {
		return s
	}
	if r.IsInt() {
		return r.Num().String()
	}
	f, _ := r.Float64()
	switch {
	case math.IsInf(f, 0):
		// Beyond float64 the fraction is far below its precision: the nearest integer.
		return r.FloatString(0)
	case f == 0:
		return "0" // not "-0", which reads back as the integer 0
	case math.Trunc(f) == f:
		// The float64 is an integer ("1e+22" for 10000000000000000000000.5): write it as one,
		// since that is how its text reads back.
		return new(big.Float).SetFloat64(f).Text('f', 0)
	}
	return strconv.FormatFloat(f, 'g', -1, 64)
}

// IdempotencyKey derives the key an idempotent tool is called with from the session, the tool
// and the canonical arguments: the same step asked for again in the session — after trimming
// made the model forget it did it — gets the same key, and the tool service replays the
// recorded result instead of running the tool twice. Arguments that are not valid JSON are used
// verbatim (the call will fail validation anyway).
func IdempotencyKey(sessionID, tool, arguments string) string {
	canon, err := CanonicalJSON(arguments)
	if err != nil {
		canon = arguments
	}
	h := sha256.New()
	for _, part := range []string{"hermes-step-v1", sessionID, tool, canon} {
		fmt.Fprintf(h, "%d:%s;", len(part), part)
	}
	return "step-" + hex.EncodeToString(h.Sum(nil))[:40]
}
