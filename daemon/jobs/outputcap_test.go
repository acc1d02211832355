package jobs

import (
	"strings"
	"testing"
	"time"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/telemetry"
)

func TestOutputCap(t *testing.T) {
	p := outputPolicy{HeadLines: 3, HeadBytes: 1000, TailLineBytes: 50, Rate: 1000, Burst: 1000, PendingBytes: 2000}
	t0 := time.Unix(1e9, 0)
	line := func(s string) telemetry.LogLine { return telemetry.LogLine{Attempt: 1, Stream: "stdout", Line: s} }
	type want struct {
		tail bool
		n    int64
		text string // a part of it
	}
	check := func(t *testing.T, got []outLine, ws ...want) {
		t.Helper()
		if len(got) != len(ws) {
			t.Fatalf("published %d lines %+v, want %d", len(got), got, len(ws))
		}
		for i, w := range ws {
			if got[i].tail != w.tail || got[i].line.N != w.n || !strings.Contains(got[i].line.Line, w.text) {
				t.Errorf("line %d = %+v, want tail %v n %d with %q", i, got[i], w.tail, w.n, w.text)
			}
		}
	}
	t.Run("head, then the tail with a note", func(t *testing.T) {
		c := newOutputCap(p, api.OutputStats{})
		for i := int64(1); i <= 3; i++ {
			check(t, c.line(t0, line("a")), want{false, i, "a"})
		}
		check(t, c.line(t0, line("b")), want{true, 0, "passed 3 lines"}, want{true, 4, "b"})
		long := strings.Repeat("x", 80)
		check(t, c.line(t0, line(long)), want{true, 5, "[scavd: 30 bytes cut]"})
		if st := c.stats(); st.Lines != 5 || !st.Tail || st.HeadBytes != 3 {
			t.Errorf("stats %+v", st)
		}
	})
	t.Run("the head ends at its bytes too", func(t *testing.T) {
		c := newOutputCap(outputPolicy{HeadLines: 100, HeadBytes: 10, TailLineBytes: 50, Rate: 1e6, Burst: 1e6, PendingBytes: 1e6}, api.OutputStats{})
		check(t, c.line(t0, line("0123456789")), want{false, 1, "0123456789"})
		check(t, c.line(t0, line("x")), want{true, 0, "passed 100 lines or 0 KiB"}, want{true, 2, "x"})
	})
	t.Run("the rate holds lines back, drops the oldest, then says so", func(t *testing.T) {
		c := newOutputCap(p, api.OutputStats{Lines: 10, Tail: true})
		published := 0
		for i := 0; i < 100; i++ { // 100 lines of 110 bytes at one instant: the burst lets 9 go
			published += len(c.line(t0, line("0123456789")))
		}
		if published != 9 {
			t.Errorf("%d lines published at once, want the burst's 9", published)
		}
		// 2000 bytes wait at most: 18 lines; 73 were dropped.
		got := c.flush(t0.Add(time.Second), false)
		if len(got) != 10 || !strings.Contains(got[0].line.Line, "73 lines of output dropped here") || got[0].line.Stream != streamDaemon {
			t.Fatalf("after 1s: %d lines, first %+v; want the note of 73 dropped and 9 lines", len(got), got[0].line)
		}
		rest := c.flush(t0.Add(time.Second), true)
		if len(rest) != 9 || rest[8].line.N != 110 {
			t.Errorf("forced: %d lines, last %+v; want the 9 still waiting, ending with line 110", len(rest), rest[len(rest)-1].line)
		}
		if st := c.stats(); st.Dropped != 73 || st.Lines != 110 {
			t.Errorf("stats %+v, want 73 dropped of 110", st)
		}
	})
}

// TestJobOutputSaysWhenLinesWait: the runner flushes a job's output on a
// timer only while lines wait for the rate. The first line left waiting
// signals it, once; a flush says whether lines still wait; once none does,
// the next line left waiting signals again.
func TestJobOutputSaysWhenLinesWait(t *testing.T) {
	var published int
	o := newJobOutput(api.Job{ID: "out-000001"}, func(string, telemetry.LogLine) { published++ }, nil)
	o.cap = newOutputCap(outputPolicy{HeadLines: 0, HeadBytes: 0, TailLineBytes: 50, Rate: 200, Burst: 200, PendingBytes: 1e6}, api.OutputStats{Tail: true})
	signalled := func() bool {
		select {
		case <-o.waiting:
			return true
		default:
			return false
		}
	}
	line := telemetry.LogLine{Attempt: 1, Stream: "stdout", Line: "0123456789"} // 110 bytes with the overhead
	o.take(line)
	if s := signalled(); published != 1 || s {
		t.Fatalf("a line within the burst: %d published, signalled %v; want 1, no signal", published, s)
	}
	for range 3 {
		o.take(line) // past the burst: they wait
	}
	if !signalled() || signalled() {
		t.Fatal("lines left waiting: want one signal")
	}
	if !o.flush(false) {
		t.Fatal("flush at once, lines still waiting: want more")
	}
	if o.flush(true) || published != 4 {
		t.Fatalf("forced flush: %d published, want 4 and nothing waiting", published)
	}
	o.take(line)
	if !signalled() {
		t.Fatal("a line left waiting after a flush that emptied the queue: want a signal")
	}
}
