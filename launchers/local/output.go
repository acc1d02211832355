package local

import (
	"bufio"
	"bytes"
	"os"
	"unicode/utf8"
)

// splitLines is a bufio.SplitFunc like bufio.ScanLines, except that a line
// longer than max bytes is delivered in pieces of at most max bytes (cut on a
// UTF-8 rune boundary when there is one nearby) instead of failing with
// bufio.ErrTooLong, so that a worker writing a huge line never stalls on a
// full pipe. The Scanner's buffer must hold max+1 bytes.
func splitLines(max int) bufio.SplitFunc {
	return func(data []byte, atEOF bool) (int, []byte, error) {
		if atEOF && len(data) == 0 {
			return 0, nil, nil
		}
		limit := min(len(data), max+1)
		if i := bytes.IndexByte(data[:limit], '\n'); i >= 0 {
			return i + 1, bytes.TrimSuffix(data[:i], []byte{'\r'}), nil
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
			return len(data), bytes.TrimSuffix(data, []byte{'\r'}), nil
		}
		return 0, nil, nil
	}
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
