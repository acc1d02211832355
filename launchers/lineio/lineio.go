// Package lineio cuts a worker's output stream into the lines that
// plugins.AttemptSpec.Output receives, for the launchers that read a plain
// stream (an SSH session's stdout and stderr, srun's pipes).
package lineio

import (
	"bufio"
	"errors"
	"io"
	"strings"
)

// Read reads r until EOF and calls emit with each line, without its "\n"
// or "\r\n". A line longer than max bytes is delivered in pieces of max
// bytes: complete is false for every piece but the last. On a read error
// Read discards the rest of r (so that its writer never blocks) and
// returns the error; it returns nil at EOF.
func Read(r io.Reader, max int, emit func(line string, complete bool)) error {
	br := bufio.NewReaderSize(r, max)
	for {
		line, err := br.ReadSlice('\n')
		if len(line) > 0 {
			complete := err == nil || errors.Is(err, io.EOF)
			emit(strings.TrimSuffix(strings.TrimSuffix(string(line), "\n"), "\r"), complete)
		}
		switch {
		case err == nil, errors.Is(err, bufio.ErrBufferFull):
		case errors.Is(err, io.EOF):
			return nil
		default:
			_, _ = io.Copy(io.Discard, r)
			return err
		}
	}
}
