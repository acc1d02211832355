package slurm

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/scavenger-ml/scavenger/launchers/supervisor"
	"github.com/scavenger-ml/scavenger/plugins"
)

// jobInfo is what the launcher reads of one `scontrol show job -o` line.
type jobInfo struct {
	ID       string
	Name     string
	State    string // PENDING, RUNNING, COMPLETED, FAILED, CANCELLED, ...
	Reason   string
	Restarts int
	NumCPUs  int
	NumNodes int
	NumTasks int
	NodeList string // compressed host list, "(null)" while pending
	// ExitCode and ExitSignal are the batch script's exit ("3:0", "0:9").
	ExitCode, ExitSignal int
	fields               map[string]string
}

// finalStates are the job states from which a job does not run again by
// itself (a requeue makes a new PENDING state).
var finalStates = map[string]bool{
	"COMPLETED": true, "FAILED": true, "CANCELLED": true, "TIMEOUT": true, "NODE_FAIL": true,
	"OUT_OF_MEMORY": true, "PREEMPTED": true, "BOOT_FAIL": true, "DEADLINE": true,
	"SPECIAL_EXIT": true, "REVOKED": true,
}

// final reports whether the job reached a final state.
func (j jobInfo) final() bool { return finalStates[j.State] }

// fieldKey matches the key of a "Key=Value" field of scontrol's one-line output.
var fieldKey = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_:/]*=`)

// parseFields splits one line of `scontrol show <entity> -o` into its
// Key=Value fields. Values may contain spaces (Command=, WorkDir=,
// Comment=): a word that does not start with a key continues the value
// before it.
func parseFields(line string) map[string]string {
	out := map[string]string{}
	last := ""
	for _, w := range strings.Split(strings.TrimSpace(line), " ") {
		if loc := fieldKey.FindStringIndex(w); loc != nil {
			last = w[:loc[1]-1]
			out[last] = w[loc[1]:]
			continue
		}
		if last != "" {
			out[last] += " " + w
		}
	}
	return out
}

// parseJob parses one `scontrol show job -o` line.
func parseJob(line string) (jobInfo, error) {
	f := parseFields(line)
	j := jobInfo{ID: f["JobId"], Name: f["JobName"], State: f["JobState"], Reason: f["Reason"], NodeList: f["NodeList"], fields: f}
	if j.ID == "" || j.State == "" {
		return j, fmt.Errorf("no JobId or JobState in %q", line)
	}
	atoi := func(k string) int { n, _ := strconv.Atoi(f[k]); return n }
	j.Restarts, j.NumCPUs, j.NumNodes, j.NumTasks = atoi("Restarts"), atoi("NumCPUs"), atoi("NumNodes"), atoi("NumTasks")
	if c, s, ok := strings.Cut(f["ExitCode"], ":"); ok {
		j.ExitCode, _ = strconv.Atoi(c)
		j.ExitSignal, _ = strconv.Atoi(s)
	}
	return j, nil
}

// cutLabel splits a line of `srun --label` output into its task number and
// text ("  3: text" -> 3, "text"); ok is false for a line without a label.
func cutLabel(s string) (rank int, text string, ok bool) {
	i := 0
	for i < len(s) && s[i] == ' ' {
		i++
	}
	j := i
	for j < len(s) && s[j] >= '0' && s[j] <= '9' {
		j++
	}
	if j == i || j-i > 7 || j >= len(s) || s[j] != ':' {
		return 0, s, false
	}
	rank, err := strconv.Atoi(s[i:j])
	if err != nil {
		return 0, s, false
	}
	text = s[j+1:]
	text = strings.TrimPrefix(text, " ")
	return rank, text, true
}

// parseTaskList expands "0-2,5" into [0 1 2 5].
func parseTaskList(s string) ([]int, error) {
	var out []int
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			return nil, fmt.Errorf("task list %q: %w", s, err)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a || b-a > 1<<16 {
				return nil, fmt.Errorf("task list %q: bad range %q", s, part)
			}
		}
		for r := a; r <= b; r++ {
			out = append(out, r)
		}
	}
	return out, nil
}

// signalByText maps strsignal(3) descriptions, lower-cased ("terminated",
// "user defined signal 1"), and names ("SIGTERM") to signals. Go's
// syscall.Signal.String uses glibc's descriptions.
var signalByText = func() map[string]syscall.Signal {
	m := map[string]syscall.Signal{}
	for s := syscall.Signal(1); s < 65; s++ {
		if name := unix.SignalName(s); name != "" {
			m[strings.ToLower(s.String())] = s
			m[strings.ToLower(name)] = s
		}
	}
	return m
}()

// statusResult turns a raw wait status into a RankResult's exit code and signal.
func statusResult(status uint32) plugins.RankResult {
	return supervisor.Status(syscall.WaitStatus(status))
}

// textResult reads srun's description of how tasks ended ("Completed",
// "Exited with exit code 3", "Killed", "Segmentation fault (core dumped)").
func textResult(text string) (plugins.RankResult, bool) {
	text = strings.TrimSpace(text)
	if text == "Completed" {
		return plugins.RankResult{}, true
	}
	if c, ok := strings.CutPrefix(text, "Exited with exit code "); ok {
		n, err := strconv.Atoi(c)
		return plugins.RankResult{ExitCode: n}, err == nil
	}
	text = strings.TrimSuffix(text, " (core dumped)")
	if s, ok := signalByText[strings.ToLower(text)]; ok {
		return supervisor.Signaled(s), true
	}
	return plugins.RankResult{}, false
}

// Markers the wrapper and the batch script write, unlabelled or as a
// task's first line.
const (
	pidMarker = "SCAVPID " // a task's first stdout line: its process id
	runMarker = "SCAVRUN " // the batch script's first line in both files: SLURM_RESTART_COUNT
	endMarker = "SCAVEND " // the batch script's last stderr line: srun's exit status
)

// eventKind says what an event reports.
type eventKind int

const (
	evStep eventKind = iota // srun launched step (job.step)
	evPID                   // a task's process id (and its step, when it printed it)
	evExit                  // tasks ended
	evRun                   // a (re)run of the batch script began
	evEnd                   // the batch script's srun ended with code
)

// event is what a line of srun's or the batch script's output tells the attempt.
type event struct {
	kind  eventKind
	step  string
	ranks []int
	res   plugins.RankResult // exit code and signal of evExit
	pid   int
	n     int // restart count of evRun, exit status of evEnd
}

var (
	reStepID    = regexp.MustCompile(`^\d+\.\d+$`)
	reLaunching = regexp.MustCompile(`^srun: launching StepId=(\d+\.\d+) `)
	reReceived  = regexp.MustCompile(`Received task exit notification for (\d+) tasks? of StepId=\S+ \(status=0x([0-9a-fA-F]+)\)`)
	reTaskEnd   = regexp.MustCompile(`^srun: (?:error: |launch/slurm: _task_finish: )?(\S+): tasks? ([0-9][0-9,\-]*): (.+)$`)
	reStepdNote = regexp.MustCompile(`^slurmstepd(-\S+)?: error: \*\*\* (STEP|JOB) `)
)

// lineParser turns the lines of one srun step (its stdout and stderr, or
// the batch script's output files) into output for the ranks and events
// for the attempt. It is used by one goroutine per stream.
type lineParser struct {
	n      int
	out    plugins.OutputFunc
	emit   func(event)
	other  func(stream plugins.Stream, line string) // unlabelled lines that are no event
	status *uint32                                  // from the last "Received task exit notification"
	// cont is the rank whose line was cut (longer than the reader's
	// buffer) and goes on in the next piece; -1 for none.
	cont int
}

// piece handles a piece of a line: the whole line when complete, else a
// cut part whose rest, without a label, comes in the next pieces.
func (p *lineParser) piece(stream plugins.Stream, s string, complete bool) {
	if p.cont >= 0 {
		if p.out != nil {
			p.out(p.cont, stream, s)
		}
		if complete {
			p.cont = -1
		}
		return
	}
	p.line(stream, s)
	if !complete {
		if rank, _, ok := cutLabel(s); ok && rank < p.n {
			p.cont = rank
		}
	}
}

// line handles one line, without its newline, of stream.
func (p *lineParser) line(stream plugins.Stream, s string) {
	if rank, text, ok := cutLabel(s); ok && rank < p.n {
		if stream == plugins.Stdout {
			if v, isPID := strings.CutPrefix(text, pidMarker); isPID {
				f := append(strings.Fields(v), "")
				if pid, err := strconv.Atoi(f[0]); err == nil {
					ev := event{kind: evPID, ranks: []int{rank}, pid: pid}
					if reStepID.MatchString(f[1]) {
						ev.step = f[1]
					}
					p.emit(ev)
					return
				}
			}
		} else if reStepdNote.MatchString(text) {
			p.other(stream, s)
			return
		}
		if p.out != nil {
			p.out(rank, stream, text)
		}
		return
	}
	if v, ok := strings.CutPrefix(s, runMarker); ok {
		if n, err := strconv.Atoi(strings.TrimSpace(v)); err == nil {
			if stream == plugins.Stderr {
				p.status = nil
				p.emit(event{kind: evRun, n: n})
			}
			return
		}
	}
	if v, ok := strings.CutPrefix(s, endMarker); ok && stream == plugins.Stderr {
		if n, err := strconv.Atoi(strings.TrimSpace(v)); err == nil {
			p.emit(event{kind: evEnd, n: n})
			return
		}
	}
	if stream == plugins.Stderr {
		if m := reLaunching.FindStringSubmatch(s); m != nil {
			p.emit(event{kind: evStep, step: m[1]})
		}
		if m := reReceived.FindStringSubmatch(s); m != nil {
			if st, err := strconv.ParseUint(m[2], 16, 32); err == nil {
				v := uint32(st)
				p.status = &v
			}
		}
		if m := reTaskEnd.FindStringSubmatch(s); m != nil {
			if ranks, err := parseTaskList(m[2]); err == nil {
				res, ok := textResult(m[3])
				if p.status != nil {
					res, ok = statusResult(*p.status), true
					p.status = nil
				}
				if ok {
					p.emit(event{kind: evExit, ranks: ranks, res: res})
				}
			}
		}
	}
	p.other(stream, s)
}
