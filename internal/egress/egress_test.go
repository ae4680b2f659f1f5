package egress

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strconv"
	"testing"
)

func TestInternal(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1": true, "127.9.9.9": true, "::1": true, "10.1.2.3": true, "172.16.0.1": true,
		"192.168.1.1": true, "169.254.169.254": true, "fe80::1": true, "fc00::1": true, "fd12::1": true,
		"0.0.0.0": true, "::": true, "100.64.0.1": true, "224.0.0.1": true, "255.255.255.255": true,
		"::ffff:127.0.0.1": true, "::ffff:169.254.169.254": true, "64:ff9b::a9fe:a9fe": true, // NAT64 of the metadata address
		"8.8.8.8": false, "1.1.1.1": false, "2606:4700:4700::1111": false, "::ffff:8.8.8.8": false, "64:ff9b::808:808": false,
	} {
		if got := isInternal(netip.MustParseAddr(addr)); got != want {
			t.Errorf("isInternal(%s) = %v, want %v", addr, got, want)
		}
	}
}

func TestCheck(t *testing.T) {
	p, err := New([]string{"mcp.internal:8080", "10.0.0.0/8:443", "127.0.0.1:*", "[fd00::5]:9000"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		host string
		addr string
		port int
		ok   bool
	}{
		{"", "8.8.8.8", 443, true},
		{"", "169.254.169.254", 80, false},
		{"metadata.google.internal", "169.254.169.254", 80, false},
		{"mcp.internal", "10.9.9.9", 8080, true},
		{"mcp.internal", "10.9.9.9", 8081, true}, // 10/8:443 does not match, but…
		{"other", "10.9.9.9", 443, true},
		{"other", "10.9.9.9", 80, false},
		{"", "127.0.0.1", 1, true},
		{"", "::ffff:127.0.0.1", 6379, true},
		{"", "127.0.0.2", 80, false},
		{"", "fd00::5", 9000, true},
		{"", "fd00::5", 9001, false},
		{"localhost", "::1", 80, false},
	} {
		if tc.host == "mcp.internal" && tc.port == 8081 {
			tc.ok = false // the name rule names port 8080 only
		}
		err := p.Check(tc.host, netip.MustParseAddr(tc.addr), tc.port)
		if (err == nil) != tc.ok {
			t.Errorf("Check(%q, %s, %d) = %v, want allowed=%v", tc.host, tc.addr, tc.port, err, tc.ok)
		}
		if err != nil && !errors.Is(err, errRefused) {
			t.Errorf("refusal %v does not wrap errRefused", err)
		}
	}
	for _, bad := range []string{"example.com", "example.com:0", "example.com:x", ":80", "*.example.com:80", "10.0.0.0/33:80"} {
		if _, err := New([]string{bad}); err == nil {
			t.Errorf("New(%q) accepted it", bad)
		}
	}
}

// TestTransportChecksTheDialledAddress: a name that resolves to loopback (DNS rebinding's end
// state) is refused by default, allowed by a rule for its port, and a redirect to a port the
// rules do not allow is refused when it is dialled.
func TestTransportChecksTheDialledAddress(t *testing.T) {
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "secret") }))
	defer other.Close()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/redirect" {
			http.Redirect(w, r, other.URL, http.StatusFound)
			return
		}
		fmt.Fprint(w, "ok")
	}))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	port, _ := strconv.Atoi(u.Port())
	get := func(p *Policy, target string) (string, error) {
		resp, err := (&http.Client{Transport: p.Transport()}).Get(target)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return string(b), err
	}
	named := fmt.Sprintf("http://localhost:%d/", port)
	if _, err := get(&Policy{}, named); !errors.Is(err, errRefused) {
		t.Errorf("localhost with no rules: %v, want refused", err)
	}
	if _, err := get(&Policy{}, srv.URL); !errors.Is(err, errRefused) {
		t.Errorf("127.0.0.1 with no rules: %v, want refused", err)
	}
	p, err := New([]string{"localhost:" + u.Port(), "127.0.0.1:" + u.Port()})
	if err != nil {
		t.Fatal(err)
	}
	if body, err := get(p, named); err != nil || body != "ok" {
		t.Errorf("allowed name: %q %v", body, err)
	}
	if _, err := get(p, srv.URL+"/redirect"); !errors.Is(err, errRefused) {
		t.Errorf("redirect to another loopback port: %v, want refused", err)
	}
}

// FuzzCheck: without rules exactly the internal addresses are refused, whatever form the
// address takes, and a rule for one address and port allows that pair only.
func FuzzCheck(f *testing.F) {
	f.Add([]byte{127, 0, 0, 1}, uint16(80))
	f.Add([]byte{169, 254, 169, 254}, uint16(80))
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 1}, uint16(443))
	f.Add([]byte{0, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0, 127, 0, 0, 1}, uint16(22))
	f.Fuzz(func(t *testing.T, b []byte, port uint16) {
		a, ok := netip.AddrFromSlice(b)
		if !ok || port == 0 {
			return
		}
		var none Policy
		err := none.Check("", a, int(port))
		if (err != nil) != isInternal(a) {
			t.Fatalf("Check(%s) = %v but isInternal = %v", a, err, isInternal(a))
		}
		if isInternal(a) != isInternal(a.Unmap()) {
			t.Fatalf("%s and its unmapped form disagree", a)
		}
		p, err := New([]string{netip.AddrPortFrom(a.Unmap(), port).String()})
		if err != nil {
			t.Fatalf("rule for %s: %v", a, err)
		}
		if err := p.Check("", a, int(port)); err != nil {
			t.Fatalf("the rule for %s:%d does not allow it: %v", a, port, err)
		}
		if isInternal(a) && p.Check("", a, int(port)%65535+1) == nil {
			t.Fatalf("the rule for %s:%d allows another port", a, port)
		}
	})
}
