package local

import (
	"bufio"
	"bytes"
	"os"
	"unicode/utf8"
)

// splitLines is a bufio.SplitFunc like bufio.ScanLines, except that
//
//   - a lone '\r' (one not followed by '\n') also ends a line, so that the
//     progress bars of tqdm and Keras, which redraw themselves with '\r' and
//     write '\n' only at the end, are delivered one update at a time instead
//     of as one huge line; a "\r\n" pair is one line end, as before. A line
//     ended by a lone '\r' that is empty (the '\r' a redraw starts with) is
//     skipped; an empty line ended by '\n' or "\r\n" is still delivered. A
//     line ended by '\r' is delivered at once, without waiting to see whether
//     a '\n' follows (a '\n' right after it is then swallowed);
//   - a line longer than max bytes is delivered in pieces of at most max
//     bytes (cut on a UTF-8 rune boundary when there is one nearby) instead
//     of failing with bufio.ErrTooLong, so that a worker writing a huge line
//     never stalls on a full pipe.
//
// The Scanner's buffer must hold max+1 bytes. The function keeps state
// between calls: use one per Scanner.
func splitLines(max int) bufio.SplitFunc {
	afterCR := false // the last token ended with a '\r' that may be half of "\r\n"
	split := func(data []byte, atEOF bool) (int, []byte, error) {
		if atEOF && len(data) == 0 {
			return 0, nil, nil
		}
		if afterCR {
			afterCR = false
			if data[0] == '\n' {
				return 1, nil, nil
			}
		}
		limit := min(len(data), max+1)
		if i := bytes.IndexAny(data[:limit], "\r\n"); i >= 0 {
			switch {
			case data[i] == '\n':
				return i + 1, data[:i], nil
			case i+1 < len(data) && data[i+1] == '\n':
				return i + 2, data[:i], nil
			case i+1 < len(data) || atEOF:
				return i + 1, nonEmpty(data[:i]), nil
			case i > 0:
				// The data ends in '\r' after a line: deliver the line now and
				// swallow a '\n' if one comes next.
				afterCR = true
				return i + 1, data[:i], nil
			default:
				return 0, nil, nil // a lone "\r" so far: is it half of "\r\n"?
			}
		}
		if len(data) > max {
			n := max
			for k := max; k > max-utf8.UTFMax && k > 0; k-- {
				if utf8.RuneStart(data[k]) {
					n = k
					break
				}
			}
			return n, data[:n], nil
		}
		if atEOF {
			return len(data), data, nil
		}
		return 0, nil, nil
	}
	return func(data []byte, atEOF bool) (int, []byte, error) {
		// A Scanner at EOF stops at the first call that returns no token,
		// dropping what is left, so skip what must be skipped here.
		off := 0
		for {
			n, token, err := split(data[off:], atEOF)
			off += n
			if token != nil || err != nil || n == 0 || !atEOF {
				return off, token, err
			}
		}
	}
}

// nonEmpty returns b, or nil (no token: the Scanner skips it) when b is empty.
func nonEmpty(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return b
}

// readLines reads f until EOF, its read deadline or an error, calling emit
// for each line (see splitLines). It returns nil at EOF.
func readLines(f *os.File, max int, emit func(string)) error {
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, min(64<<10, max+1)), max+1)
	sc.Split(splitLines(max))
	for sc.Scan() {
		emit(sc.Text())
	}
	return sc.Err()
}
