package lateenv

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"sigs.k8s.io/agent-sandbox/internal/latebind"
)

// GET reports the fingerprint of the trusted key (the controller's probe
// checks it), and nothing when late binding is off.
func TestStateReportsKeyID(t *testing.T) {
	s, _ := latebind.GenerateSigner()
	pub, err := latebind.ParsePublicKey(s.PublicKey())
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		store *Store
		want  string
	}{"on": {New(pub, nil, nil), s.KeyID()}, "off": {New(nil, nil, nil), ""}} {
		rec := httptest.NewRecorder()
		tc.store.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, latebind.Path, nil))
		var st latebind.State
		if rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &st) != nil || st.KeyID != tc.want {
			t.Errorf("%s: GET = %d %s, want keyID %q", name, rec.Code, rec.Body.String(), tc.want)
		}
	}
}
