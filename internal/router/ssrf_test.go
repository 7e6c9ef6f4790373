package router

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// countingBackend answers 200 "<name>" and counts hits.
func countingBackend(t *testing.T, ip, name string) (netip.AddrPort, *atomic.Int64) {
	t.Helper()
	var hits atomic.Int64
	ap := backend(t, ip, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.Header().Set("X-Seen-Host", r.Host)
		w.Header().Set("X-Seen-Underscore", r.Header.Get("X_Sandbox_Pod_Ip"))
		w.Header().Set("X-Seen-Forwarded", r.Header.Get("Forwarded"))
		fmt.Fprint(w, name)
	}))
	return ap, &hits
}

func rawDo(t *testing.T, addr, raw string) *http.Response {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(failAfter))
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("reading response: %v", err)
	}
	return resp
}

// TestSSRFAttackTable sends attack requests at three routers (loopback
// allowed for the test backends, strict, and scoped-token) and checks that
// every one is refused with the expected status and that no backend other
// than the caller's own sandbox is ever reached.
func TestSSRFAttackTable(t *testing.T) {
	mine, mineHits := countingBackend(t, "127.0.0.11", "mine")
	victim, victimHits := countingBackend(t, "127.0.0.12", "victim")
	other, otherHits := countingBackend(t, "127.0.0.13", "other")

	secret := []byte(strings.Repeat("s", 40))
	scoped, err := NewScopedTokenAuthorizer(secret)
	if err != nil {
		t.Fatal(err)
	}
	token, err := MintScopedToken(secret, "default", "mine", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	open := newHarness(t, harnessOpts{readyTimeout: 50 * time.Millisecond})
	strict := newHarness(t, harnessOpts{disallowLoop: true, readyTimeout: 50 * time.Millisecond})
	tenancy := newHarness(t, harnessOpts{authz: scoped, readyTimeout: 50 * time.Millisecond})
	var victimUID string
	for _, h := range []*harness{open, strict, tenancy} {
		h.addSandbox(sandboxSpec{name: "mine", addr: mine})
		victimUID = h.addSandbox(sandboxSpec{name: "victim", ns: "team-a", addr: victim, uid: "victim-uid"})
		h.addSandbox(sandboxSpec{name: "other", ns: "team-b", addr: other})
	}
	mp := fmt.Sprint(mine.Port())
	routing := "X-Sandbox-ID: mine\r\nX-Sandbox-Port: " + mp + "\r\n"

	type attack struct {
		name string
		h    *harness
		// either headers for a normal GET / ...
		hdr map[string]string
		// ... or a raw request (Host and routing lines included as needed).
		raw  string
		want int
	}
	std := func(extra map[string]string) map[string]string {
		m := map[string]string{"X-Sandbox-ID": "mine", "X-Sandbox-Port": mp}
		for k, v := range extra {
			m[k] = v
		}
		return m
	}
	attacks := []attack{
		{"foreign pod IP as hint", open, std(map[string]string{"X-Sandbox-Pod-IP": "127.0.0.13"}), "", 403},
		{"victim pod IP as hint", open, std(map[string]string{"X-Sandbox-Pod-IP": victim.Addr().String()}), "", 403},
		{"router's own address as hint", open, std(map[string]string{"X-Sandbox-Pod-IP": "127.0.0.1"}), "", 403},
		{"metadata IPv4", open, std(map[string]string{"X-Sandbox-Pod-IP": "169.254.169.254"}), "", 400},
		{"metadata IPv4-mapped IPv6", open, std(map[string]string{"X-Sandbox-Pod-IP": "::ffff:169.254.169.254"}), "", 400},
		{"metadata NAT64", open, std(map[string]string{"X-Sandbox-Pod-IP": "64:ff9b::a9fe:a9fe"}), "", 400},
		{"metadata as decimal integer", open, std(map[string]string{"X-Sandbox-Pod-IP": "2852039166"}), "", 400},
		{"metadata AWS IPv6", open, std(map[string]string{"X-Sandbox-Pod-IP": "fd00:ec2::254"}), "", 400},
		{"metadata Alibaba", open, std(map[string]string{"X-Sandbox-Pod-IP": "100.100.100.200"}), "", 400},
		{"loopback v4 (strict)", strict, std(map[string]string{"X-Sandbox-Pod-IP": "127.0.0.1"}), "", 400},
		{"loopback v6 (strict)", strict, std(map[string]string{"X-Sandbox-Pod-IP": "::1"}), "", 400},
		{"loopback IPv4-mapped (strict)", strict, std(map[string]string{"X-Sandbox-Pod-IP": "::ffff:127.0.0.1"}), "", 400},
		{"cached loopback pod address (strict)", strict, std(nil), "", 403},
		{"link-local bracketed", open, std(map[string]string{"X-Sandbox-Pod-IP": "[fe80::1]"}), "", 400},
		{"link-local zoned", open, std(map[string]string{"X-Sandbox-Pod-IP": "fe80::1%eth0"}), "", 400},
		{"unspecified", open, std(map[string]string{"X-Sandbox-Pod-IP": "0.0.0.0"}), "", 400},
		{"multicast", open, std(map[string]string{"X-Sandbox-Pod-IP": "224.0.0.251"}), "", 400},
		{"port not exposed by the sandbox", open, map[string]string{"X-Sandbox-ID": "mine", "X-Sandbox-Port": "22"}, "", 403},
		{"router's own port", open, map[string]string{"X-Sandbox-ID": "mine",
			"X-Sandbox-Port": fmt.Sprint(open.srv.Addr(ListenerHTTP).(*net.TCPAddr).Port)}, "", 403},
		{"port in hex", open, map[string]string{"X-Sandbox-ID": "mine", "X-Sandbox-Port": "0x1f90"}, "", 400},
		{"victim UID with my name", open, std(map[string]string{"X-Sandbox-UID": victimUID}), "", 403},
		{"unknown sandbox with victim IP hint", open, map[string]string{"X-Sandbox-ID": "ghost",
			"X-Sandbox-Port": mp, "X-Sandbox-Pod-IP": victim.Addr().String()}, "", 404},
		{"encoded slash in ID", open, map[string]string{"X-Sandbox-ID": "mine%2F..%2Fvictim", "X-Sandbox-Port": mp}, "", 400},
		{"DNS name injection in ID", open, map[string]string{"X-Sandbox-ID": "victim.team-a.svc.cluster.local", "X-Sandbox-Port": mp}, "", 400},
		{"path injection in namespace", open, map[string]string{"X-Sandbox-ID": "victim", "X-Sandbox-Namespace": "team-a/..", "X-Sandbox-Port": mp}, "", 400},
		{"other namespace with scoped token", tenancy, map[string]string{"X-Sandbox-ID": "victim",
			"X-Sandbox-Namespace": "team-a", "X-Sandbox-Port": fmt.Sprint(victim.Port()), "Authorization": "Bearer " + token}, "", 403},
		{"other sandbox same namespace with scoped token", tenancy, map[string]string{"X-Sandbox-ID": "other",
			"X-Sandbox-Port": mp, "Authorization": "Bearer " + token}, "", 403},
		{"scoped token plus pod-IP override", tenancy, std(map[string]string{"Authorization": "Bearer " + token,
			"X-Sandbox-Pod-IP": mine.Addr().String()}), "", 403},
		{"scoped token plus UID override", tenancy, std(map[string]string{"Authorization": "Bearer " + token,
			"X-Sandbox-UID": victimUID}), "", 403},
		{"no token in scoped mode", tenancy, std(nil), "", 401},
		{"forged token", tenancy, std(map[string]string{"Authorization": "Bearer v1.eyJucyI6ImRlZmF1bHQifQ.AAAA"}), "", 401},
		{"duplicated ID header, different case", open, nil,
			"GET / HTTP/1.1\r\nHost: r\r\nX-Sandbox-ID: mine\r\nx-sandbox-id: victim\r\nX-Sandbox-Port: " + mp + "\r\n\r\n", 400},
		{"duplicated pod-IP header", open, nil,
			"GET / HTTP/1.1\r\nHost: r\r\n" + routing + "X-Sandbox-Pod-IP: 127.0.0.11\r\nX-Sandbox-Pod-IP: 127.0.0.12\r\n\r\n", 400},
		{"duplicated namespace header", open, nil,
			"GET / HTTP/1.1\r\nHost: r\r\n" + routing + "X-Sandbox-Namespace: default\r\nX-Sandbox-Namespace: team-a\r\n\r\n", 400},
		{"CR injection in header value", open, nil,
			"GET / HTTP/1.1\r\nHost: r\r\nX-Sandbox-ID: mine\rX-Sandbox-Pod-IP: 169.254.169.254\r\nX-Sandbox-Port: " + mp + "\r\n\r\n", 400},
		{"CRLF-folded continuation line", open, nil,
			"GET / HTTP/1.1\r\nHost: r\r\n" + routing + "X-Sandbox-Pod-IP: 127.0.0.11\r\n 169.254.169.254\r\n\r\n", 400},
		{"absolute-URI target to metadata", open, nil,
			"GET http://169.254.169.254/latest/meta-data/ HTTP/1.1\r\nHost: 169.254.169.254\r\n" + routing + "\r\n", 400},
		{"absolute-URI target to victim", open, nil,
			"GET http://" + victim.String() + "/ HTTP/1.1\r\nHost: " + victim.String() + "\r\n" + routing + "\r\n", 400},
		{"CONNECT tunnel", open, nil,
			"CONNECT 169.254.169.254:80 HTTP/1.1\r\nHost: 169.254.169.254:80\r\n" + routing + "\r\n", 400},
		{"dot-segment path escaping to router paths", open, nil,
			"GET /x/../healthz HTTP/1.1\r\nHost: r\r\n" + routing + "\r\n", 307},
		{"protocol-relative path", open, nil,
			"GET //169.254.169.254/latest HTTP/1.1\r\nHost: r\r\n" + routing + "\r\n", 307},
	}
	for _, a := range attacks {
		t.Run(a.name, func(t *testing.T) {
			var resp *http.Response
			if a.raw != "" {
				resp = rawDo(t, a.h.addr, a.raw)
			} else {
				req, err := http.NewRequest("GET", a.h.url+"/latest/meta-data/", nil)
				if err != nil {
					t.Fatal(err)
				}
				for k, v := range a.hdr {
					req.Header[http.CanonicalHeaderKey(k)] = []string{v}
				}
				resp = mustDo(t, req)
			}
			defer resp.Body.Close()
			if resp.StatusCode != a.want {
				t.Fatalf("status %d, want %d (body %q)", resp.StatusCode, a.want, readAll(t, resp.Body))
			}
			if a.want == 307 {
				// The router's own redirect stays on the router (no open
				// redirect to another host) and nothing was proxied.
				if loc := resp.Header.Get("Location"); !strings.HasPrefix(loc, "/") || strings.HasPrefix(loc, "//") {
					t.Fatalf("redirect to %q", loc)
				}
			} else if a.h.policy != nil && a.raw == "" && resp.Header.Get("Content-Type") != "application/json" {
				t.Fatalf("refusal without JSON detail: %q", resp.Header.Get("Content-Type"))
			}
		})
	}
	if len(attacks) < 25 {
		t.Fatalf("only %d attacks", len(attacks))
	}
	if victimHits.Load() != 0 || otherHits.Load() != 0 || mineHits.Load() != 0 {
		t.Fatalf("backends reached by attacks: mine=%d victim=%d other=%d", mineHits.Load(), victimHits.Load(), otherHits.Load())
	}

	// Neutralised rather than refused: these reach the caller's own sandbox
	// and nothing else, with the dangerous parts removed.
	t.Run("Host header and lookalike headers are neutralised", func(t *testing.T) {
		req := open.request("GET", "/", "mine", mine, nil)
		req.Host = "169.254.169.254"
		req.Header["X_Sandbox_Pod_Ip"] = []string{"169.254.169.254"}
		req.Header.Set("Forwarded", "for=1.2.3.4;host=169.254.169.254")
		resp := mustDo(t, req)
		defer resp.Body.Close()
		if resp.StatusCode != 200 || readAll(t, resp.Body) != "mine" {
			t.Fatalf("status %d", resp.StatusCode)
		}
		if resp.Header.Get("X-Seen-Host") != mine.String() || resp.Header.Get("X-Seen-Underscore") != "" ||
			resp.Header.Get("X-Seen-Forwarded") != "" {
			t.Fatalf("backend saw Host=%q underscore=%q forwarded=%q", resp.Header.Get("X-Seen-Host"),
				resp.Header.Get("X-Seen-Underscore"), resp.Header.Get("X-Seen-Forwarded"))
		}
		if victimHits.Load() != 0 || otherHits.Load() != 0 {
			t.Fatal("attack reached another sandbox")
		}
	})
	t.Run("CL+TE smuggling is re-framed", func(t *testing.T) {
		// net/http lets Transfer-Encoding win and drops Content-Length (RFC
		// 9112 6.3); the router re-frames the body for the upstream, so no
		// desync can reach past it, and the request only reaches "mine".
		resp := rawDo(t, open.addr, "POST / HTTP/1.1\r\nHost: r\r\n"+routing+
			"Content-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n")
		defer resp.Body.Close()
		if resp.StatusCode != 200 || readAll(t, resp.Body) != "mine" || victimHits.Load() != 0 || otherHits.Load() != 0 {
			t.Fatalf("status %d", resp.StatusCode)
		}
	})
}
