// Package progress reads training progress from a worker's output, for jobs
// that send no step records (uninstrumented jobs): a Parser is fed one output
// line at a time and returns a Step when the line shows progress — the step
// number, the iterations per second, or both.
//
// It is pure: no I/O, no clocks (the caller passes the time a line was read)
// and no goroutines.
//
// # What a line may show
//
// Without a user regex the built-in patterns are used, tried in this order
// on each line (after ANSI escape sequences are removed):
//
//	tqdm         " 45%|████▌     | 450/1000 [00:12<00:15, 36.51it/s]"   step 450 of 1000, 36.51 it/s
//	             "Epoch 3:  45%|████▌ | 450/1000 [00:12<00:15, 2.50s/it, loss=0.1]"  step 450, 0.4 it/s
//	tqdm, no total "450it [00:12, 36.51it/s]"                           step 450, 36.51 it/s
//	Keras        "120/1000 [====>.........] - ETA: 5s - loss: 0.31"     step 120 of 1000
//	             " 120/1000 ━━━━━━━━━━━━━━━━━━━━ 2s 12ms/step - loss: 0.31"  step 120, 83.3 it/s
//	step words   "step 120", "Step [120/1000]", "iter 120", "Iteration: 120",
//	             "Epoch 3 Step 120", "global_step=120 loss=0.5"         step 120
//
// A tqdm bar counts in its unit; only iteration-like units (it, step,
// batch, iter, ba, and their plurals) are read, so that a bar counting
// samples, images or bytes is not taken for steps. A rate anywhere on a
// step-word line ("12.5 it/s", "0.08 s/it", "80ms/step") is read too.
//
// A line holding several '\r'-separated redraws (a progress bar whose
// output was not split at '\r') is read at its last redraw that shows
// progress.
//
// # The user regex
//
// A user regex (scavctl run --step-regex) replaces the built-ins. It is
// matched against each line with ANSI escapes removed and may use these
// named groups; it must have a step or a rate group, or else exactly one
// plain group, which is the step number ('it (\d+)'); any other named group
// is an error:
//
//	step   the step number, a non-negative integer ((?P<step>\d+))
//	rate   iterations per second, a non-negative decimal ((?P<rate>[\d.]+))
//	total  the total steps, an integer (optional)
//	loss   the training loss, a decimal (optional)
//
// # Successive steps
//
// A Parser holds the state of one output stream (one rank's stdout or
// stderr): use one per stream, and a new one per attempt. It turns
// successive step numbers into Step.Delta steps over Step.Elapsed seconds.
// A redraw of the step already seen (tqdm refreshes its bar without
// progress) is not a new observation. A step number below the last one
// restarts the state (Step.Restart: a new progress bar, a restarted
// script), except that a bar that reached its total and starts again from
// the beginning (a new epoch's bar) counts on: its steps since the start
// are the Delta.
//
// Limits: a stream that interleaves two progress series (a validation bar
// drawn under the training bar) makes the count jump between them; give a
// user regex that matches the training lines only. A tqdm bar with
// unit_scale ("1.2k/10k") is not read.
package progress

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// ErrBadRegex is wrapped by the errors of New for an unusable user regex.
var ErrBadRegex = errors.New("bad step regex")

// Step is one observation of progress read from a line.
type Step struct {
	// Step is the step number the line shows; valid when HasStep.
	Step int64
	// HasStep says whether the line shows a step number.
	HasStep bool
	// Total is the total number of steps the line shows (0 if none).
	Total int64
	// Loss is the loss the line shows (a user regex's loss group), or nil.
	Loss *float64
	// Rate is the iterations per second the line shows (0 if none). It is
	// finite and non-negative.
	Rate float64
	// Time is when the line was read (the now given to Parse).
	Time time.Time
	// Delta is the number of steps since the previous Step of this parser
	// that showed a step number (0 for the first, after a restart, and for
	// a line without a step number).
	Delta int64
	// Elapsed is the seconds since that previous Step when Delta > 0; for a
	// line without a step number, the seconds since the previous Step of
	// any kind. It is 0 for the first Step and after a restart, and never
	// negative (a clock going backwards gives 0). Lines that arrive in one
	// burst (a block-buffered stdout) have Elapsed 0 after the first: their
	// steps are counted but not timed.
	Elapsed float64
	// Restart says that the step number went below the previous one (not a
	// new epoch's bar): the state was reset and this Step is a new start.
	Restart bool
}

// StepSeconds returns the best estimate of the seconds of one step: the
// measured Elapsed/Delta when there is one, else 1/Rate, else 0.
func (s Step) StepSeconds() float64 {
	if s.Delta > 0 && s.Elapsed > 0 {
		return s.Elapsed / float64(s.Delta)
	}
	if s.Rate > 0 {
		return 1 / s.Rate
	}
	return 0
}

// reading is what one line shows, before the stream state is applied.
type reading struct {
	step, total int64
	hasStep     bool
	rate        float64
	loss        *float64
}

// Parser reads the progress of one output stream. It is not safe for
// concurrent use. The zero Parser is not usable: build one with New.
type Parser struct {
	user *regexp.Regexp // nil: the built-ins

	have     bool // a Step has been returned (prev is valid)
	haveStep bool // a Step with a step number has been returned (last is valid)
	last     Step // the last Step with a step number
	prev     time.Time
	// unnamedStep: the user regex has one plain group, the step number.
	unnamedStep bool
	// base is the last step done before this stream's attempt.
	base int64
}

// New builds a Parser. stepRegex, when not empty, replaces the built-in
// patterns; it must compile (Go RE2 syntax) and have a step or a rate
// named group, and no other named groups than step, rate and total (see
// the package comment). Its errors wrap ErrBadRegex and name the regex.
func New(stepRegex string) (*Parser, error) {
	p := &Parser{}
	if stepRegex == "" {
		return p, nil
	}
	re, err := regexp.Compile(stepRegex)
	if err != nil {
		return nil, fmt.Errorf("step regex %q: %w: %w (e.g. %s)", stepRegex, ErrBadRegex, err, regexExample)
	}
	var hasStep, hasRate bool
	unnamed := 0
	for _, name := range re.SubexpNames()[1:] {
		switch name {
		case "":
			unnamed++
		case "step":
			hasStep = true
		case "rate":
			hasRate = true
		case "total", "loss":
		default:
			return nil, fmt.Errorf("step regex %q: %w: unknown group %q (use step, rate, total or loss, e.g. %s)", stepRegex, ErrBadRegex, name, regexExample)
		}
	}
	switch {
	case hasStep || hasRate:
	case unnamed == 1 && re.NumSubexp() == 1:
		p.unnamedStep = true // one plain group: the step number
	default:
		return nil, fmt.Errorf("step regex %q: %w: needs one group for the step number, or a (?P<step>...) or (?P<rate>...) group, e.g. %s", stepRegex, ErrBadRegex, regexExample)
	}
	p.user = re
	return p, nil
}

// regexExample is the example every regex error gives.
const regexExample = `--step-regex 'it (\d+)' or 'step (?P<step>\d+)/(?P<total>\d+) loss (?P<loss>[\d.]+)'`

// Fresh returns a new Parser with the same patterns and no state, for
// another stream or attempt; base is the last step done before it (the
// attempt's start step): the first step number a stream shows counts the
// steps from there (from 0 when the number is not above it).
func (p *Parser) Fresh(base int64) *Parser {
	return &Parser{user: p.user, unnamedStep: p.unnamedStep, base: base}
}

// Reset forgets the stream's state, as at a new attempt.
func (p *Parser) Reset() { *p = Parser{user: p.user, unnamedStep: p.unnamedStep, base: p.base} }

// Parse reads one output line, read at now. It returns a Step and true
// when the line shows new progress (see the package comment), and false
// otherwise (no progress shown, or a redraw of the step already seen).
func (p *Parser) Parse(line string, now time.Time) (Step, bool) {
	r, ok := p.read(line)
	if !ok {
		return Step{}, false
	}
	s := Step{Step: r.step, HasStep: r.hasStep, Total: r.total, Rate: r.rate, Loss: r.loss, Time: now}
	if !r.hasStep {
		if p.have {
			s.Elapsed = seconds(now.Sub(p.prev))
		}
		p.have, p.prev = true, now
		return s, true
	}
	if !p.haveStep && r.step > 0 {
		// The first step shown: the steps since the attempt began count.
		s.Delta = r.step
		if r.step > p.base {
			s.Delta = r.step - p.base
		}
	}
	if p.haveStep {
		switch last := p.last; {
		case r.step == last.Step:
			return Step{}, false // a redraw
		case r.step > last.Step:
			s.Delta, s.Elapsed = r.step-last.Step, seconds(now.Sub(last.Time))
		case last.Total > 0 && last.Step >= last.Total && r.total == last.Total:
			// A new bar of the same length after a finished one: a new
			// epoch, whose first r.step steps are new (none at 0).
			if r.step > 0 {
				s.Delta, s.Elapsed = r.step, seconds(now.Sub(last.Time))
			}
		default:
			s.Restart = true
		}
	}
	p.haveStep, p.last = true, s
	p.have, p.prev = true, now
	return s, true
}

// seconds converts d to non-negative seconds.
func seconds(d time.Duration) float64 {
	return math.Max(d.Seconds(), 0)
}

// read returns what the line shows, from its last redraw that shows
// progress.
func (p *Parser) read(line string) (reading, bool) {
	line = stripANSI(line)
	for {
		seg := line
		i := strings.LastIndexByte(line, '\r')
		if i >= 0 {
			seg, line = line[i+1:], line[:i]
		}
		if r, ok := p.readSegment(seg); ok {
			return r, true
		}
		if i < 0 {
			return reading{}, false
		}
	}
}

func (p *Parser) readSegment(seg string) (reading, bool) {
	if strings.TrimSpace(seg) == "" {
		return reading{}, false
	}
	if p.user != nil {
		return readUser(p.user, p.unnamedStep, seg)
	}
	return readBuiltin(seg)
}

// readUser applies the user regex.
func readUser(re *regexp.Regexp, unnamedStep bool, seg string) (reading, bool) {
	m := re.FindStringSubmatch(seg)
	if m == nil {
		return reading{}, false
	}
	var r reading
	for i, name := range re.SubexpNames() {
		if i == 0 || m[i] == "" {
			continue
		}
		if name == "" && unnamedStep {
			name = "step"
		}
		switch name {
		case "loss":
			if v, err := strconv.ParseFloat(m[i], 64); err == nil && !math.IsNaN(v) && !math.IsInf(v, 0) {
				r.loss = &v
			}
		case "step":
			r.step, r.hasStep = parseCount(m[i])
		case "total":
			r.total, _ = parseCount(m[i])
		case "rate":
			r.rate = parseRate(m[i])
		}
	}
	return r, r.hasStep || r.rate > 0
}

// Built-in patterns (see the package comment).
var (
	// tqdm with a total: "| 450/1000 [00:12<00:15, 36.51it/s, loss=0.1]".
	tqdmTotal = regexp.MustCompile(`(?:^|[\s|])(\d+)/(\d+) \[[\d:]+(?:<[\d:?]+)?(?:, *([^\]]*))?\]`)
	// tqdm without a total: "450it [00:12, 36.51it/s]".
	tqdmCount = regexp.MustCompile(`(?:^|\s)(\d+)([A-Za-z]+) \[[\d:]+(?:, *([^\]]*))?\]`)
	// tqdm's rate: "36.51it/s", "?it/s" or "2.50s/it".
	tqdmRate = regexp.MustCompile(`^ *(?:(\d+(?:\.\d+)?|\?)([A-Za-z]+)/s|(\d+(?:\.\d+)?)s/([A-Za-z]+))\b`)
	// Keras: "120/1000 [====>....]" (Keras 2) or "120/1000 ━━━━" (Keras 3).
	keras = regexp.MustCompile(`^\s*(\d+)/(\d+)\s+(?:\[[=>.]*\]|[━─]+)`)
	// Step words: "step 120", "Step [120/1000]", "iter: 120", "global_step=120".
	stepWord = regexp.MustCompile(`(?i)\b(?:global_?)?(?:step|iter|iteration)\b\s*[:=#]?\s*\[?\s*(\d+)(?:\s*/\s*(\d+))?`)
	// A rate anywhere: "12.5 it/s", "3 steps/s", "0.08 s/it", "80ms/step".
	anyRate    = regexp.MustCompile(`(?i)(\d+(?:\.\d+)?)\s*(?:it|its|iters?|steps?|batch(?:es)?)/s\b`)
	anyInverse = regexp.MustCompile(`(?i)(\d+(?:\.\d+)?)\s*(s|ms|us|µs)/(?:it|iter|step|batch)\b`)
)

// stepUnits are the tqdm units taken for steps.
var stepUnits = map[string]bool{
	"it": true, "its": true, "step": true, "steps": true, "batch": true, "batches": true,
	"iter": true, "iters": true, "ba": true,
}

// readBuiltin applies the built-in patterns.
func readBuiltin(seg string) (reading, bool) {
	if m := tqdmTotal.FindStringSubmatch(seg); m != nil {
		return tqdmReading(m[1], m[2], m[3])
	}
	if m := tqdmCount.FindStringSubmatch(seg); m != nil && stepUnits[m[2]] {
		return tqdmReading(m[1], "", m[3])
	}
	for _, re := range []*regexp.Regexp{keras, stepWord} { // step (and total) first
		if m := re.FindStringSubmatch(seg); m != nil {
			r := reading{}
			r.step, r.hasStep = parseCount(m[1])
			r.total, _ = parseCount(m[2])
			r.rate = rateIn(seg)
			return r, r.hasStep
		}
	}
	return reading{}, false
}

// tqdmReading reads a tqdm bar's counts and the first field of its bracket
// (the rate); a bar whose unit is not a step is ignored.
func tqdmReading(n, total, bracket string) (reading, bool) {
	r := reading{}
	if m := tqdmRate.FindStringSubmatch(bracket); m != nil {
		unit := m[2] + m[4]
		if !stepUnits[unit] {
			return reading{}, false
		}
		switch {
		case m[1] != "" && m[1] != "?":
			r.rate = parseRate(m[1])
		case m[3] != "":
			if spi := parseRate(m[3]); spi > 0 {
				r.rate = finite(1 / spi)
			}
		}
	}
	r.step, r.hasStep = parseCount(n)
	r.total, _ = parseCount(total)
	return r, r.hasStep
}

// rateIn finds an iteration rate anywhere in seg (0 if none).
func rateIn(seg string) float64 {
	if m := anyRate.FindStringSubmatch(seg); m != nil {
		return parseRate(m[1])
	}
	if m := anyInverse.FindStringSubmatch(seg); m != nil {
		v := parseRate(m[1])
		if v <= 0 {
			return 0
		}
		switch strings.ToLower(m[2]) {
		case "ms":
			v /= 1e3
		case "us", "µs":
			v /= 1e6
		}
		return finite(1 / v)
	}
	return 0
}

// parseCount parses a non-negative integer.
func parseCount(s string) (int64, bool) {
	if s == "" {
		return 0, false
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v < 0 {
		return 0, false
	}
	return v, true
}

// parseRate parses a non-negative finite decimal (0 if it is not one).
func parseRate(s string) float64 {
	v, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil {
		return 0
	}
	return finite(v)
}

// finite returns v, or 0 when v is negative, NaN or infinite.
func finite(v float64) float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
		return 0
	}
	return v
}

// stripANSI removes ANSI escape sequences (CSI such as colours and cursor
// moves, OSC, and two-byte escapes) and other C0 control characters except
// '\r' and '\t'.
func stripANSI(s string) string {
	if !strings.ContainsFunc(s, isControl) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != 0x1b {
			if !isControl(rune(c)) {
				b.WriteByte(c)
			}
			continue
		}
		if i+1 >= len(s) {
			break
		}
		switch s[i+1] {
		case '[': // CSI: parameters and intermediates, then a final byte.
			j := i + 2
			for j < len(s) && s[j] >= 0x20 && s[j] <= 0x3f {
				j++
			}
			for j < len(s) && s[j] >= 0x20 && s[j] <= 0x2f {
				j++
			}
			i = j // the final byte (or the end)
		case ']': // OSC: up to BEL or ST (ESC \).
			j := i + 2
			for j < len(s) && s[j] != 0x07 && !(s[j] == 0x1b && j+1 < len(s) && s[j+1] == '\\') {
				j++
			}
			if j < len(s) && s[j] == 0x1b {
				j++
			}
			i = j
		default:
			i++ // a two-byte escape
		}
	}
	return b.String()
}

// isControl reports whether r is a C0 control character or DEL that
// stripANSI drops ('\r' and '\t' are kept).
func isControl(r rune) bool {
	return (r < 0x20 && r != '\r' && r != '\t') || r == 0x7f
}
