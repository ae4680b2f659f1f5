// Package memory is Hermes' long-term memory service: an episodic tier (Redis with a TTL, or the
// embedded bbolt store) and a semantic tier (Qdrant, or the embedded in-process vector index);
// explicit extraction from finished turns by a model, implicit habit counting, recall with a
// similarity threshold applied before recency weighting, and maintenance.
package memory

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"time"
	"unicode"

	"golang.org/x/text/unicode/norm"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/hermes-agent/hermes/internal/errclass"
	memoryv1 "github.com/hermes-agent/hermes/proto/hermes/memory/v1"
)

// Limits of what a memory may hold.
const (
	maxContentBytes   = 2000
	maxAttributes     = 16
	maxAttrKeyBytes   = 64
	maxAttrValueBytes = 256
	maxKeywords       = 16
	maxKeywordBytes   = 64
	maxSubjectBytes   = 128
	maxUserIDBytes    = 256
	maxSourceMessages = 64
	maxSpeakerBytes   = 128
)

// ErrNotFound is returned by stores for a memory that does not exist (or belongs to another
// user, which is the same thing to the caller).
var ErrNotFound = errclass.New(errclass.NotFound, "memory not found (it does not exist or belongs to another user)", nil)

// newID returns a random memory id in UUID form (Qdrant point ids must be UUIDs or integers).
func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return formatUUID(b)
}

// derivedID is a deterministic id for a memory extracted from a turn, so a redelivered turn
// whose extraction is repeated writes the same memory again instead of a copy.
func derivedID(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	var b [16]byte
	copy(b[:], h.Sum(nil))
	return formatUUID(b)
}

func formatUUID(b [16]byte) string {
	b[6] = (b[6] & 0x0f) | 0x40 // version 4 layout
	b[8] = (b[8] & 0x3f) | 0x80 // RFC 4122 variant
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// validID reports whether s has the UUID form ids are made in; anything else cannot name a
// memory and is refused before it reaches a store.
func validID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i, r := range s {
		switch i {
		case 8, 13, 18, 23:
			if r != '-' {
				return false
			}
		default:
			if !strings.ContainsRune("0123456789abcdef", r) {
				return false
			}
		}
	}
	return true
}

// normalizeText folds width and case so that comparisons of values the user typed in different
// forms (全角/半角, upper/lower case) agree.
func normalizeText(s string) string {
	return strings.ToLower(strings.TrimSpace(norm.NFKC.String(s)))
}

// normalizeSubject makes subjects comparable: "Restaurant " and "restaurant" are one subject.
func normalizeSubject(s string) string {
	return strings.Join(strings.FieldsFunc(normalizeText(s), func(r rune) bool {
		return unicode.IsSpace(r) || r == '_' || r == '-'
	}), " ")
}

// normalizeAttrKey makes attribute keys comparable: "Restaurant Name" is restaurant_name.
func normalizeAttrKey(s string) string {
	return strings.Join(strings.FieldsFunc(normalizeText(s), func(r rune) bool {
		return unicode.IsSpace(r) || r == '-' || r == '_' || r == '.'
	}), "_")
}

// embedText is what is indexed for a memory: its content, speaker, subject, attribute values
// and keywords, so a request naming any of them finds it.
func embedText(m *memoryv1.Memory) string {
	var b strings.Builder
	b.WriteString(m.GetContent())
	if s := m.GetSpeaker(); s != "" {
		b.WriteString(" ")
		b.WriteString(s)
	}
	if s := m.GetSubject(); s != "" {
		b.WriteString(" ")
		b.WriteString(s)
	}
	keys := make([]string, 0, len(m.GetAttributes()))
	for k := range m.GetAttributes() {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		b.WriteString(" ")
		b.WriteString(m.GetAttributes()[k])
	}
	for _, k := range m.GetKeywords() {
		b.WriteString(" ")
		b.WriteString(k)
	}
	return b.String()
}

// occurredAt is when a memory's fact or event happened: occurred_at, or its creation.
func occurredAt(m *memoryv1.Memory) time.Time {
	if o := m.GetOccurredAt(); o != nil {
		return o.AsTime()
	}
	return m.GetCreatedAt().AsTime()
}

// live reports whether a memory has not been superseded or expired.
func live(m *memoryv1.Memory) bool { return m.GetExpiredAt() == nil }

// attrKeys returns a memory's attribute keys, sorted.
func attrKeys(m *memoryv1.Memory) []string {
	keys := make([]string, 0, len(m.GetAttributes()))
	for k := range m.GetAttributes() {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// lastActive is the later of the last update and the last recall.
func lastActive(m *memoryv1.Memory) time.Time {
	t := m.GetUpdatedAt().AsTime()
	if r := m.GetLastRecalledAt(); r != nil && r.AsTime().After(t) {
		t = r.AsTime()
	}
	return t
}

func ts(t time.Time) *timestamppb.Timestamp { return timestamppb.New(t) }

// Entry is a memory with its vector, as the stores hold it.
type Entry struct {
	Memory *memoryv1.Memory
	Vector []float32
}

// encodeEntry is the stored form of an entry in Redis and bbolt: a 4-byte length, the memory as
// protobuf, then the vector: a form byte, the dimension, and either every component (dense) or
// the non-zero ones as index/value pairs (sparse — the lexical embedder's vectors, which are
// mostly zeros, take a few hundred bytes instead of 4 per dimension).
func encodeEntry(e Entry) ([]byte, error) {
	mb, err := proto.Marshal(e.Memory)
	if err != nil {
		return nil, fmt.Errorf("encode memory: %w", err)
	}
	nnz := 0
	for _, f := range e.Vector {
		if f != 0 {
			nnz++
		}
	}
	sparse := len(e.Vector) <= 1<<16 && nnz*6 < len(e.Vector)*4
	size := 4 + len(mb) + 1 + 4
	if sparse {
		size += 4 + 6*nnz
	} else {
		size += 4 * len(e.Vector)
	}
	out := make([]byte, 0, size)
	out = binary.LittleEndian.AppendUint32(out, uint32(len(mb)))
	out = append(out, mb...)
	if sparse {
		out = append(out, 1)
		out = binary.LittleEndian.AppendUint32(out, uint32(len(e.Vector)))
		out = binary.LittleEndian.AppendUint32(out, uint32(nnz))
		for i, f := range e.Vector {
			if f != 0 {
				out = binary.LittleEndian.AppendUint16(out, uint16(i))
				out = binary.LittleEndian.AppendUint32(out, math.Float32bits(f))
			}
		}
		return out, nil
	}
	out = append(out, 0)
	out = binary.LittleEndian.AppendUint32(out, uint32(len(e.Vector)))
	for _, f := range e.Vector {
		out = binary.LittleEndian.AppendUint32(out, math.Float32bits(f))
	}
	return out, nil
}

var errCorrupt = errors.New("decode memory: corrupt record")

// decodeMemory decodes only the memory of a stored entry, not its vector.
func decodeMemory(b []byte) (*memoryv1.Memory, error) {
	if len(b) < 4 {
		return nil, errCorrupt
	}
	n := int(binary.LittleEndian.Uint32(b))
	if n > len(b)-4 {
		return nil, errCorrupt
	}
	m := &memoryv1.Memory{}
	if err := proto.Unmarshal(b[4:4+n], m); err != nil {
		return nil, fmt.Errorf("decode memory: %w", err)
	}
	return m, nil
}

func decodeEntry(b []byte) (Entry, error) {
	if len(b) < 4 {
		return Entry{}, errCorrupt
	}
	n := int(binary.LittleEndian.Uint32(b))
	if n > len(b)-4-5 {
		return Entry{}, errCorrupt
	}
	m := &memoryv1.Memory{}
	if err := proto.Unmarshal(b[4:4+n], m); err != nil {
		return Entry{}, fmt.Errorf("decode memory: %w", err)
	}
	rest := b[4+n:]
	form, dim := rest[0], int(binary.LittleEndian.Uint32(rest[1:]))
	rest = rest[5:]
	if dim > 1<<20 {
		return Entry{}, errCorrupt
	}
	vec := make([]float32, dim)
	switch form {
	case 0:
		if len(rest) != 4*dim {
			return Entry{}, errCorrupt
		}
		for i := range vec {
			vec[i] = math.Float32frombits(binary.LittleEndian.Uint32(rest[4*i:]))
		}
	case 1:
		if len(rest) < 4 {
			return Entry{}, errCorrupt
		}
		nnz := int(binary.LittleEndian.Uint32(rest))
		rest = rest[4:]
		if len(rest) != 6*nnz {
			return Entry{}, errCorrupt
		}
		for j := range nnz {
			i := int(binary.LittleEndian.Uint16(rest[6*j:]))
			if i >= dim {
				return Entry{}, errCorrupt
			}
			vec[i] = math.Float32frombits(binary.LittleEndian.Uint32(rest[6*j+2:]))
		}
	default:
		return Entry{}, errCorrupt
	}
	return Entry{Memory: m, Vector: vec}, nil
}

// touchEach records a recall at `at` on each entry of ids that get finds and saves it with save,
// which reports false for an entry that went away meanwhile; it returns the ids saved. It is
// Touch of the tiers that read and write one entry at a time.
func touchEach(ids []string, at time.Time, get func(id string) (Entry, error), save func(id string, e Entry) (bool, error)) ([]string, error) {
	var touched []string
	for _, id := range ids {
		e, err := get(id)
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			return touched, err
		}
		e.Memory.LastRecalledAt = ts(at)
		e.Memory.RecallCount++
		ok, err := save(id, e)
		if err != nil {
			return touched, err
		}
		if ok {
			touched = append(touched, id)
		}
	}
	return touched, nil
}

// appendNew appends the items of src that dst does not hold yet, while dst has fewer than limit.
func appendNew(dst, src []string, limit int) []string {
	for _, x := range src {
		if !slices.Contains(dst, x) && len(dst) < limit {
			dst = append(dst, x)
		}
	}
	return dst
}

// cosine is the cosine similarity of two vectors (0 when either is zero).
func cosine(a, b []float32) float64 {
	if len(a) != len(b) {
		return 0
	}
	var dot, na, nb float64
	for i := range a {
		dot += float64(a[i]) * float64(b[i])
		na += float64(a[i]) * float64(a[i])
		nb += float64(b[i]) * float64(b[i])
	}
	if na == 0 || nb == 0 {
		return 0
	}
	return dot / math.Sqrt(na*nb)
}

// normalize scales v to unit length in place and returns it.
func normalize(v []float32) []float32 {
	var n float64
	for _, f := range v {
		n += float64(f) * float64(f)
	}
	if n == 0 {
		return v
	}
	inv := float32(1 / math.Sqrt(n))
	for i := range v {
		v[i] *= inv
	}
	return v
}

// typeAllowed reports whether t is in types (empty allows every type).
func typeAllowed(types []memoryv1.MemoryType, t memoryv1.MemoryType) bool {
	return len(types) == 0 || slices.Contains(types, t)
}

// typeName is the lower-case name used in the extraction contract and in payloads.
func typeName(t memoryv1.MemoryType) string {
	return strings.ToLower(strings.TrimPrefix(t.String(), "MEMORY_TYPE_"))
}

// parseType reads a type name of the extraction contract ("preference", "fact", …).
func parseType(s string) (memoryv1.MemoryType, bool) {
	v, ok := memoryv1.MemoryType_value["MEMORY_TYPE_"+strings.ToUpper(strings.TrimSpace(s))]
	if !ok || v == 0 {
		return 0, false
	}
	return memoryv1.MemoryType(v), true
}

// cloneMemory returns a deep copy, so a store never shares a caller's message.
func cloneMemory(m *memoryv1.Memory) *memoryv1.Memory {
	return proto.Clone(m).(*memoryv1.Memory)
}
