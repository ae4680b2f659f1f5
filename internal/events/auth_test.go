package events

import (
	"errors"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

func TestKeyringSignVerify(t *testing.T) {
	old, err := ParseKeyring("old-key-0123456789abcdef0123456789abcdef")
	if err != nil {
		t.Fatal(err)
	}
	rotated, err := ParseKeyring("# rotation: the new key signs, the old one still verifies\nnew-key-0123456789abcdef0123456789abcdef\n\nold-key-0123456789abcdef0123456789abcdef\n")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	signed := func(k *Keyring, subject string, data string, at time.Time) *nats.Msg {
		m := &nats.Msg{Subject: subject, Data: []byte(data)}
		k.Sign(m, at)
		return m
	}
	for _, tc := range []struct {
		name   string
		msg    *nats.Msg
		verify *Keyring
		ok     bool
	}{
		{"same key", signed(old, "s.a", "x", now), old, true},
		{"old key after rotation", signed(old, "s.a", "x", now), rotated, true},
		{"new key before every verifier has it", signed(rotated, "s.a", "x", now), old, false},
		{"unsigned", &nats.Msg{Subject: "s.a", Data: []byte("x")}, old, false},
		{"a week old", signed(old, "s.a", "x", now.Add(-7*24*time.Hour)), old, true},
		{"older than the stream keeps events", signed(old, "s.a", "x", now.Add(-9*24*time.Hour)), old, false},
		{"from the future", signed(old, "s.a", "x", now.Add(time.Hour)), old, false},
		{"insecure accepts anything", &nats.Msg{Subject: "s.a", Data: []byte("x")}, InsecureAcceptAll(), true},
	} {
		err := tc.verify.Verify(tc.msg.Subject, tc.msg.Header, tc.msg.Data, now)
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrUnauthenticEvent)) {
			t.Errorf("%s: Verify = %v, want ok=%v", tc.name, err, tc.ok)
		}
	}
	// The signature binds subject, time and payload.
	m := signed(old, "s.a", "x", now)
	for name, verify := range map[string]func() error{
		"subject": func() error { return old.Verify("s.b", m.Header, m.Data, now) },
		"payload": func() error { return old.Verify("s.a", m.Header, []byte("y"), now) },
		"time": func() error {
			h := nats.Header{HeaderSignature: m.Header[HeaderSignature], HeaderSignedAt: []string{"1"}}
			return old.Verify("s.a", h, m.Data, now)
		},
	} {
		if err := verify(); err == nil {
			t.Errorf("a signature verified with another %s", name)
		}
	}
	if _, err := ParseKeyring("short"); err == nil {
		t.Error("a 5-byte key was accepted")
	}
	if _, err := ParseKeyring("# only a comment\n"); err == nil {
		t.Error("a key file without keys was accepted")
	}
}

func TestNATSURLChecks(t *testing.T) {
	for _, tc := range []struct {
		url             string
		loopback, creds bool
	}{
		{"nats://127.0.0.1:4222", true, false},
		{"nats://localhost:4222", true, false},
		{"nats://[::1]:4222", true, false},
		{"127.0.0.1:4222", true, false},
		{"nats://hermes-nats:4222", false, false},
		{"nats://hermes:secret@hermes-nats:4222", false, true},
		{"nats://s3cr3tt0ken@hermes-nats:4222", false, true},
		{"nats://u:p@a:4222,nats://b:4222", false, false},
		{"nats://127.0.0.1:4222,nats://10.0.0.5:4222", false, false},
	} {
		if got := URLIsLoopback(tc.url); got != tc.loopback {
			t.Errorf("URLIsLoopback(%s) = %v", tc.url, got)
		}
		if got := URLHasCredentials(tc.url); got != tc.creds {
			t.Errorf("URLHasCredentials(%s) = %v", tc.url, got)
		}
	}
}

// --nats-port: the embedded server listens on the given loopback port, and on a free one by
// default.
func TestEmbeddedPort(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := lis.Addr().(*net.TCPAddr).Port
	_ = lis.Close()
	e, err := StartEmbeddedWith(t.TempDir(), EmbeddedOptions{Port: port})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if want := "127.0.0.1:" + strconv.Itoa(port); e.Addr() != want {
		t.Errorf("embedded NATS at %s, want %s", e.Addr(), want)
	}
	if _, err := StartEmbeddedWith(t.TempDir(), EmbeddedOptions{Port: 70000}); err == nil {
		t.Error("port 70000 accepted")
	}
}
