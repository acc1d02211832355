// Package damage damages files the way a failing disk or a stray write
// does, for the tests of what survives it.
package damage

import (
	"os"
	"testing"
)

// Garbage writes n bytes of garbage (not zeros: a fixed, varied pattern)
// into path at off, counted from the end when negative.
func Garbage(t testing.TB, path string, off int64, n int) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if off < 0 {
		st, err := f.Stat()
		if err != nil {
			t.Fatal(err)
		}
		off += st.Size()
	}
	g := make([]byte, n)
	for i := range g {
		g[i] = byte(i*131 + 7)
	}
	if _, err := f.WriteAt(g, off); err != nil {
		t.Fatal(err)
	}
}

// Size is the size of path.
func Size(t testing.TB, path string) int64 {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}
