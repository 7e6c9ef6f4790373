package router

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestAutoResumeHoldsAndShares(t *testing.T) {
	be := backend(t, "127.0.0.21", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "awake") }))
	h := newHarness(t, harnessOpts{autoResume: true, readyTimeout: failAfter})
	h.addSandbox(sandboxSpec{name: "sleepy", addr: be, suspended: true})
	h.control.autoReady = map[SandboxKey]netip.AddrPort{key("sleepy"): be}
	h.control.readyDelay = 200 * time.Millisecond

	const n = 8
	var wg sync.WaitGroup
	codes := make([]int, n)
	bodies := make([]string, n)
	for i := range n {
		wg.Go(func() {
			resp := mustDo(t, h.request("GET", "/", "sleepy", be, nil))
			defer resp.Body.Close()
			codes[i], bodies[i] = resp.StatusCode, readAll(t, resp.Body)
		})
	}
	wg.Wait()
	for i := range n {
		if codes[i] != 200 || bodies[i] != "awake" {
			t.Fatalf("request %d: %d %q", i, codes[i], bodies[i])
		}
	}
	if got := h.control.patchCount(); got != 1 {
		t.Fatalf("%d resume patches for %d concurrent requests, want 1", got, n)
	}
	if counterValue(h.metrics.resumes.WithLabelValues("default", "success")) != 1 {
		t.Fatal("resume metric")
	}
}

// TestResumeWithStaleHint: the SDK's cached pod IP from before a suspend
// (unknown to this router) does not break the transparent resume, but a hint
// naming another sandbox's pod is refused before anything is woken up.
func TestResumeWithStaleHint(t *testing.T) {
	be := backend(t, "127.0.0.23", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "awake") }))
	other := backend(t, "127.0.0.24", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "other") }))
	h := newHarness(t, harnessOpts{autoResume: true, readyTimeout: failAfter})
	h.addSandbox(sandboxSpec{name: "other", addr: other})
	h.addSandbox(sandboxSpec{name: "sleepy", addr: be, suspended: true})
	h.control.autoReady = map[SandboxKey]netip.AddrPort{key("sleepy"): be}

	req := h.request("GET", "/", "sleepy", be, nil)
	req.Header.Set("X-Sandbox-Pod-IP", "127.0.0.24")
	resp := mustDo(t, req)
	resp.Body.Close()
	if resp.StatusCode != 403 || h.control.patchCount() != 0 {
		t.Fatalf("foreign hint: %d, %d patches", resp.StatusCode, h.control.patchCount())
	}
	req = h.request("GET", "/", "sleepy", be, nil)
	req.Header.Set("X-Sandbox-Pod-IP", "10.244.0.99") // the old pod's address
	resp = mustDo(t, req)
	defer resp.Body.Close()
	if resp.StatusCode != 200 || readAll(t, resp.Body) != "awake" {
		t.Fatalf("stale hint: %d", resp.StatusCode)
	}
}

func TestAutoResumeTimeoutAndFailures(t *testing.T) {
	be := backend(t, "127.0.0.22", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "x") }))
	t.Run("never ready", func(t *testing.T) {
		h := newHarness(t, harnessOpts{autoResume: true, readyTimeout: 150 * time.Millisecond})
		h.addSandbox(sandboxSpec{name: "sleepy", addr: be, suspended: true})
		resp := mustDo(t, h.request("GET", "/", "sleepy", be, nil))
		defer resp.Body.Close()
		if resp.StatusCode != 503 || detailOf(t, resp) != "Timed out waiting for sandbox default/sleepy to become ready." {
			t.Fatalf("status %d", resp.StatusCode)
		}
		if h.control.patchCount() != 1 {
			t.Fatal("resume should have been attempted")
		}
	})
	t.Run("patch fails", func(t *testing.T) {
		h := newHarness(t, harnessOpts{autoResume: true})
		h.control.fail = errors.New("forbidden by RBAC")
		h.addSandbox(sandboxSpec{name: "sleepy", addr: be, suspended: true})
		resp := mustDo(t, h.request("GET", "/", "sleepy", be, nil))
		defer resp.Body.Close()
		if resp.StatusCode != 503 {
			t.Fatalf("status %d", resp.StatusCode)
		}
	})
	t.Run("auto-resume disabled", func(t *testing.T) {
		h := newHarness(t, harnessOpts{})
		h.addSandbox(sandboxSpec{name: "sleepy", addr: be, suspended: true})
		resp := mustDo(t, h.request("GET", "/", "sleepy", be, nil))
		defer resp.Body.Close()
		if resp.StatusCode != 503 || detailOf(t, resp) != "Sandbox default/sleepy is suspended." || h.control.patchCount() != 0 {
			t.Fatalf("status %d", resp.StatusCode)
		}
	})
	t.Run("terminal reason fails fast", func(t *testing.T) {
		h := newHarness(t, harnessOpts{autoResume: true, readyTimeout: failAfter})
		h.addSandbox(sandboxSpec{name: "old", addr: be, notReady: true, reason: "SandboxExpired"})
		resp := mustDo(t, h.request("GET", "/", "old", be, nil))
		defer resp.Body.Close()
		if resp.StatusCode != 503 {
			t.Fatalf("status %d", resp.StatusCode)
		}
	})
	t.Run("starting sandbox is held until ready", func(t *testing.T) {
		h := newHarness(t, harnessOpts{readyTimeout: failAfter})
		uid := h.addSandbox(sandboxSpec{name: "booting", addr: be, notReady: true})
		go func() {
			time.Sleep(100 * time.Millisecond)
			h.addSandbox(sandboxSpec{name: "booting", uid: uid, addr: be})
		}()
		resp := mustDo(t, h.request("GET", "/", "booting", be, nil))
		defer resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("status %d", resp.StatusCode)
		}
	})
	t.Run("deleted while held", func(t *testing.T) {
		h := newHarness(t, harnessOpts{readyTimeout: failAfter})
		h.addSandbox(sandboxSpec{name: "doomed", addr: be, notReady: true})
		go func() {
			time.Sleep(100 * time.Millisecond)
			h.idx.DeleteSandbox(key("doomed"))
		}()
		resp := mustDo(t, h.request("GET", "/", "doomed", be, nil))
		defer resp.Body.Close()
		if resp.StatusCode != 503 {
			t.Fatalf("status %d", resp.StatusCode)
		}
	})
}

// TestAutoResumeOnlyAfterAuthorization: a caller the authorizer refuses
// (401 or 403) never wakes a suspended sandbox, and a sandbox annotated
// agents.x-k8s.io/auto-resume: "false" stays suspended for everybody.
func TestAutoResumeOnlyAfterAuthorization(t *testing.T) {
	be := backend(t, "127.0.0.25", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "awake") }))
	deny := AuthorizerFunc(func(_ context.Context, r *http.Request, _, _ string) error {
		switch r.Header.Get("Authorization") {
		case "Bearer ok":
			return nil
		case "":
			return ErrUnauthenticated
		}
		return ErrForbidden
	})
	h := newHarness(t, harnessOpts{autoResume: true, readyTimeout: failAfter, authz: deny})
	h.addSandbox(sandboxSpec{name: "sleepy", addr: be, suspended: true})
	h.addSandbox(sandboxSpec{name: "quarantined", addr: be, suspended: true, noResume: true})
	h.control.autoReady = map[SandboxKey]netip.AddrPort{key("sleepy"): be}

	for auth, want := range map[string]int{"": 401, "Bearer intruder": 403} {
		req := h.request("GET", "/", "sleepy", be, nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp := mustDo(t, req)
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Fatalf("%q: status %d, want %d", auth, resp.StatusCode, want)
		}
	}
	if n := h.control.patchCount(); n != 0 {
		t.Fatalf("refused requests made %d resume patches", n)
	}
	req := h.request("GET", "/", "quarantined", be, nil)
	req.Header.Set("Authorization", "Bearer ok")
	resp := mustDo(t, req)
	if d := detailOf(t, resp); resp.StatusCode != 503 || !strings.Contains(d, "opts out of auto-resume") {
		t.Fatalf("opted-out sandbox: %d %q", resp.StatusCode, d)
	}
	resp.Body.Close()
	if n := h.control.patchCount(); n != 0 {
		t.Fatalf("opted-out sandbox was resumed (%d patches)", n)
	}
	// The authorized caller does wake the ordinary one.
	req = h.request("GET", "/", "sleepy", be, nil)
	req.Header.Set("Authorization", "Bearer ok")
	resp = mustDo(t, req)
	defer resp.Body.Close()
	if resp.StatusCode != 200 || readAll(t, resp.Body) != "awake" || h.control.patchCount() != 1 {
		t.Fatalf("authorized request: %d, %d patches", resp.StatusCode, h.control.patchCount())
	}
}
