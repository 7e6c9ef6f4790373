package router

import (
	"encoding/json"
	"net/http"
)

// detailBody is the error body shape shared with the upstream Go and Python
// routers; SDKs parse the "detail" field.
type detailBody struct {
	Detail string `json:"detail"`
}

// writeDetail answers with a JSON {"detail": msg} body. The encoder's trailing
// newline is kept on purpose: the upstream router emits it too.
func writeDetail(w http.ResponseWriter, code int, msg string) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Del("Content-Length")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(detailBody{Detail: msg})
}

// httpError is a refusal decided by the router itself (validation, policy,
// resolution). It carries the status and the client-visible detail.
type httpError struct {
	Code   int
	Detail string
}

func (e *httpError) Error() string { return e.Detail }

func errorf(code int, detail string) *httpError { return &httpError{Code: code, Detail: detail} }
