package main

import (
	"fmt"
	"io"
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
	if f, ok := fileOf(errw); ok {
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
		fmt.Fprint(rawOf(c.err), "\r\x1b[K")
		c.shown = false
	}
}

func (c *console) draw() {
	if c.tty && c.status != "" {
		fmt.Fprint(rawOf(c.err), cleanString(c.status))
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
	phase     string
	decisions []api.Decision
	priced    bool // a price was set: the forecast's dollars mean something
	// total is the steps the script says it runs (its progress bar), and
	// stepS rank 0's last step time: an ETA without a policy's forecast.
	total int64
	stepS float64
	// stalled and badLoss are what the job's watchdog last said (stalled
	// cleared when steps come again).
	stalled, badLoss bool
}

// flag notes a stall (or its end) or a loss that turned NaN, from its event.
func (s *stepStatus) flag(kind telemetry.EventKind, msg string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch kind {
	case telemetry.EventStalled:
		s.stalled = strings.HasPrefix(msg, "stalled")
	case telemetry.EventBadLoss:
		s.badLoss = true
	}
}

func newStepStatus(cfg plugins.Config, priced bool) *stepStatus {
	return &stepStatus{cfg: cfg, start: time.Now(), world: cfg.Workers, batch: cfg.GlobalBatch, priced: priced}
}

// plan notes the policy's latest phase and its decisions (the forecast to
// finish: api.Forecast).
func (s *stepStatus) plan(phase string, decisions []api.Decision) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.phase = phase
	if decisions != nil {
		s.decisions = decisions
	}
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
	switch r := s.rate.PerSecond(); {
	case s.stalled:
		parts = append(parts, "STALLED: no step lately")
	case r > 0:
		parts = append(parts, fmt.Sprintf("%.0f samples/s", r))
	}
	if s.badLoss {
		parts = append(parts, "loss NaN")
	}
	parts = append(parts, words.Count(s.world, "worker"))
	if s.batch > 0 {
		parts = append(parts, fmt.Sprintf("batch %d", s.batch))
	}
	parts = append(parts, time.Since(s.start).Truncate(time.Second).String())
	l, forecast := api.Forecast(s.decisions, s.step, s.stepS, time.Now())
	if s.total > 0 && !forecast && s.stepS > 0 && s.step < s.total {
		eta := time.Duration(float64(s.total-s.step) * s.stepS * float64(time.Second))
		parts = append(parts, fmt.Sprintf("step %d of %d, ~%s left", s.step, s.total, eta.Round(time.Second)))
	}
	if forecast {
		parts = append(parts, leftText(l, s.priced))
	}
	return strings.Join(parts, " · ")
}

// leftText says what is left of a job by its forecast: the time and, when
// priced, the money, each with its 90 % interval; past the forecast, only
// what is known (at least a step).
func leftText(l api.Left, priced bool) string {
	d := func(s float64) string { return time.Duration(s * float64(time.Second)).Round(time.Second).String() }
	if l.Past {
		return fmt.Sprintf("past its forecast: more than %s left", d(l.LoS))
	}
	s := fmt.Sprintf("~%s left", d(l.S))
	if l.HiS > l.LoS {
		s += fmt.Sprintf(" (%s–%s)", d(l.LoS), d(l.HiS))
	}
	if priced {
		s += ", ~" + api.USDText(l.USD) + " to finish"
		if l.HiUSD > l.LoUSD {
			s += " (" + api.USDText(l.LoUSD) + "–" + api.USDText(l.HiUSD) + ")"
		}
	}
	return s
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
