package api

import (
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// TestParseSignalKnowsTheSystemsNames: every signal the system names
// (but SIGSTKFLT and SIGPWR) is read by its name, with or without SIG and
// in any case; anything else is refused, naming an example.
func TestParseSignalKnowsTheSystemsNames(t *testing.T) {
	n := 0
	for sig := syscall.Signal(1); sig < 65; sig++ {
		name := unix.SignalName(sig)
		if name == "" || name == "SIGSTKFLT" || name == "SIGPWR" {
			continue
		}
		n++
		for _, s := range []string{name, name[3:], "sig" + name[3:]} {
			if got, err := ParseSignal(s); err != nil || got != sig {
				t.Errorf("ParseSignal(%q) = %d, %v; want %d", s, got, err, sig)
			}
		}
	}
	if n < 29 {
		t.Errorf("the system names %d signals, want at least 29", n)
	}
	for _, s := range []string{"", "SIG", "SIGFOO", "USR3", "10"} {
		if _, err := ParseSignal(s); err == nil {
			t.Errorf("ParseSignal(%q) succeeded", s)
		}
	}
}
