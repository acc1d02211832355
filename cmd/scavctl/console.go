package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/term"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/internal/words"
	"github.com/scavenger-ml/scavenger/plugins"
	"github.com/scavenger-ml/scavenger/stepstats"
	"github.com/scavenger-ml/scavenger/telemetry"
)

// console writes worker output and scavctl's notes, and keeps a status line:
// redrawn in place at the bottom of a terminal, or printed as a plain line
// every tick when stderr is not a terminal.
type console struct {
	mu       sync.Mutex
	out, err io.Writer
	tty      bool
	status   string
	shown    bool
	tick     time.Duration
	last     time.Time
}

func newConsole(out, errw io.Writer, tick time.Duration) *console {
	tty := false
	if f, ok := errw.(*os.File); ok {
		tty = term.IsTerminal(int(f.Fd()))
	}
	return &console{out: out, err: errw, tty: tty, tick: tick, last: time.Now()}
}

// workerLine prints one line of a worker's output, prefixed by its rank.
func (c *console) workerLine(rank int, stderr bool, line string) {
	w := c.out
	if stderr {
		w = c.err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.clear()
	fmt.Fprintf(w, "[%d] %s\n", rank, line)
	c.draw()
}

// notef prints a note from scavctl itself.
func (c *console) notef(format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.clear()
	fmt.Fprintf(c.err, "scavctl: "+format+"\n", args...)
	c.draw()
}

// setStatus replaces the status line.
func (c *console) setStatus(s string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.status = s
	if c.tty {
		c.clear()
		c.draw()
		return
	}
	if c.tick > 0 && time.Since(c.last) >= c.tick && s != "" {
		c.last = time.Now()
		fmt.Fprintf(c.err, "scavctl: %s\n", s)
	}
}

// close removes the status line from a terminal.
func (c *console) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.clear()
}

func (c *console) clear() {
	if c.tty && c.shown {
		fmt.Fprint(c.err, "\r\x1b[K")
		c.shown = false
	}
}

func (c *console) draw() {
	if c.tty && c.status != "" {
		fmt.Fprint(c.err, c.status)
		c.shown = true
	}
}

// stepStatus follows a job's step records for the status line.
type stepStatus struct {
	mu      sync.Mutex
	cfg     plugins.Config
	start   time.Time
	step    int64
	world   int
	batch   int
	records int64
	rate    stepstats.Rate
	// The policy's view, from its decisions: phase and forecast to finish.
	phase        string
	predictedS   float64
	predictedUSD float64
	plannedAt    time.Time
	priced       bool // a price was set: the forecast's dollars mean something
	// total is the steps the script says it runs (its progress bar), and
	// stepS rank 0's last step time: an ETA without a policy's forecast.
	total int64
	stepS float64
}

func newStepStatus(cfg plugins.Config, priced bool) *stepStatus {
	return &stepStatus{cfg: cfg, start: time.Now(), world: cfg.Workers, batch: cfg.GlobalBatch, priced: priced}
}

// plan notes the policy's latest phase and forecast.
func (s *stepStatus) plan(phase string, predictedS, predictedUSD float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.phase, s.predictedS, s.predictedUSD, s.plannedAt = phase, predictedS, predictedUSD, time.Now()
}

func (s *stepStatus) observe(r telemetry.StepRecord) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.records++
	if r.Step > s.step {
		s.step = r.Step
	}
	s.world = r.World
	if r.GlobalBatch > 0 {
		s.batch = r.GlobalBatch
	}
	if r.Total > 0 {
		s.total = r.Total
	}
	if r.Rank == 0 && r.Seconds > 0 {
		s.stepS = r.Seconds
	}
	s.rate.Add(r)
}

func (s *stepStatus) line() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var parts []string
	if s.phase != "" {
		parts = append(parts, s.phase)
	}
	parts = append(parts, fmt.Sprintf("step %d", s.step))
	if r := s.rate.PerSecond(); r > 0 {
		parts = append(parts, fmt.Sprintf("%.0f samples/s", r))
	}
	parts = append(parts, words.Count(s.world, "worker"))
	if s.batch > 0 {
		parts = append(parts, fmt.Sprintf("batch %d", s.batch))
	}
	parts = append(parts, time.Since(s.start).Truncate(time.Second).String())
	if s.total > 0 && s.predictedS <= 0 && s.stepS > 0 && s.step < s.total {
		eta := time.Duration(float64(s.total-s.step) * s.stepS * float64(time.Second))
		parts = append(parts, fmt.Sprintf("step %d of %d, ~%s left", s.step, s.total, eta.Round(time.Second)))
	}
	if s.predictedS > 0 {
		left := time.Duration(s.predictedS*float64(time.Second)) - time.Since(s.plannedAt)
		eta := fmt.Sprintf("~%s left", max(left, 0).Round(time.Second))
		if s.priced {
			eta += ", ~" + api.USDText(s.predictedUSD) + " to finish"
		}
		parts = append(parts, eta)
	}
	return strings.Join(parts, " · ")
}

func (s *stepStatus) summary() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return fmt.Sprintf("%s, %s, %s", words.Count(s.step, "step"), words.Count(s.records, "step record"), time.Since(s.start).Truncate(100*time.Millisecond))
}

// write prints p (whole lines from elsewhere: the in-process daemon's log)
// under the status line, never glued to it.
func (c *console) write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.clear()
	n, err := c.err.Write(p)
	c.draw()
	return n, err
}

// logWriter is where scavctl's log goes: stderr, through the console while
// one keeps a status line there.
type logWriter struct {
	mu  sync.Mutex
	w   io.Writer
	con *console
}

// Write implements io.Writer.
func (l *logWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	con := l.con
	l.mu.Unlock()
	if con != nil {
		return con.write(p)
	}
	return l.w.Write(p)
}

// through sends the log through con until the returned function is called.
func (l *logWriter) through(con *console) func() {
	l.mu.Lock()
	l.con = con
	l.mu.Unlock()
	return func() {
		l.mu.Lock()
		l.con = nil
		l.mu.Unlock()
	}
}
