package host

import (
	"os"
	"strings"
	"testing"
)

func TestParseProcStat(t *testing.T) {
	// Fields 3 to 24 of proc(5), after a command name that holds ") (".
	line := "4242 (a) (b c) S 17 4242 4242 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 3 0 987654 123456789 300 18446744073709551615\n"
	st, err := parseProcStat(4242, []byte(line))
	if err != nil {
		t.Fatal(err)
	}
	want := procStat{pid: 4242, ppid: 17, name: "a) (b c", start: 987654, cpu: 3, rss: 300 * pageSize}
	if st != want {
		t.Fatalf("parsed %+v, want %+v", st, want)
	}
	for _, bad := range []string{
		"",
		"4242 no name S 1",
		"4242 (x) S 17 4242", // cut short
		strings.Replace(line, " 250 ", " -250 ", 1),     // not a count
		strings.Replace(line, " 17 ", " seventeen ", 1), // not a pid
	} {
		if st, err := parseProcStat(4242, []byte(bad)); err == nil {
			t.Errorf("%q parsed as %+v, want an error", bad, st)
		}
	}
}

// TestReadProcStatSelf reads this process as the kernel shows it.
func TestReadProcStatSelf(t *testing.T) {
	ps, err := listProcs()
	if err != nil {
		t.Fatal(err)
	}
	var self *procStat
	for i := range ps {
		if int(ps[i].pid) == os.Getpid() {
			self = &ps[i]
		}
	}
	if self == nil {
		t.Fatalf("listProcs: %d processes, this one (%d) not among them", len(ps), os.Getpid())
	}
	if int(self.ppid) != os.Getppid() || self.rss == 0 || self.start == 0 || self.name == "" {
		t.Fatalf("this process read as %+v (parent %d)", *self, os.Getppid())
	}
}
