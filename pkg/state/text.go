package state

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxReason caps one reason or message a part publishes.
const MaxReason = 2048

// Reason is how a part publishes an error's text in its section (/v1/status, `warmd status -o
// json`): control and format characters other than newline and tab are dropped (an ANSI escape or a
// bidi override in a name from a bucket must not rewrite an operator's terminal), invalid UTF-8 is
// dropped, and the text is cut at MaxReason bytes. The parts build their errors from their own words
// and quoted names; this is the backstop at the boundary. nil gives "".
func Reason(err error) string {
	if err == nil {
		return ""
	}
	return CleanText(err.Error())
}

// CleanText is Reason for a string.
func CleanText(s string) string {
	s = strings.ToValidUTF8(s, "")
	s = strings.Map(func(r rune) rune {
		if r == '\n' || r == '\t' {
			return r
		}
		if unicode.IsControl(r) || unicode.Is(unicode.Cf, r) {
			return -1
		}
		return r
	}, s)
	if len(s) <= MaxReason {
		return s
	}
	cut := MaxReason - len("...")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}
