package procstat

import (
	"os"
	"strings"
	"syscall"
	"testing"
)

func TestParse(t *testing.T) {
	// Fields 3 to 24 of proc(5), after a command name that holds ") (".
	line := "4242 (a) (b c) S 17 4240 4240 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 3 0 987654 123456789 300 18446744073709551615\n"
	st, err := Parse(4242, []byte(line))
	if err != nil {
		t.Fatal(err)
	}
	want := Stat{PID: 4242, PPID: 17, PGRP: 4240, State: 'S', Name: "a) (b c", Start: 987654, CPUSeconds: 3, RSSBytes: 300 * pageSize}
	if st != want {
		t.Fatalf("parsed %+v, want %+v", st, want)
	}
	for _, bad := range []string{
		"",
		"4242 no name S 1",
		"4242 (x) S 17 4242",                    // cut short
		strings.Replace(line, " S ", " Sx ", 1), // not a state
		strings.Replace(line, " 250 ", " -250 ", 1),     // not a count
		strings.Replace(line, " 17 ", " seventeen ", 1), // not a pid
	} {
		if st, err := Parse(4242, []byte(bad)); err == nil {
			t.Errorf("%q parsed as %+v, want an error", bad, st)
		}
	}
}

// TestEachSeesThisProcess reads this process as the kernel shows it.
func TestEachSeesThisProcess(t *testing.T) {
	var self *Stat
	n := 0
	if err := Each(func(st Stat) {
		n++
		if st.PID == os.Getpid() {
			self = &st
		}
	}); err != nil {
		t.Fatal(err)
	}
	if self == nil {
		t.Fatalf("Each: %d processes, this one (%d) not among them", n, os.Getpid())
	}
	// The state is the thread group leader's: Go may run this test on
	// another thread while the leader sleeps, so R and S are both right.
	if self.PPID != os.Getppid() || self.PGRP != syscall.Getpgrp() || !strings.ContainsRune("RS", rune(self.State)) || self.RSSBytes == 0 || self.Start == 0 || self.Name == "" {
		t.Fatalf("this process read as %+v (parent %d)", *self, os.Getppid())
	}
}
