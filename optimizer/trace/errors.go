package trace

import (
	"errors"
	"fmt"
)

// Sentinel errors returned (wrapped) by the trace reader.
var (
	// ErrMissingColumn means a required column is absent from the header.
	ErrMissingColumn = errors.New("missing column")
	// ErrDuplicateColumn means a column name appears twice in the header.
	ErrDuplicateColumn = errors.New("duplicate column")
	// ErrBadValue means a field does not parse or is out of range.
	ErrBadValue = errors.New("bad value")
	// ErrInconsistent means a row contradicts another row or another field.
	ErrInconsistent = errors.New("inconsistent row")
	// ErrEmpty means a file has a header but no rows, or no header at all.
	ErrEmpty = errors.New("empty file")
	// ErrNoTraces means a directory holds none of the expected files.
	ErrNoTraces = errors.New("no trace files")
)

// ParseError locates a problem in a trace file. Line and Column are 1-based;
// Column is the field number (0 when the problem concerns the whole line).
type ParseError struct {
	File   string
	Line   int
	Column int
	Field  string
	Err    error
}

// Error implements error.
func (e *ParseError) Error() string {
	switch {
	case e.Column > 0 && e.Field != "":
		return fmt.Sprintf("%s:%d:%d (%s): %v", e.File, e.Line, e.Column, e.Field, e.Err)
	case e.Column > 0:
		return fmt.Sprintf("%s:%d:%d: %v", e.File, e.Line, e.Column, e.Err)
	default:
		return fmt.Sprintf("%s:%d: %v", e.File, e.Line, e.Err)
	}
}

// Unwrap returns the underlying error so errors.Is finds the sentinels.
func (e *ParseError) Unwrap() error { return e.Err }
