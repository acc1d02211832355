// Package jsonfile writes a value as a JSON file atomically: to a
// temporary file beside it, renamed over it, so that a reader (or the
// next process after a crash) sees the old file or the new one, whole.
package jsonfile

import (
	"encoding/json"
	"fmt"
	"os"
)

// Write writes v, indented, to path with mode perm, atomically.
func Write(path string, v any, perm os.FileMode) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encode %s: %w", path, err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, perm); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
