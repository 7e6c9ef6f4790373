package router

import (
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
)

func TestProbes(t *testing.T) {
	m := NewMetrics(BuildInfo{})
	s := NewServer(ServerOptions{ProbeAddr: "127.0.0.1:0", ShutdownTimeout: time.Second, Metrics: m, Log: logr.Discard()})
	if err := s.Bind(); err != nil {
		t.Fatal(err)
	}
	defer s.closeListeners()
	go func() { _ = s.servers[ListenerProbes].Serve(s.lns[ListenerProbes]) }()
	base := "http://" + s.Addr(ListenerProbes).String()
	probe := func(path string) (int, string) {
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		return resp.StatusCode, strings.TrimSpace(readAll(t, resp.Body))
	}
	if code, body := probe("/readyz"); code != 503 || body != "draining" {
		t.Fatalf("readyz before ready: %d %q", code, body)
	}
	s.SetReady(true)
	if code, body := probe("/readyz"); code != 200 || body != "ok" {
		t.Fatalf("readyz ready: %d %q", code, body)
	}
	s.SetReady(false)
	if code, _ := probe("/readyz"); code != 503 {
		t.Fatalf("readyz after unready: %d", code)
	}
	if code, body := probe("/healthz"); code != 200 || body != `{"status":"ok"}` {
		t.Fatalf("healthz: %d %q", code, body)
	}
}

func TestBindFailureReleasesEarlierBinds(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	free, _ := net.Listen("tcp", "127.0.0.1:0")
	freeAddr := free.Addr().String()
	free.Close()
	s := NewServer(ServerOptions{HTTPAddr: freeAddr, MetricsAddr: busy.Addr().String(),
		ShutdownTimeout: time.Second, Proxy: http.NotFoundHandler(), Metrics: NewMetrics(BuildInfo{}), Log: logr.Discard()})
	if err := s.Bind(); err == nil || !strings.Contains(err.Error(), "metrics") {
		t.Fatalf("want a metrics bind error, got %v", err)
	}
	if s.ready.Load() {
		t.Fatal("ready after a failed bind")
	}
	ln, err := net.Listen("tcp", freeAddr)
	if err != nil {
		t.Fatalf("earlier bind not released: %v", err)
	}
	ln.Close()
}
