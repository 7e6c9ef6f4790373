package legacy

import (
	"math"
	"strconv"
	"strings"
)

// unquote is Python's urllib.parse.unquote: valid %XX escapes are decoded,
// anything else (a lone %, bad hex, '+') is kept as is.
func unquote(s string) string {
	if !strings.Contains(s, "%") {
		return s
	}
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) && isHex(s[i+1]) && isHex(s[i+2]) {
			b = append(b, unhex(s[i+1])<<4|unhex(s[i+2]))
			i += 2
			continue
		}
		b = append(b, s[i])
	}
	return string(b)
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case '0' <= c && c <= '9':
		return c - '0'
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10
	default:
		return c - 'A' + 10
	}
}

// pyFloat formats f like Python's repr of a float in the range a timeout
// or a file time can take: shortest round-trip digits, always with a
// fractional part ("300.0", "2.5").
func pyFloat(f float64) string {
	if math.Abs(f) >= 1e16 || (f != 0 && math.Abs(f) < 1e-4) {
		return strconv.FormatFloat(f, 'e', -1, 64)
	}
	s := strconv.FormatFloat(f, 'f', -1, 64)
	if !strings.ContainsAny(s, ".eE") {
		s += ".0"
	}
	return s
}

// pyStr formats s like Python's repr of a str: single quotes unless the
// text contains a single quote and no double quote.
func pyStr(s string) string {
	q := byte('\'')
	if strings.Contains(s, "'") && !strings.Contains(s, `"`) {
		q = '"'
	}
	var b strings.Builder
	b.WriteByte(q)
	for _, r := range s {
		switch {
		case r == '\\':
			b.WriteString(`\\`)
		case r == rune(q):
			b.WriteByte('\\')
			b.WriteByte(q)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x20 || r == 0x7f:
			b.WriteString(`\x`)
			b.WriteString(strconv.FormatInt(int64(r)|0x100, 16)[1:])
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte(q)
	return b.String()
}

// pyList formats argv like Python's repr of a list of str.
func pyList(argv []string) string {
	parts := make([]string, len(argv))
	for i, a := range argv {
		parts[i] = pyStr(a)
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// pyFloatJSON is a float64 that marshals like Python's json.dumps does,
// which always writes a fractional part.
type pyFloatJSON float64

func (f pyFloatJSON) MarshalJSON() ([]byte, error) {
	if math.IsInf(float64(f), 0) || math.IsNaN(float64(f)) {
		return []byte("0.0"), nil
	}
	return []byte(pyFloat(float64(f))), nil
}
