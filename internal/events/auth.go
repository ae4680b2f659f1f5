package events

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
)

// Proof of origin. Anyone who can publish on the events' NATS server could otherwise write
// memories into any user's account with a forged turn.finished; so publishers sign each event
// with a key the operator shares between the orchestrator and memory, and the extractor refuses
// what it cannot verify. The MAC covers the subject (a genuine event replayed to another user's
// subject fails), a timestamp and the payload.
const (
	// HeaderSignature is "hmac-sha256=<unpadded base64url MAC>".
	HeaderSignature = "Hermes-Signature"
	// HeaderSignedAt is the signing time in Unix milliseconds.
	HeaderSignedAt = "Hermes-Signed-At"

	sigScheme = "hmac-sha256="
	// minKeyBytes is the shortest accepted events key (openssl rand -hex 32 gives 64).
	minKeyBytes = 32
	// maxSignedAge is how old a signature may be: the stream keeps events 7 days, and an
	// extractor that was down that long still takes them.
	maxSignedAge = 8 * 24 * time.Hour
	// maxClockSkew is how far in the future a signature may be dated.
	maxClockSkew = 5 * time.Minute
)

// ErrUnauthenticEvent is the error of an event whose proof of origin is missing or wrong.
var ErrUnauthenticEvent = errors.New("event not authentic")

// Keyring signs events with its first key and accepts events signed with any of its keys, so
// an operator rotates by adding the new key second everywhere, then moving it first, then
// removing the old one.
type Keyring struct {
	keys [][]byte
	// acceptUnsigned is the --insecure-no-auth mode without a key: nothing is signed and
	// everything is accepted.
	acceptUnsigned bool
}

// newKeyring returns a keyring of the given keys, the first of which signs. Each key must be at
// least minKeyBytes long.
func newKeyring(keys ...[]byte) (*Keyring, error) {
	if len(keys) == 0 {
		return nil, errors.New("events key: none given")
	}
	k := &Keyring{}
	for i, key := range keys {
		if len(key) < minKeyBytes {
			return nil, fmt.Errorf("events key %d: %d bytes, want at least %d (generate one with: openssl rand -hex 32)", i+1, len(key), minKeyBytes)
		}
		k.keys = append(k.keys, append([]byte(nil), key...))
	}
	return k, nil
}

// ParseKeyring reads keys from text: one key per line (the first signs), blank lines and lines
// starting with '#' ignored, surrounding blanks trimmed.
func ParseKeyring(text string) (*Keyring, error) {
	var keys [][]byte
	for line := range strings.SplitSeq(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		keys = append(keys, []byte(line))
	}
	return newKeyring(keys...)
}

// LoadKeyring reads the keyring of a key file (ParseKeyring's format).
func LoadKeyring(path string) (*Keyring, error) {
	data, err := os.ReadFile(path) // #nosec G304 -- the operator's --events-key-file
	if err != nil {
		return nil, fmt.Errorf("events key file: %w", err)
	}
	k, err := ParseKeyring(string(data))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return k, nil
}

// RandomKey returns a fresh key as 64 hex digits.
func RandomKey() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("events key: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// InsecureAcceptAll is the keyring of --insecure-no-auth without an events key: it signs
// nothing and accepts every event, forged ones included.
func InsecureAcceptAll() *Keyring { return &Keyring{acceptUnsigned: true} }

// Insecure reports whether k accepts unsigned events.
func (k *Keyring) Insecure() bool { return k.acceptUnsigned }

func mac(key []byte, subject, signedAt string, data []byte) []byte {
	h := hmac.New(sha256.New, key)
	// Length-prefixed fields: no subject/time/payload split can collide with another.
	for _, f := range [][]byte{[]byte("hermes-event-v1"), []byte(subject), []byte(signedAt)} {
		h.Write([]byte(strconv.Itoa(len(f)) + ":"))
		h.Write(f)
	}
	h.Write(data)
	return h.Sum(nil)
}

// Sign adds the signature headers of msg's subject and data, dated now.
func (k *Keyring) Sign(msg *nats.Msg, now time.Time) {
	if len(k.keys) == 0 {
		return
	}
	if msg.Header == nil {
		msg.Header = nats.Header{}
	}
	at := strconv.FormatInt(now.UnixMilli(), 10)
	msg.Header.Set(HeaderSignedAt, at)
	msg.Header.Set(HeaderSignature, sigScheme+base64.RawURLEncoding.EncodeToString(mac(k.keys[0], msg.Subject, at, msg.Data)))
}

// Verify checks that data arrived on subject signed by one of k's keys, and that the signature
// is neither older than the stream keeps events nor from the future. Its errors wrap
// ErrUnauthenticEvent.
func (k *Keyring) Verify(subject string, h nats.Header, data []byte, now time.Time) error {
	if k.acceptUnsigned {
		return nil
	}
	sig, at := h.Get(HeaderSignature), h.Get(HeaderSignedAt)
	if sig == "" || at == "" {
		return fmt.Errorf("%w: no %s header", ErrUnauthenticEvent, HeaderSignature)
	}
	got, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(sig, sigScheme))
	if err != nil || !strings.HasPrefix(sig, sigScheme) {
		return fmt.Errorf("%w: malformed %s header", ErrUnauthenticEvent, HeaderSignature)
	}
	ms, err := strconv.ParseInt(at, 10, 64)
	if err != nil {
		return fmt.Errorf("%w: malformed %s header", ErrUnauthenticEvent, HeaderSignedAt)
	}
	ok := false
	for _, key := range k.keys {
		if hmac.Equal(got, mac(key, subject, at, data)) {
			ok = true
		}
	}
	if !ok {
		return fmt.Errorf("%w: signature does not match (another key, another subject, or altered)", ErrUnauthenticEvent)
	}
	signed := time.UnixMilli(ms)
	if d := now.Sub(signed); d > maxSignedAge || d < -maxClockSkew {
		return fmt.Errorf("%w: signed at %s, outside the accepted window", ErrUnauthenticEvent, signed.UTC().Format(time.RFC3339))
	}
	return nil
}

// URLHasCredentials reports whether a NATS URL (or comma list of URLs) carries a user, password
// or token in every server address.
func URLHasCredentials(raw string) bool {
	for s := range strings.SplitSeq(raw, ",") {
		u, err := url.Parse(strings.TrimSpace(s))
		if err != nil || u.User == nil || u.User.Username() == "" {
			return false
		}
	}
	return true
}

// URLIsLoopback reports whether every server of a NATS URL (or comma list) is on this host.
func URLIsLoopback(raw string) bool {
	for s := range strings.SplitSeq(raw, ",") {
		s = strings.TrimSpace(s)
		if !strings.Contains(s, "://") {
			s = "nats://" + s
		}
		u, err := url.Parse(s)
		if err != nil {
			return false
		}
		host := u.Hostname()
		if host == "localhost" {
			continue
		}
		if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
			return false
		}
	}
	return true
}
