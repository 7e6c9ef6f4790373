package sandboxd

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// rawExchange writes raw bytes on a fresh TCP connection to addr, then
// reads responses until the server closes the connection (or 10 s pass,
// which fails the test: a server that keeps the connection open is what
// is under test).
func rawExchange(t *testing.T, addr, raw string) []*http.Response {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	var out []*http.Response
	for {
		r, err := http.ReadResponse(br, nil)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatalf("connection still open after %d responses", len(out))
			}
			if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
				// A reset after the answer is as good as a close.
				t.Logf("read after %d responses: %v", len(out), err)
			}
			return out
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			t.Fatal(err)
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		out = append(out, r)
	}
}

func chunk(s string) string { return fmt.Sprintf("%x\r\n%s\r\n", len(s), s) }

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// TestRequestSmugglingClosesConnection: a request with both Content-Length
// and Transfer-Encoding is answered 400 and the connection closed, so a
// request pipelined behind it is never served, on both HTTP listeners. The
// control cases prove the same raw exchange does serve well-framed
// pipelined and chunked requests.
func TestRequestSmugglingClosesConnection(t *testing.T) {
	root := filepath.Join(t.TempDir(), "workspace")
	d := start(t, validConfig(root))
	legacyAddr := strings.TrimPrefix(d.legacy, "http://")
	restAddr := strings.TrimPrefix(d.rest, "http://")

	execute := func(marker string) string { return `{"command":"touch ` + marker + `"}` }
	legacyPost := func(extra, body string) string {
		return "POST /execute HTTP/1.1\r\nHost: sandbox\r\nContent-Type: application/json\r\n" + extra +
			"Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
	}
	restPut := func(name, extra, body string) string {
		return "PUT /v1/files/" + name + " HTTP/1.1\r\nHost: sandbox\r\n" + extra +
			"Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
	}
	for _, tc := range []struct {
		name, addr, raw string
		// Markers that must (not) exist in the workspace afterwards.
		made, notMade []string
		statuses      []int
	}{
		{
			name: "legacy control: pipelined requests are both served",
			addr: legacyAddr, raw: legacyPost("", execute("ok1")) + legacyPost("Connection: close\r\n", execute("ok2")),
			made: []string{"ok1", "ok2"}, statuses: []int{200, 200},
		},
		{
			name: "legacy control: chunked request is served",
			addr: legacyAddr,
			raw: "POST /execute HTTP/1.1\r\nHost: sandbox\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n" +
				chunk(execute("ok3")) + "0\r\n\r\n",
			made: []string{"ok3"}, statuses: []int{200},
		},
		{
			name: "legacy CL+TE",
			addr: legacyAddr,
			raw: "POST /execute HTTP/1.1\r\nHost: sandbox\r\nContent-Type: application/json\r\nContent-Length: 4\r\n" +
				"Transfer-Encoding: chunked\r\n\r\n" + chunk(execute("smuggled1")) + "0\r\n\r\n" + legacyPost("", execute("behind1")),
			notMade: []string{"smuggled1", "behind1"}, statuses: []int{400},
		},
		{
			name: "legacy TE+CL after a good request",
			addr: legacyAddr,
			raw: legacyPost("", execute("before2")) +
				"POST /execute HTTP/1.1\r\nHost: sandbox\r\nTransfer-Encoding: chunked\r\nContent-Length: 40\r\n\r\n" +
				chunk(execute("smuggled2")) + "0\r\n\r\n" + legacyPost("", execute("behind2")),
			// The good request in the same read may be refused too:
			// the guard fails closed for the whole connection.
			notMade: []string{"smuggled2", "behind2"},
		},
		{
			name:     "rest CL+TE",
			addr:     restAddr,
			raw:      restPut("smuggled3", "Transfer-Encoding: chunked\r\n", chunk("data")+"0\r\n\r\n") + restPut("behind3", "", "data"),
			notMade:  []string{"smuggled3", "behind3"},
			statuses: []int{400},
		},
		{
			name:     "rest control: pipelined PUTs are both served",
			addr:     restAddr,
			raw:      restPut("ok4", "", "data") + restPut("ok5", "Connection: close\r\n", "data"),
			made:     []string{"ok4", "ok5"},
			statuses: []int{204, 204},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resps := rawExchange(t, tc.addr, tc.raw)
			if tc.statuses != nil {
				var got []int
				for _, r := range resps {
					got = append(got, r.StatusCode)
				}
				if fmt.Sprint(got) != fmt.Sprint(tc.statuses) {
					t.Fatalf("statuses %v, want %v", got, tc.statuses)
				}
			}
			for _, r := range resps {
				if r.StatusCode != http.StatusBadRequest {
					continue
				}
				body, _ := io.ReadAll(r.Body)
				// ReadResponse turns "Connection: close" into Close.
				if !r.Close || !strings.Contains(string(body), "ambiguous request framing") ||
					r.Header.Get("Content-Type") != "application/json" {
					t.Errorf("400 answer: close %v, Content-Type %q, body %s",
						r.Close, r.Header.Get("Content-Type"), body)
				}
			}
			// The server closed the connection, so nothing more from it
			// can run: the checks below are final.
			for _, m := range tc.made {
				if !exists(filepath.Join(root, m)) {
					t.Errorf("%s was not created", m)
				}
			}
			for _, m := range tc.notMade {
				if exists(filepath.Join(root, m)) {
					t.Errorf("%s was created", m)
				}
			}
		})
	}

	// The gRPC listener speaks HTTP/2 only: an HTTP/1 request, smuggling
	// or not, gets no HTTP/1 answer and the connection is closed.
	c, err := net.Dial("tcp", d.grpcTo)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, legacyPost("Transfer-Encoding: chunked\r\n", chunk(execute("grpc"))+"0\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatal("gRPC port kept the HTTP/1 connection open")
	}
	if bytes.Contains(got, []byte("HTTP/1.")) || exists(filepath.Join(root, "grpc")) {
		t.Fatalf("gRPC port served HTTP/1: %q", got)
	}
}

// TestLegacyExecuteRefusesSimpleCORSRequests: nothing a cross-site browser
// page can send without a CORS preflight causes a side effect, on any
// endpoint of either HTTP listener that takes a body. Each row would
// create (or delete) a marker; refused rows must leave no trace. Allowed
// rows are the control: the same request shape without the cross-site
// mark works, so the refusals are not an accident of the request.
func TestLegacyExecuteRefusesSimpleCORSRequests(t *testing.T) {
	root := filepath.Join(t.TempDir(), "workspace")
	d := start(t, validConfig(root))
	legacyHost := strings.TrimPrefix(d.legacy, "http://")

	executeBody := func(marker string) io.Reader {
		return strings.NewReader(`{"command":"touch ` + marker + `"}`)
	}
	multipartBody := func(filename string) (io.Reader, string) {
		var b bytes.Buffer
		mw := multipart.NewWriter(&b)
		fw, _ := mw.CreateFormFile("file", filename)
		_, _ = fw.Write([]byte("payload"))
		_ = mw.Close()
		return &b, mw.FormDataContentType()
	}
	crossSite := map[string]string{"Sec-Fetch-Site": "cross-site", "Origin": "https://evil.example"}
	sameSite := map[string]string{"Sec-Fetch-Site": "same-site", "Origin": "http://localhost:3000"}
	oldBrowser := map[string]string{"Origin": "https://evil.example"}
	nullOrigin := map[string]string{"Origin": "null"}

	type row struct {
		name        string
		method, url string
		body        func(marker string) (io.Reader, string) // body and Content-Type
		headers     map[string]string
		status      int
		// Marker is the workspace file the request would create; for
		// DELETE rows it is created first and must survive.
		deletes bool
	}
	execAs := func(ct string) func(string) (io.Reader, string) {
		return func(m string) (io.Reader, string) { return executeBody(m), ct }
	}
	upload := func(m string) (io.Reader, string) { return multipartBody(m) }
	putRaw := func(string) (io.Reader, string) { return strings.NewReader("payload"), "application/octet-stream" }
	putMultipart := func(string) (io.Reader, string) { return multipartBody("ignored") }
	noBody := func(string) (io.Reader, string) { return nil, "" }

	rows := []row{
		// /execute: every CORS-safelisted Content-Type is refused as a
		// body; a JSON body from another origin is refused by origin.
		{name: "execute text/plain", method: "POST", url: d.legacy + "/execute", body: execAs("text/plain"), status: 422},
		{name: "execute text/plain charset", method: "POST", url: d.legacy + "/execute", body: execAs("text/plain;charset=UTF-8"), status: 422},
		{name: "execute form", method: "POST", url: d.legacy + "/execute", body: execAs("application/x-www-form-urlencoded"), status: 422},
		{name: "execute multipart", method: "POST", url: d.legacy + "/execute", body: execAs("multipart/form-data; boundary=x"), status: 422},
		{name: "execute malformed type", method: "POST", url: d.legacy + "/execute", body: execAs("application/json; =bad"), status: 422},
		{name: "execute no type, cross-site", method: "POST", url: d.legacy + "/execute", body: execAs(""), headers: crossSite, status: 403},
		{name: "execute no type, old browser", method: "POST", url: d.legacy + "/execute", body: execAs(""), headers: oldBrowser, status: 403},
		{name: "execute no type, null origin", method: "POST", url: d.legacy + "/execute", body: execAs(""), headers: nullOrigin, status: 403},
		{name: "execute json, same-site page", method: "POST", url: d.legacy + "/execute", body: execAs("application/json"), headers: sameSite, status: 403},
		// /upload is multipart by contract, so only the origin can tell.
		{name: "upload cross-site", method: "POST", url: d.legacy + "/upload", body: upload, headers: crossSite, status: 403},
		{name: "upload old browser", method: "POST", url: d.legacy + "/upload", body: upload, headers: oldBrowser, status: 403},
		// /v1/files: PUT and DELETE always need a preflight, which
		// sandboxd never grants; the origin check is the second wall.
		{name: "rest put cross-site", method: "PUT", url: d.rest + "/v1/files/", body: putRaw, headers: crossSite, status: 403},
		{name: "rest put multipart old browser", method: "PUT", url: d.rest + "/v1/files/", body: putMultipart, headers: oldBrowser, status: 403},
		{name: "rest delete cross-site", method: "DELETE", url: d.rest + "/v1/files/", body: noBody, headers: crossSite, status: 403, deletes: true},
		{name: "rest post is no route", method: "POST", url: d.rest + "/v1/files/", body: putRaw, status: 405},

		// Controls.
		{name: "control execute json", method: "POST", url: d.legacy + "/execute", body: execAs("application/json"), status: 200},
		{name: "control execute json charset", method: "POST", url: d.legacy + "/execute", body: execAs("application/json; charset=utf-8"), status: 200},
		{name: "control execute +json", method: "POST", url: d.legacy + "/execute", body: execAs("application/vnd.example+json"), status: 200},
		{name: "control execute no type", method: "POST", url: d.legacy + "/execute", body: execAs(""), status: 200},
		{name: "control execute same-origin", method: "POST", url: d.legacy + "/execute", body: execAs("application/json"),
			headers: map[string]string{"Sec-Fetch-Site": "same-origin"}, status: 200},
		{name: "control execute user-initiated", method: "POST", url: d.legacy + "/execute", body: execAs("application/json"),
			headers: map[string]string{"Sec-Fetch-Site": "none"}, status: 200},
		{name: "control execute origin is host", method: "POST", url: d.legacy + "/execute", body: execAs(""),
			headers: map[string]string{"Origin": "http://" + legacyHost}, status: 200},
		{name: "control upload", method: "POST", url: d.legacy + "/upload", body: upload, status: 200},
		{name: "control rest put", method: "PUT", url: d.rest + "/v1/files/", body: putRaw, status: 204},
		{name: "control rest delete", method: "DELETE", url: d.rest + "/v1/files/", body: noBody, status: 204, deletes: true},
	}
	for i, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			marker := fmt.Sprintf("marker-%d", i)
			path := filepath.Join(root, marker)
			if r.deletes {
				if err := os.WriteFile(path, []byte("keep"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			url := r.url
			if strings.HasSuffix(url, "/v1/files/") {
				url += marker
			}
			body, ct := r.body(marker)
			req, err := http.NewRequest(r.method, url, body)
			if err != nil {
				t.Fatal(err)
			}
			if ct != "" {
				req.Header.Set("Content-Type", ct)
			}
			for k, v := range r.headers {
				req.Header.Set(k, v)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != r.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, r.status, b)
			}
			refused := r.status >= 400
			if refused && r.status != http.StatusMethodNotAllowed {
				if resp.Header.Get("Content-Type") != "application/json" || !json.Valid(b) {
					t.Errorf("refusal is not JSON: %q %s", resp.Header.Get("Content-Type"), b)
				}
				if r.status == 422 && !strings.Contains(string(b), "application/json") {
					t.Errorf("422 does not name the accepted type: %s", b)
				}
				if r.status == 403 && !strings.Contains(string(b), "cross-origin") {
					t.Errorf("403 does not say why: %s", b)
				}
			}
			// Requests are answered only after their command finished
			// or their file was written, so the marker is final now.
			// A refused request leaves the workspace as it was: no new
			// marker, or the one to delete still there.
			if made := exists(path); made != (refused == r.deletes) {
				t.Errorf("marker present = %v after %s %d", made, r.method, resp.StatusCode)
			}
		})
	}
}
