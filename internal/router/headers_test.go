package router

import (
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
)

func hdr(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return h
}

func TestParseRouteDefaultsAndCapture(t *testing.T) {
	r, err := ParseRoute(hdr("X-Sandbox-ID", "sb-1", "X-Sandbox-UID", "u-123"), false)
	if err != nil {
		t.Fatalf("unexpected error %v", err)
	}
	if r.Namespace != "default" || r.Port != 8888 || r.UID != "u-123" || r.ID != "sb-1" {
		t.Fatalf("got %+v", r)
	}
	r, err = ParseRoute(hdr("X-Sandbox-ID", "sb", "X-Sandbox-Namespace", "team-a-prod"), false)
	if err != nil || r.Namespace != "team-a-prod" {
		t.Fatalf("hyphenated namespace: %+v %v", r, err)
	}
}

func TestParseRouteValidation(t *testing.T) {
	long := strings.Repeat("a", 63)
	cases := []struct {
		name   string
		h      http.Header
		detail string // "" = accepted
	}{
		{"missing id", hdr(), msgIDRequired},
		{"empty id", hdr("X-Sandbox-ID", ""), msgIDRequired},
		{"id with dot", hdr("X-Sandbox-ID", "a.b"), msgInvalidID},
		{"id with slash", hdr("X-Sandbox-ID", "a/b"), msgInvalidID},
		{"id with underscore", hdr("X-Sandbox-ID", "a_b"), msgInvalidID},
		{"id upper case", hdr("X-Sandbox-ID", "Abc"), msgInvalidID},
		{"id leading dash", hdr("X-Sandbox-ID", "-ab"), msgInvalidID},
		{"id trailing dash", hdr("X-Sandbox-ID", "ab-"), msgInvalidID},
		{"id 63 chars", hdr("X-Sandbox-ID", long), ""},
		{"id 64 chars", hdr("X-Sandbox-ID", long+"a"), msgInvalidID},
		{"namespace space", hdr("X-Sandbox-ID", "a", "X-Sandbox-Namespace", "a b"), msgInvalidNamespace},
		{"namespace bang", hdr("X-Sandbox-ID", "a", "X-Sandbox-Namespace", "ns!"), msgInvalidNamespace},
		{"namespace hyphens only", hdr("X-Sandbox-ID", "a", "X-Sandbox-Namespace", "---"), msgInvalidNamespace},
		{"port non-numeric", hdr("X-Sandbox-ID", "a", "X-Sandbox-Port", "http"), msgInvalidPort},
		{"port zero", hdr("X-Sandbox-ID", "a", "X-Sandbox-Port", "0"), msgInvalidPort},
		{"port negative", hdr("X-Sandbox-ID", "a", "X-Sandbox-Port", "-1"), msgInvalidPort},
		{"port too big", hdr("X-Sandbox-ID", "a", "X-Sandbox-Port", "65536"), msgInvalidPort},
		{"port plus sign", hdr("X-Sandbox-ID", "a", "X-Sandbox-Port", "+80"), msgInvalidPort},
		{"port 1", hdr("X-Sandbox-ID", "a", "X-Sandbox-Port", "1"), ""},
		{"port 65535", hdr("X-Sandbox-ID", "a", "X-Sandbox-Port", "65535"), ""},
		{"dup id", hdr("X-Sandbox-ID", "a", "x-sandbox-id", "b"), "Multiple X-Sandbox-ID headers are not allowed."},
		// Order: the ID is checked before the namespace and port.
		{"order id first", hdr("X-Sandbox-ID", "A", "X-Sandbox-Namespace", "!", "X-Sandbox-Port", "x"), msgInvalidID},
		{"order namespace before port", hdr("X-Sandbox-ID", "a", "X-Sandbox-Namespace", "!", "X-Sandbox-Port", "x"), msgInvalidNamespace},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseRoute(c.h, false)
			switch {
			case c.detail == "" && err != nil:
				t.Fatalf("want accepted, got %q", err.Detail)
			case c.detail != "" && err == nil:
				t.Fatalf("want %q, got accepted", c.detail)
			case c.detail != "" && (err.Detail != c.detail || err.Code != http.StatusBadRequest):
				t.Fatalf("want 400 %q, got %d %q", c.detail, err.Code, err.Detail)
			}
		})
	}
}

func TestParsePodIPClasses(t *testing.T) {
	cases := []struct {
		ip       string
		ok       bool
		loopback bool // accepted only with allowLoopback
	}{
		{"127.0.0.1", false, true},
		{"::1", false, true},
		{"::ffff:127.0.0.1", false, true},
		{"169.254.169.254", false, false},
		{"fe80::1", false, false},
		{"febf::1", false, false},
		{"fe80::1%eth0", false, false},
		{"224.0.0.1", false, false},
		{"ff02::1", false, false},
		{"0.0.0.0", false, false},
		{"::", false, false},
		{"255.255.255.255", false, false},
		{"not-an-ip", false, false},
		{"", false, false},
		{"[::1]", false, false},
		{"2130706433", false, false},
		{"0x7f000001", false, false},
		{"64:ff9b::a9fe:a9fe", false, false}, // NAT64 of 169.254.169.254
		{"2002:a9fe:a9fe::1", false, false},  // 6to4 of 169.254.169.254
		{"fd00:ec2::254", false, false},      // AWS IMDSv6
		{"10.0.0.7", true, false},
		{"192.168.1.20", true, false},
		{"2001:db8::7", true, false},
		{"fd12:3456::1", true, false},
	}
	for _, c := range cases {
		_, ok := ParsePodIP(c.ip, false)
		if ok != c.ok {
			t.Errorf("ParsePodIP(%q, false) = %v, want %v", c.ip, ok, c.ok)
		}
		_, ok = ParsePodIP(c.ip, true)
		if ok != (c.ok || c.loopback) {
			t.Errorf("ParsePodIP(%q, true) = %v, want %v", c.ip, ok, c.ok || c.loopback)
		}
	}
	// The same message for "not an IP" and "forbidden class".
	for _, ip := range []string{"nope", "169.254.169.254"} {
		_, err := ParseRoute(hdr("X-Sandbox-ID", "a", "X-Sandbox-Pod-IP", ip), false)
		if err == nil || err.Detail != msgInvalidIP {
			t.Errorf("pod ip %q: got %v", ip, err)
		}
	}
	r, err := ParseRoute(hdr("X-Sandbox-ID", "a", "X-Sandbox-Pod-IP", "::ffff:10.1.2.3"), false)
	if err != nil || r.PodIP.String() != "10.1.2.3" {
		t.Errorf("mapped address should be unmapped: %+v %v", r, err)
	}
}

func TestAddrPolicyPermit(t *testing.T) {
	p := NewAddrPolicy(true)
	p.AddSelfPort(8080)
	for _, c := range []struct {
		ap string
		ok bool
	}{
		{"127.0.0.1:9000", true},
		{"127.0.0.1:8080", false}, // the router itself
		{"[::1]:8080", false},
		{"169.254.169.254:80", false},
		{"10.0.0.1:8888", true},
	} {
		ap, _ := netipParseAddrPort(c.ap)
		if got := p.Permit(ap); got != c.ok {
			t.Errorf("Permit(%s) = %v, want %v", c.ap, got, c.ok)
		}
	}
	// The router's own non-loopback addresses are never targets.
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range addrs {
			pfx, err := netip.ParsePrefix(a.String())
			if err != nil || pfx.Addr().IsLoopback() || !pfx.Addr().IsGlobalUnicast() {
				continue
			}
			if p.Permit(netip.AddrPortFrom(pfx.Addr(), 8888)) {
				t.Errorf("own interface address %s permitted", pfx.Addr())
			}
		}
	}
	strict := NewAddrPolicy(false)
	ap, _ := netipParseAddrPort("127.0.0.1:9000")
	if strict.Permit(ap) {
		t.Error("loopback must be refused without the flag")
	}
}

func TestWriteDetail(t *testing.T) {
	rec := httptest.NewRecorder()
	writeDetail(rec, http.StatusBadRequest, "X-Sandbox-ID header is required.")
	if rec.Code != 400 || rec.Header().Get("Content-Type") != "application/json" ||
		rec.Body.String() != `{"detail":"X-Sandbox-ID header is required."}`+"\n" {
		t.Fatalf("got %d %q %q", rec.Code, rec.Header().Get("Content-Type"), rec.Body.String())
	}
}
