package main

import (
	"path/filepath"
	"strconv"
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

// --serve-v1alpha1 has three states: unset leaves the CRDs as installed
// (the reference never touches served), true and false set it.
func TestServeV1alpha1Flag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // "" = unset
	}{
		{nil, ""},
		{[]string{"--serve-v1alpha1"}, "true"},
		{[]string{"--serve-v1alpha1=true"}, "true"},
		{[]string{"--serve-v1alpha1=false"}, "false"},
	} {
		f, _, err := parseFlags(tc.args)
		if err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		got := ""
		if f.serveV1alpha1 != nil {
			got = strconv.FormatBool(*f.serveV1alpha1)
		}
		if got != tc.want {
			t.Errorf("%v: serveV1alpha1 = %q, want %q", tc.args, got, tc.want)
		}
	}
	if _, _, err := parseFlags([]string{"--serve-v1alpha1=maybe"}); err == nil {
		t.Error("--serve-v1alpha1=maybe accepted")
	}
}
