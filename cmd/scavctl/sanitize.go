package main

import (
	"fmt"
	"io"
	"os"
	"regexp"
	"unicode/utf8"
)

// What scavctl prints comes in part from other users (a job's command,
// name, directory, messages, output): printed raw, a control character in
// it would act on the reader's terminal (ESC sequences that move the
// cursor, rewrite lines, set the title or the clipboard; CR that hides what
// came before). cleanWriter, around standard output and standard error,
// makes every such character visible instead (\r, \x1b, \u009b), except
// newline and tab, and except the colour sequences (SGR: ESC [ digits m)
// that programs' output commonly has. Binary output (a PNG) and scavctl's
// own screen control (top, the status line) go to the raw file.

// sgr matches a colour sequence at the start of a byte slice.
var sgr = regexp.MustCompile(`^\x1b\[[0-9;]{0,32}m`)

// clean returns p with its control characters made visible.
func clean(p []byte) []byte {
	out := make([]byte, 0, len(p))
	for i := 0; i < len(p); {
		if p[i] == 0x1b {
			if m := sgr.Find(p[i:]); m != nil {
				out = append(out, m...)
				i += len(m)
				continue
			}
		}
		r, n := utf8.DecodeRune(p[i:])
		switch {
		case r == utf8.RuneError && n <= 1:
			out = fmt.Appendf(out, `\x%02x`, p[i])
		case r == '\n' || r == '\t':
			out = append(out, byte(r))
		case r == '\r':
			out = append(out, `\r`...)
		case r < 0x20 || r == 0x7f:
			out = fmt.Appendf(out, `\x%02x`, r)
		case r >= 0x80 && r <= 0x9f:
			out = fmt.Appendf(out, `\u%04x`, r)
		default:
			out = append(out, p[i:i+n]...)
		}
		i += n
	}
	return out
}

// cleanString is clean for a string.
func cleanString(s string) string { return string(clean([]byte(s))) }

// cleanWriter writes through clean to w.
type cleanWriter struct{ w io.Writer }

func (c cleanWriter) Write(p []byte) (int, error) {
	if _, err := c.w.Write(clean(p)); err != nil {
		return 0, err
	}
	return len(p), nil
}

// rawOf is the writer under w's cleaning, for what scavctl writes itself
// (screen control, binary files): w when it is not a cleanWriter.
func rawOf(w io.Writer) io.Writer {
	if c, ok := w.(cleanWriter); ok {
		return c.w
	}
	return w
}

// fileOf is the file under w, when there is one.
func fileOf(w io.Writer) (*os.File, bool) {
	f, ok := rawOf(w).(*os.File)
	return f, ok
}
