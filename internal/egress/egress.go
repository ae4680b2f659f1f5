// Package egress decides which hosts Hermes may connect to on a caller's behalf: webhook tools,
// HTTP MCP servers and the http_fetch builtin reach URLs that an API caller or a model chose.
// By default every address of the host's own network is refused — loopback, private and shared
// ranges, link-local (cloud metadata at 169.254.169.254), unique-local, unspecified and
// multicast, IPv4 and IPv6 (IPv4-mapped and NAT64 forms included) — and the operator allows
// what Hermes may reach anyway with host:port rules. The check runs on the address actually
// dialled (net.Dialer.Control, after DNS resolution, for every redirect too), so DNS rebinding
// and redirects cannot get round it.
package egress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Rule allows one otherwise refused destination: a host name or an address prefix, and a port
// or any port.
type rule struct {
	host   string       // lower-case name, "" for a prefix rule
	prefix netip.Prefix // valid for an address rule
	port   int          // 0 for any port
}

// Policy is the egress policy. The zero value refuses every internal address.
type Policy struct {
	rules []rule
}

// errRefused is wrapped by every refusal.
var errRefused = errors.New("egress refused")

// New parses the operator's rules: "host:port", "host:*", "10.0.0.0/8:443", "[::1]:8080",
// "127.0.0.1:*". Every rule needs a port (or "*"), so allowing a host never opens all of its
// services by accident.
func New(allow []string) (*Policy, error) {
	p := &Policy{}
	for _, raw := range allow {
		r, err := parseRule(strings.TrimSpace(raw))
		if err != nil {
			return nil, fmt.Errorf("egress rule %q: %w", raw, err)
		}
		p.rules = append(p.rules, r)
	}
	return p, nil
}

func parseRule(s string) (rule, error) {
	i := strings.LastIndex(s, ":")
	if i <= 0 {
		return rule{}, errors.New("want host:port, host:*, address:port or prefix/bits:port")
	}
	host, portText := s[:i], s[i+1:]
	var r rule
	if portText != "*" {
		port, err := strconv.Atoi(portText)
		if err != nil || port < 1 || port > 65535 {
			return rule{}, fmt.Errorf("port %q: want 1-65535 or *", portText)
		}
		r.port = port
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if pfx, err := netip.ParsePrefix(host); err == nil {
		r.prefix = pfx.Masked()
		return r, nil
	}
	if a, err := netip.ParseAddr(host); err == nil {
		a = a.Unmap()
		r.prefix = netip.PrefixFrom(a, a.BitLen())
		return r, nil
	}
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	if host == "" || strings.ContainsAny(host, "/ *") {
		return rule{}, fmt.Errorf("host %q: want a name, an address or a prefix", host)
	}
	r.host = host
	return r, nil
}

// internal ranges that are not covered by netip's predicates.
var internalPrefixes = []netip.Prefix{
	netip.MustParsePrefix("100.64.0.0/10"),  // shared address space (carrier-grade NAT)
	netip.MustParsePrefix("192.0.0.0/24"),   // IETF protocol assignments
	netip.MustParsePrefix("198.18.0.0/15"),  // benchmarking
	netip.MustParsePrefix("240.0.0.0/4"),    // reserved, and the broadcast address
	netip.MustParsePrefix("64:ff9b:1::/48"), // local-use NAT64
	netip.MustParsePrefix("2001:db8::/32"),  // documentation
	netip.MustParsePrefix("fec0::/10"),      // deprecated site-local
	netip.MustParsePrefix("0.0.0.0/8"),      // "this network"
	netip.MustParsePrefix("::/128"),         // unspecified
}

var nat64 = netip.MustParsePrefix("64:ff9b::/96")

// isInternal reports whether an address belongs to a host's own or private network rather than
// the public internet.
func isInternal(a netip.Addr) bool {
	a = a.Unmap()
	if a.Is6() && nat64.Contains(a) {
		b := a.As16()
		a = netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]})
	}
	if !a.IsValid() || a.IsLoopback() || a.IsPrivate() || a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast() ||
		a.IsInterfaceLocalMulticast() || a.IsMulticast() || a.IsUnspecified() {
		return true
	}
	for _, p := range internalPrefixes {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// Check decides a connection to addr:port, dialled for host (the name in the URL; "" when the
// URL named an address).
func (p *Policy) Check(host string, addr netip.Addr, port int) error {
	addr = addr.Unmap()
	if !isInternal(addr) {
		return nil
	}
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	for _, r := range p.rules {
		if r.port != 0 && r.port != port {
			continue
		}
		if r.prefix.IsValid() && r.prefix.Contains(addr) || r.host != "" && r.host == host {
			return nil
		}
	}
	what := addr.String()
	if host != "" && host != what {
		what = host + " (" + what + ")"
	}
	return fmt.Errorf("%w: %s:%d is a loopback, private or link-local address; the operator allows such destinations with --egress-allow host:port", errRefused, what, port)
}

// DialContext dials like net.Dialer, checking every address it connects to.
func (p *Policy) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return nil, err
	}
	if _, err := netip.ParseAddr(host); err == nil {
		host = ""
	}
	d := &net.Dialer{
		Timeout:   30 * time.Second,
		KeepAlive: 30 * time.Second,
		Control: func(_, resolved string, _ syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(resolved)
			if err != nil {
				return fmt.Errorf("%w: cannot read the dialled address %q", errRefused, resolved)
			}
			return p.Check(host, ap.Addr(), int(ap.Port()))
		},
	}
	return d.DialContext(ctx, network, address)
}

// Transport is an HTTP transport whose connections go through the policy. It uses no proxy: a
// proxy would be the only address checked.
func (p *Policy) Transport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.Proxy = nil
	t.DialContext = p.DialContext
	return t
}
