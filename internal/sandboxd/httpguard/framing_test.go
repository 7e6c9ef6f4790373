package httpguard

import (
	"strconv"
	"strings"
	"testing"
)

func TestFramingVerdicts(t *testing.T) {
	const (
		get     = "GET / HTTP/1.1\r\nHost: x\r\n\r\n"
		post    = "POST /execute HTTP/1.1\r\nHost: x\r\nContent-Length: 18\r\n\r\n{\"command\":\"true\"}"
		chunked = "POST /execute HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" +
			"5;ext=1\r\nhello\r\n10 \r\n0123456789abcdef\r\n0\r\nX-Trailer: t\r\n\r\n"
		// A body that looks like a smuggling request must not be read
		// as one.
		innerHead = "GET / HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n"
	)
	bodyLooksLikeHead := "POST /x HTTP/1.1\r\nContent-Length: " + strconv.Itoa(len(innerHead)) + "\r\n\r\n" + innerHead
	for _, tc := range []struct {
		name, stream, want string
	}{
		{"plain requests", get + post + get, ""},
		{"chunked", chunked + get, ""},
		{"stray empty lines between requests", get + "\r\n" + get, ""},
		{"body that looks like a head", bodyLooksLikeHead + get, ""},
		{"folded line is not a field", "GET / HTTP/1.1\r\nX-A: a\r\n Transfer-Encoding: chunked\r\nContent-Length: 0\r\n\r\n", ""},
		{"bare LF heads", "GET / HTTP/1.1\nHost: x\n\n" + get, ""},
		{"CL then TE", "POST / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", "both Content-Length and Transfer-Encoding are set"},
		{"TE then CL, odd case", "POST / HTTP/1.1\r\ntransfer-encoding: chunked\r\ncontent-LENGTH: 3\r\n\r\n", "both Content-Length and Transfer-Encoding are set"},
		{"smuggled after a good request", post + "POST / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n", "both Content-Length and Transfer-Encoding are set"},
		{"smuggled after a chunked request", chunked + "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n", "both Content-Length and Transfer-Encoding are set"},
		{"TE on HTTP/1.0", "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", "Transfer-Encoding on an HTTP/1.0 request"},
		{"bad chunk size", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "malformed chunk size"},
		{"chunk without CRLF after data", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nab\r\n", "malformed chunked body"},
		{"chunk line with bare LF", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n1\na\r\n0\r\n\r\n", "malformed chunked body"},
		{"invalid Content-Length", "POST / HTTP/1.1\r\nContent-Length: 1, 2\r\n\r\n", "invalid Content-Length"},
		{"huge head", "GET / HTTP/1.1\r\nX: " + strings.Repeat("a", maxHeadBytes) + "\r\n\r\n", "request header too large"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var whole framing
			whole.feed([]byte(tc.stream))
			if got := whole.poisoned(); got != tc.want {
				t.Errorf("whole stream: verdict %q, want %q", got, tc.want)
			}
			if len(tc.stream) > 4096 {
				return
			}
			// The same verdict whatever the read sizes, down to one byte
			// per Read.
			for _, size := range []int{1, 2, 3, 7} {
				var f framing
				for s := tc.stream; s != ""; {
					n := min(size, len(s))
					f.feed([]byte(s[:n]))
					s = s[n:]
				}
				if got := f.poisoned(); got != tc.want {
					t.Errorf("reads of %d bytes: verdict %q, want %q", size, got, tc.want)
				}
			}
		})
	}
}

// After the verdict, the tracker stops parsing: the connection is closed
// after the next answer, so nothing later can clear it.
func TestFramingVerdictSticks(t *testing.T) {
	var f framing
	f.feed([]byte("POST / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n"))
	f.feed([]byte("GET / HTTP/1.1\r\n\r\n"))
	if f.poisoned() == "" {
		t.Fatal("verdict lost")
	}
}

// BenchmarkFramingExecuteRequest is the tracker's cost per request of the
// shape the SDKs send to /execute (head plus a small JSON body).
func BenchmarkFramingExecuteRequest(b *testing.B) {
	req := []byte("POST /execute HTTP/1.1\r\nHost: 10.0.0.7:8888\r\nUser-Agent: python-requests/2.32.3\r\n" +
		"Accept-Encoding: gzip, deflate\r\nAccept: */*\r\nConnection: keep-alive\r\nX-Sandbox-ID: sb\r\n" +
		"X-Sandbox-Namespace: default\r\nX-Sandbox-Port: 8888\r\nContent-Type: application/json\r\n" +
		"Content-Length: 18\r\n\r\n{\"command\":\"true\"}")
	var f framing
	b.SetBytes(int64(len(req)))
	for b.Loop() {
		f.feed(req)
	}
	if f.poisoned() != "" {
		b.Fatal(f.poisoned())
	}
}
