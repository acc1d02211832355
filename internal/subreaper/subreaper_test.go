package subreaper

import (
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// isSubreaper reads PR_GET_CHILD_SUBREAPER.
func isSubreaper(t *testing.T) bool {
	t.Helper()
	var v int32
	if err := unix.Prctl(unix.PR_GET_CHILD_SUBREAPER, uintptr(unsafe.Pointer(&v)), 0, 0, 0); err != nil {
		t.Fatal(err)
	}
	return v != 0
}

// TestBecomeLeave: Become makes this process a child subreaper, Leave undoes it.
func TestBecomeLeave(t *testing.T) {
	if err := Become(); err != nil {
		t.Fatal(err)
	}
	if !isSubreaper(t) {
		t.Fatal("not a subreaper after Become")
	}
	if err := Leave(); err != nil {
		t.Fatal(err)
	}
	if isSubreaper(t) {
		t.Fatal("still a subreaper after Leave")
	}
}
