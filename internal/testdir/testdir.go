// Package testdir makes temporary directories for tests whose files include
// unix sockets: t.TempDir's paths, which carry the test's name, may be too
// long for one (107 bytes).
package testdir

import (
	"os"
	"testing"
)

// Short is a new directory with a short path (under $TMPDIR, named after
// prefix), removed with everything in it when t ends.
func Short(t testing.TB, prefix string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}
