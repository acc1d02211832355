package jsonfile

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// TestWriteReplacesWholeAndLeavesNoTemporary: a second write replaces the
// first, the file has the mode asked for, and no temporary file stays.
func TestWriteReplacesWholeAndLeavesNoTemporary(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "v.json")
	for _, v := range []map[string]int{{"a": 1}, {"b": 2}} {
		if err := Write(path, v, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]int
	if err := json.Unmarshal(b, &got); err != nil || len(got) != 1 || got["b"] != 2 {
		t.Fatalf("file holds %s (%v), want the second value", b, err)
	}
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", st.Mode().Perm())
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("directory holds %d entries, want the file alone", len(ents))
	}
	if err := Write(filepath.Join(dir, "missing", "v.json"), 1, 0o600); err == nil {
		t.Error("a write into a missing directory succeeded")
	}
}
