package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/scavenger-ml/scavenger/api"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/scavenger-ml/scavenger/report"
	"github.com/scavenger-ml/scavenger/stepstats"
	"github.com/scavenger-ml/scavenger/telemetry"
)

// topOptions are the flags of `scavctl top`.
type topOptions struct {
	interval time.Duration
	once     bool
}

func newTopCmd(a *app) *cobra.Command {
	var o topOptions
	cmd := &cobra.Command{
		Use:   "top",
		Short: "Watch nodes, GPUs and jobs live: load, memory, GPU use; job speed, noise scale, time and cost left",
		Long: `top shows the nodes, their GPUs and the daemon's jobs, refreshed every
--interval.

Nodes come from the samples node daemons publish (scav.node.<node>.gpu|host,
every 5 s by default): the newest of each node at start, then each new one.
A node's line shows its CPUs busy (percent of how many), one-minute load,
memory used/total, network received/sent per second (from its last two
samples), its GPUs ("no GPUs" without any) and the age of its newest sample
("stale" past 30 s, or three of its sampling periods if longer; stale nodes
come last). A GPU's line shows node:index, name, utilisation, memory
used/total, power, temperature and the jobs of the processes on it (+N pid:
processes no job claims). When the screen is short the jobs come first: each
node's GPUs collapse into one line (node:*, mean utilisation, memory and power
summed, hottest temperature), then the GPU lines go and the nodes left out
are counted; the title counts every node.

Each job's row shows its state (or its policy's phase while it runs),
configuration (workers × global batch), last step, samples per second and
median step time over the last steps, gradient noise scale, and the time left
and cost at the finish its policy predicted (marked ~); at 92 columns or more,
also the CPU cores and resident memory its processes use. Finished jobs follow
the running ones.

On a terminal it redraws in place within the terminal's size (80×24 is
enough); q or Ctrl-C quits and gives the terminal back as it was. --once, or
standard output that is not a terminal, prints plain frames for scripts.
top needs a running scavd; it starts none. Should scavd go away, the frame
says since when and shows the jobs it ran as "unknown" (nothing reports
them): on a terminal top reconnects when scavd is back; plain frames end
after 15 s with exit status 75.`,
		Example: `  scavctl top
  scavctl top --interval 5s
  scavctl top --once`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.interval < 100*time.Millisecond {
				return fmt.Errorf("--interval %s: use at least 100ms", o.interval)
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return a.withDaemon(ctx, func(ctx context.Context, c *api.Client) error {
				return a.top(ctx, c, o)
			})
		},
	}
	cmd.Flags().DurationVar(&o.interval, "interval", 2*time.Second, "time between refreshes")
	cmd.Flags().BoolVar(&o.once, "once", false, "print one frame and exit")
	return cmd
}

// topSource is what top reads from a daemon.
type topSource interface {
	Ping(ctx context.Context) (api.Info, error)
	List(ctx context.Context, req api.JobsRequest) (api.JobPage, error)
	StepDigest(ctx context.Context, job string) (api.StepDigest, error)
	LatestNodeSamples(ctx context.Context, follow bool, fn func(telemetry.NodeSample) error) error
	NodeSamplesSince(ctx context.Context, kind string, from time.Time, fn func(telemetry.NodeSample) error) error
	Connected() bool
	URL() string
}

// topSession holds top's state between frames.
type topSession struct {
	src      topSource
	tr       *report.TopTracker
	nt       *report.NodeTracker
	samples  chan telemetry.NodeSample // node samples followed live
	jobs     []api.Job
	m0       map[string]float64
	node     string
	interval time.Duration
	note     string
	// lost is when the daemon stopped answering; zero while it answers.
	lost time.Time
}

// top runs `scavctl top` until ctx is done or the user quits.
func (a *app) top(ctx context.Context, c *api.Client, o topOptions) error {
	s := &topSession{src: c, tr: report.NewTopTracker(), nt: report.NewNodeTracker(), samples: make(chan telemetry.NodeSample, 1024),
		m0: map[string]float64{}, interval: o.interval}
	if info, err := c.Ping(ctx); err == nil {
		s.node = info.Node
	}
	// Live steps first, then the history of the active jobs: the tracker
	// ignores the steps it already has, so none counts twice.
	recs := make(chan telemetry.StepRecord, 8192)
	feed, err := c.FollowSteps("", func(r telemetry.StepRecord) {
		if r.Rank != 0 {
			return
		}
		select {
		case recs <- r:
		default: // top is behind: drop, the next records catch up
		}
	})
	if err != nil {
		return err
	}
	defer feed.Close()
	if err := s.refresh(ctx); err != nil {
		return err
	}
	s.history(ctx)
	s.nodeHistory(ctx)
	s.drain(recs)

	tty := !o.once && isTerminal(a.stdout)
	if !o.once {
		ctx, cancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.followNodes(ctx)
		}()
		defer wg.Wait()
		defer cancel()
	}
	if !tty {
		return s.plain(ctx, a.stdout, o.once, recs)
	}
	out, _ := fileOf(a.stdout)
	return s.live(ctx, out, recs)
}

// topEnded is how many of the jobs that ended top reads, the newest: more
// than a terminal shows.
const topEnded = 100

// refresh reads the records of the jobs top shows: those that have not
// ended, and the newest of those that have (not every job a node keeps).
func (s *topSession) refresh(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	active, err := s.src.List(ctx, api.JobsRequest{State: api.StateActive, Records: true})
	if err != nil {
		return fmt.Errorf("list jobs: %w", err)
	}
	ended, err := s.src.List(ctx, api.JobsRequest{State: api.StateEnded, Limit: topEnded, Records: true})
	if err != nil {
		return fmt.Errorf("list jobs: %w", err)
	}
	jobs := append(ended.Records, active.Records...)
	sort.SliceStable(jobs, func(a, b int) bool { return jobs[a].Created.Before(jobs[b].Created) })
	s.jobs = jobs
	for _, j := range jobs {
		if _, ok := s.m0[j.ID]; !ok {
			s.m0[j.ID] = report.BaseBatch(j)
		}
	}
	return nil
}

// history starts the tracker's figures of each active job from the
// daemon's digest of its step records (not a replay of them), for a few
// seconds at most.
func (s *topSession) history(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for _, j := range s.jobs {
		if j.State.Done() {
			continue
		}
		d, err := s.src.StepDigest(ctx, j.ID)
		if err != nil {
			continue
		}
		var agg stepstats.Aggregate
		if json.Unmarshal(d.Aggregate, &agg) == nil {
			s.tr.Seed(j.ID, agg.Live)
		}
	}
}

// topRateHistory is how far back top reads host samples at start, so that
// the first frame has network rates (two samples of each node).
const topRateHistory = 15 * time.Second

// nodeHistory reads the host samples of the last topRateHistory, then the
// newest node sample of each node and kind, for a few seconds at most. A
// daemon that keeps no node samples leaves top without nodes.
func (s *topSession) nodeHistory(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	add := func(n telemetry.NodeSample) error {
		s.nt.Add(n)
		return nil
	}
	_ = s.src.NodeSamplesSince(ctx, telemetry.NodeHost, time.Now().Add(-topRateHistory), add)
	_ = s.src.LatestNodeSamples(ctx, false, add)
}

// followNodes sends node samples to s.samples from the newest of each node
// and kind on, until ctx is done; when top is behind it drops them (the next
// ones replace them). Should the stream fail, it tries again every few
// seconds.
func (s *topSession) followNodes(ctx context.Context) {
	for {
		_ = s.src.LatestNodeSamples(ctx, true, func(n telemetry.NodeSample) error {
			select {
			case s.samples <- n:
			default:
			}
			return nil
		})
		select {
		case <-ctx.Done():
			return
		case <-time.After(5 * time.Second):
		}
	}
}

// drain takes the live records waiting in recs, and the node samples.
func (s *topSession) drain(recs <-chan telemetry.StepRecord) {
	for {
		select {
		case r := <-recs:
			s.tr.Add(r, s.m0[r.Job])
		case n := <-s.samples:
			s.nt.Add(n)
		default:
			return
		}
	}
}

// tick refreshes the records and returns the frame to show. A daemon that
// no longer answers is lost: the frame says since when, and the next ticks
// try it again.
func (s *topSession) tick(ctx context.Context, recs <-chan telemetry.StepRecord) report.TopFrame {
	s.note = ""
	err := s.refresh(ctx)
	switch {
	case err == nil && !s.lost.IsZero():
		s.lost = time.Time{} // back: read what the jobs did meanwhile
		s.history(ctx)
	case err == nil, ctx.Err() != nil:
	case s.src.Connected():
		s.note = "scavctl: " + err.Error()
	default:
		if s.lost.IsZero() {
			s.lost = time.Now()
		}
		s.note = fmt.Sprintf("scavctl: reconnecting to scavd (%s)", s.src.URL())
	}
	s.drain(recs)
	return s.frame()
}

func (s *topSession) frame() report.TopFrame {
	now := time.Now()
	f := report.BuildTopFrame(s.jobs, s.tr, report.BuildNodes(s.nt, now), now)
	f.Node, f.Interval, f.Note, f.Gone = s.node, s.interval, s.note, s.lost
	if !s.lost.IsZero() {
		// Without the daemon nobody says how its jobs go on: no speed, no
		// forecast, and a state that is not a guess.
		for i := range f.Jobs {
			if r := &f.Jobs[i]; r.Active {
				r.State, r.SamplesPerS, r.StepS, r.LeftS, r.Predicted = "unknown", 0, 0, 0, false
			}
		}
	}
	return f
}

// plain prints frames without escape sequences: one with once, else one per
// interval, separated by a blank line, until ctx is done.
func (s *topSession) plain(ctx context.Context, w io.Writer, once bool, recs <-chan telemetry.StepRecord) error {
	width := 80
	if cols, err := fmt.Sscan(os.Getenv("COLUMNS"), &width); cols != 1 || err != nil || width < 20 {
		width = 80
	}
	f := s.frame()
	if once {
		f.Note, f.Interval = "", 0
	}
	for {
		lines := report.RenderTop(f, width, 0)
		if once {
			lines = lines[:len(lines)-1] // no key help in a script's frame
		}
		if _, err := fmt.Fprintln(w, strings.Join(lines, "\n")); err != nil {
			return err
		}
		if once {
			return nil
		}
		if !s.lost.IsZero() && time.Since(s.lost) >= daemonLostAfter {
			return exitError{code: exitDaemonLost, msg: fmt.Sprintf("scavd (%s) has been gone since %s: top stops", s.src.URL(), s.lost.Format("15:04:05"))}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(s.interval):
		}
		fmt.Fprintln(w)
		f = s.tick(ctx, recs)
	}
}

// Escape sequences of the live view.
const (
	escAltScreen  = "\x1b[?1049h"
	escMainScreen = "\x1b[?1049l"
	escHideCursor = "\x1b[?25l"
	escShowCursor = "\x1b[?25h"
	escClearToEnd = "\x1b[J"
	escClearLine  = "\x1b[2K"
)

// live redraws the view on the terminal out every interval until ctx is
// done or q, Q, Ctrl-C or Ctrl-D is typed; the terminal is restored on
// return.
func (s *topSession) live(ctx context.Context, out *os.File, recs <-chan telemetry.StepRecord) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	keys, stopKeys := readKeys(ctx)
	defer stopKeys()
	fmt.Fprint(out, escAltScreen+escHideCursor)
	defer fmt.Fprint(out, escMainScreen+escShowCursor)
	winch := make(chan os.Signal, 1)
	signal.Notify(winch, syscall.SIGWINCH)
	defer signal.Stop(winch)

	t := time.NewTicker(s.interval)
	defer t.Stop()
	f := s.frame()
	for {
		if err := drawFrame(out, f); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case k, ok := <-keys:
			if !ok || k == 'q' || k == 'Q' || k == 3 || k == 4 {
				return nil
			}
			f = s.tick(ctx, recs)
		case <-winch:
			f = s.frame()
		case <-t.C:
			f = s.tick(ctx, recs)
		}
	}
}

// drawFrame draws f over the whole terminal out, each line cleared first so
// that a full-width line never wraps.
func drawFrame(out *os.File, f report.TopFrame) error {
	w, h, err := term.GetSize(int(out.Fd()))
	if err != nil || w <= 0 || h <= 0 {
		w, h = 80, 24
	}
	lines := report.RenderTop(f, w, h)
	var b strings.Builder
	for i, l := range lines {
		fmt.Fprintf(&b, "\x1b[%d;1H%s%s", i+1, escClearLine, cleanString(l))
	}
	if len(lines) < h {
		fmt.Fprintf(&b, "\x1b[%d;1H%s", len(lines)+1, escClearToEnd) // erasing does not scroll
	}
	_, err = io.WriteString(out, b.String())
	return err
}

// readKeys puts the controlling terminal in raw mode and delivers the bytes
// typed; stop restores the terminal and joins the reader. Without a
// terminal the channel stays silent (Ctrl-C still ends top by its signal).
func readKeys(ctx context.Context) (<-chan byte, func()) {
	keys := make(chan byte, 16)
	tty, err := os.Open("/dev/tty")
	if err != nil {
		return keys, func() {}
	}
	var old *term.State
	rc, err := tty.SyscallConn()
	if err == nil {
		cerr := rc.Control(func(fd uintptr) { old, err = term.MakeRaw(int(fd)) })
		err = errors.Join(err, cerr)
	}
	if err != nil {
		tty.Close()
		return keys, func() {}
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(keys)
		buf := make([]byte, 64)
		for {
			n, err := tty.Read(buf) // the poller: Close below ends it
			for _, k := range buf[:n] {
				select {
				case keys <- k:
				case <-ctx.Done():
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	var once sync.Once
	return keys, func() {
		once.Do(func() {
			_ = rc.Control(func(fd uintptr) { _ = term.Restore(int(fd), old) })
			tty.Close()
			wg.Wait()
		})
	}
}
