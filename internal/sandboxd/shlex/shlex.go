// Package shlex splits a command line into an argv exactly like Python's
// shlex.split in POSIX mode, which the legacy runtime API (/execute) uses:
// whitespace separates words, single quotes are literal, double quotes
// honour backslash only before `\` and `"`, a backslash outside quotes
// escapes any character, and there are no comments, variables or globs.
package shlex

import "errors"

var (
	// ErrNoClosingQuotation mirrors Python's ValueError text.
	ErrNoClosingQuotation = errors.New("No closing quotation") //nolint:staticcheck // verbatim Python message
	// ErrNoEscapedCharacter mirrors Python's ValueError text.
	ErrNoEscapedCharacter = errors.New("No escaped character") //nolint:staticcheck // verbatim Python message
)

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\r' || c == '\n' }

// Split returns the words of s. Empty quotes make an empty word.
func Split(s string) ([]string, error) {
	words := []string{}
	var word []byte
	inWord := false
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case isSpace(c):
			if inWord {
				words = append(words, string(word))
				word, inWord = word[:0], false
			}
			i++
		case c == '\\':
			if i+1 >= len(s) {
				return nil, ErrNoEscapedCharacter
			}
			word = append(word, s[i+1])
			i += 2
			inWord = true
		case c == '\'':
			i++
			for {
				if i >= len(s) {
					return nil, ErrNoClosingQuotation
				}
				if s[i] == '\'' {
					i++
					break
				}
				word = append(word, s[i])
				i++
			}
			inWord = true
		case c == '"':
			i++
			for {
				if i >= len(s) {
					return nil, ErrNoClosingQuotation
				}
				c := s[i]
				if c == '"' {
					i++
					break
				}
				if c == '\\' {
					if i+1 >= len(s) {
						return nil, ErrNoEscapedCharacter
					}
					n := s[i+1]
					if n != '\\' && n != '"' {
						word = append(word, '\\')
					}
					word = append(word, n)
					i += 2
					continue
				}
				word = append(word, c)
				i++
			}
			inWord = true
		default:
			word = append(word, c)
			inWord = true
			i++
		}
	}
	if inWord {
		words = append(words, string(word))
	}
	return words, nil
}
