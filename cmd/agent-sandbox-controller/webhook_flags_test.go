package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// The webhook flags and their defaults are the reference's (spec §4.1).
func TestWebhookFlagDefaults(t *testing.T) {
	f, _, err := parseFlags(nil)
	if err != nil {
		t.Fatal(err)
	}
	w := f.webhook
	if !w.Enable || !w.ManageCerts || w.Port != 9443 || w.CertName != "tls.crt" || w.KeyName != "tls.key" ||
		w.ServiceName != "agent-sandbox-webhook-service" || w.Namespace != "agent-sandbox-system" ||
		!strings.HasSuffix(w.CertDir, filepath.Join("k8s-webhook-server", "serving-certs")) {
		t.Fatalf("webhook defaults = %+v", w)
	}
	for _, bad := range [][]string{{"--webhook-cert-name="}, {"--webhook-key-name="}, {"--webhook-port=0"}} {
		if _, _, err := parseFlags(bad); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
	if _, _, err := parseFlags([]string{"--enable-webhook=false", "--webhook-port=0"}); err != nil {
		t.Errorf("disabled webhook still validates its flags: %v", err)
	}
}
