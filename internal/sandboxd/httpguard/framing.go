package httpguard

import (
	"bytes"
	"strconv"
	"sync/atomic"
)

// Limits of the tracker. They are at least as generous as net/http's own
// (1 MiB + 4 KiB of header by default, 4 KiB chunk lines), so a request
// net/http accepts never trips them; anything bigger net/http refuses and
// closes anyway.
const (
	maxHeadBytes      = 2 << 20
	maxChunkLineBytes = 8 << 10
)

type framingState int

const (
	inHead      framingState = iota // request line and header fields
	inBody                          // Content-Length body
	inChunkLine                     // chunk size line
	inChunkData                     // chunk data
	inChunkEnd                      // CRLF after chunk data
	inTrailer                       // trailer fields after the last chunk
)

// framing follows HTTP/1 message boundaries in a connection's byte stream,
// independently of net/http, and records the first request whose framing
// is ambiguous: Transfer-Encoding together with Content-Length, or
// Transfer-Encoding on HTTP/1.0 (RFC 9112 §6.1 treats both as faulty
// framing). It fails closed: bytes it cannot parse also poison the
// connection, since net/http rejects such input too and a legitimate
// client never sends it.
//
// feed is only called from the goroutine reading the connection; the
// verdict is read by handlers, hence the atomic.
type framing struct {
	state   framingState
	line    []byte // the incomplete line being read
	head    int    // bytes of the current head so far
	remain  uint64 // body or chunk bytes left
	crlf    int    // bytes of the CRLF after chunk data seen so far
	started bool   // the request line of the current head was read
	http10  bool
	cl, te  bool
	clValue string
	verdict atomic.Pointer[string]
}

func (f *framing) poisoned() string {
	if p := f.verdict.Load(); p != nil {
		return *p
	}
	return ""
}

func (f *framing) poison(reason string) {
	f.verdict.CompareAndSwap(nil, &reason)
}

func (f *framing) feed(p []byte) {
	for len(p) > 0 && f.verdict.Load() == nil {
		switch f.state {
		case inBody, inChunkData:
			n := min(uint64(len(p)), f.remain)
			f.remain -= n
			p = p[n:]
			if f.remain == 0 {
				if f.state == inBody {
					f.state = inHead
				} else {
					f.state = inChunkEnd
				}
			}
		case inChunkEnd:
			want := "\r\n"[f.crlf]
			if p[0] != want {
				f.poison("malformed chunked body")
				return
			}
			p = p[1:]
			if f.crlf++; f.crlf == 2 {
				f.crlf = 0
				f.state = inChunkLine
			}
		default:
			line, rest, complete := f.takeLine(p)
			p = rest
			if !complete {
				return
			}
			f.endLine(line)
		}
	}
}

// takeLine accumulates bytes up to and including '\n'. It returns the
// line without its terminator once complete.
func (f *framing) takeLine(p []byte) (line, rest []byte, complete bool) {
	i := bytes.IndexByte(p, '\n')
	chunk := p
	if i >= 0 {
		chunk = p[:i+1]
	}
	limit := maxChunkLineBytes
	if f.state == inHead || f.state == inTrailer {
		limit = maxHeadBytes
		f.head += len(chunk)
		if f.head > limit {
			f.poison("request header too large")
			return nil, nil, false
		}
	} else if len(f.line)+len(chunk) > limit {
		f.poison("chunk size line too long")
		return nil, nil, false
	}
	if i < 0 {
		f.line = append(f.line, p...)
		return nil, nil, false
	}
	if len(f.line) == 0 {
		line = p[:i]
	} else {
		f.line = append(f.line, p[:i]...)
		line = f.line
	}
	f.line = f.line[:0]
	return line, p[i+1:], true
}

func (f *framing) endLine(line []byte) {
	switch f.state {
	case inHead:
		f.headLine(bytes.TrimSuffix(line, []byte("\r")))
	case inChunkLine:
		// net/http insists on CRLF here.
		if !bytes.HasSuffix(line, []byte("\r")) {
			f.poison("malformed chunked body")
			return
		}
		size := bytes.TrimSuffix(line, []byte("\r"))
		if i := bytes.IndexByte(size, ';'); i >= 0 {
			size = size[:i]
		}
		size = bytes.TrimRight(size, " \t")
		n, err := strconv.ParseUint(string(size), 16, 64)
		if err != nil || len(size) > 16 {
			f.poison("malformed chunk size")
			return
		}
		if n == 0 {
			f.state = inTrailer
			return
		}
		f.remain, f.state = n, inChunkData
	case inTrailer:
		if len(bytes.TrimSuffix(line, []byte("\r"))) == 0 {
			f.resetHead()
		}
	}
}

func (f *framing) headLine(line []byte) {
	if !f.started {
		if len(line) == 0 {
			// Stray empty lines between requests (RFC 9112 §2.2).
			return
		}
		f.started = true
		f.http10 = bytes.HasSuffix(line, []byte(" HTTP/1.0"))
		return
	}
	if len(line) == 0 {
		f.endHead()
		return
	}
	if line[0] == ' ' || line[0] == '\t' {
		// An obsolete line folding continues the previous field's value;
		// it never starts a field of its own.
		return
	}
	name, value, ok := bytes.Cut(line, []byte(":"))
	if !ok {
		return
	}
	switch {
	case bytes.EqualFold(name, []byte("Content-Length")):
		f.cl = true
		if f.clValue == "" {
			f.clValue = string(bytes.Trim(value, " \t"))
		}
	case bytes.EqualFold(name, []byte("Transfer-Encoding")):
		f.te = true
	}
}

func (f *framing) endHead() {
	switch {
	case f.te && f.cl:
		f.poison("both Content-Length and Transfer-Encoding are set")
	case f.te && f.http10:
		f.poison("Transfer-Encoding on an HTTP/1.0 request")
	case f.te:
		// net/http accepts exactly one Transfer-Encoding, "chunked", and
		// refuses and closes on anything else.
		f.resetHead()
		f.state = inChunkLine
	case f.cl:
		n, err := strconv.ParseUint(f.clValue, 10, 63)
		if err != nil {
			f.poison("invalid Content-Length")
			return
		}
		f.resetHead()
		if n > 0 {
			f.remain, f.state = n, inBody
		}
	default:
		f.resetHead()
	}
}

func (f *framing) resetHead() {
	f.state, f.head, f.started, f.http10, f.cl, f.te, f.clValue = inHead, 0, false, false, false, false, ""
}
