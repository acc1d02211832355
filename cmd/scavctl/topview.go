package main

import (
	"fmt"
	"math"
	"sort"
	"time"
	"unicode/utf8"

	"github.com/scavenger-ml/scavenger/api"

	"github.com/scavenger-ml/scavenger/optimizer/gns"
	"github.com/scavenger-ml/scavenger/telemetry"
)

// This file holds what `scavctl top` shows, as pure values and functions:
// the tracker folds step records into per-job figures, buildFrame joins them
// with the job records, and renderTop lays a frame out for a terminal of a
// given size. top.go does the I/O.

// topTracker folds rank 0's step records into the live figures of each job.
// It keeps no clock: times come from the records.
type topTracker struct {
	jobs map[string]*jobTrack
}

// jobTrack is what the tracker knows of one job.
type jobTrack struct {
	step    int64
	attempt int
	world   int
	batch   int
	window  []ratePoint // the last rateWindow steps of rank 0
	est     gns.Estimator
	m0      float64
	lastDts []float64
}

type ratePoint struct {
	t       float64
	samples int
}

// topWindow is the number of recent steps rates and step times are taken over.
const topWindow = 20

func newTopTracker() *topTracker { return &topTracker{jobs: map[string]*jobTrack{}} }

// add takes one step record of job; m0 is the job's base batch for the noise
// scale (its first attempt's global batch). Records of ranks other than 0,
// and those of steps already seen, are ignored.
func (t *topTracker) add(r telemetry.StepRecord, m0 float64) {
	if r.Rank != 0 || !r.IsStep() {
		return
	}
	j := t.jobs[r.Job]
	if j == nil {
		j = &jobTrack{m0: m0}
		t.jobs[r.Job] = j
	}
	if r.Step <= j.step {
		return // a replayed or repeated record
	}
	if r.Attempt != j.attempt {
		// A new configuration: its speed is not the last one's.
		j.attempt, j.window, j.lastDts = r.Attempt, nil, nil
	}
	j.step, j.world = r.Step, r.World
	if r.GlobalBatch > 0 {
		j.batch = r.GlobalBatch
	}
	samples := r.GlobalBatch
	if samples == 0 {
		samples = r.Samples * r.World
	}
	j.window = append(j.window, ratePoint{r.Time, samples})
	if len(j.window) > topWindow {
		j.window = j.window[1:]
	}
	if r.Seconds > 0 {
		j.lastDts = append(j.lastDts, r.Seconds)
		if len(j.lastDts) > topWindow {
			j.lastDts = j.lastDts[1:]
		}
	}
	if s, ok := gradSample(r, j.m0); ok {
		if e, err := j.est.Update(s); err == nil {
			j.est = e
		}
	}
}

// rate is the samples per second over the window (0 when unknown).
func (j *jobTrack) rate() float64 {
	if len(j.window) < 2 {
		return 0
	}
	n := 0
	for _, p := range j.window[1:] {
		n += p.samples
	}
	if dt := j.window[len(j.window)-1].t - j.window[0].t; dt > 0 {
		return float64(n) / dt
	}
	return 0
}

// noise is the gradient noise scale once the estimate averages enough samples (0 before).
func (j *jobTrack) noise() float64 {
	if j.est.Steps() < noiseWarmup {
		return 0
	}
	v := j.est.NoiseScale(j.m0)
	if math.IsInf(v, 0) || math.IsNaN(v) {
		return 0
	}
	return v
}

// topFrame is one screen of `scavctl top`: the nodes (from the samples on
// scav.node.<node>.gpu|host) above the jobs.
type topFrame struct {
	// Now is the time of the frame; Node the daemon's node; Interval the refresh.
	Now      time.Time
	Node     string
	Interval time.Duration
	// Nodes are the nodes that sampled, by name; none when no sample came.
	Nodes []topNode
	Jobs  []topRow
	// Note is a line at the bottom (an error fetching, say); empty: the key help.
	Note string
}

// topRow is one job's line.
type topRow struct {
	ID             string
	State          string // the job's state, or the policy's phase while it runs
	Active         bool
	Workers, Batch int
	Step           int64
	SamplesPerS    float64
	StepS          float64
	Noise          float64
	// LeftS and CostUSD are the predicted time left and cost at the finish
	// (Predicted); for a finished job CostUSD is what it cost.
	LeftS     float64
	CostUSD   float64
	Predicted bool
	// CPUCores and RSSBytes are what the job's processes use on the nodes,
	// from the newest host samples (CPUCores nil when unknown).
	CPUCores *float64
	RSSBytes uint64
}

// buildFrame joins job records with the tracker's figures and the nodes'
// per-job usage: the active jobs first, oldest first, then the finished
// ones, newest first. It is pure.
func buildFrame(jobs []api.Job, tr *topTracker, nodes []topNode, now time.Time) topFrame {
	f := topFrame{Now: now, Nodes: nodes}
	usage := jobUsage(nodes)
	for _, j := range jobs {
		row := topRow{ID: j.ID, State: string(j.State), Active: !j.State.Done(), Workers: j.Config.Workers, Batch: j.Config.GlobalBatch}
		if row.Active && j.State == api.StateRunning && j.Phase != "" {
			row.State = string(j.Phase)
		}
		if t := tr.jobs[j.ID]; t != nil {
			row.Step = t.step
			row.SamplesPerS = t.rate()
			row.StepS = median(t.lastDts)
			row.Noise = t.noise()
		}
		for _, at := range j.Attempts {
			row.Step = max(row.Step, at.LastStep)
		}
		if u, ok := usage[j.ID]; ok && row.Active {
			row.CPUCores, row.RSSBytes = u.CPUCores, u.RSSBytes
		}
		price := j.Optimize.PriceUSDPerHour
		if price == 0 {
			price = 1
		}
		var spentS float64
		if j.Started != nil {
			end := now
			if j.Ended != nil {
				end = *j.Ended
			}
			spentS = max(0, end.Sub(*j.Started).Seconds())
		}
		row.CostUSD = spentS / 3600 * price
		if row.Active {
			for i := len(j.Decisions) - 1; i >= 0; i-- {
				d := j.Decisions[i]
				if d.PredictedS <= 0 {
					continue
				}
				left := max(0, d.PredictedS-now.Sub(d.Time).Seconds())
				row.LeftS, row.Predicted = left, true
				row.CostUSD += d.PredictedUSD * left / d.PredictedS
				break
			}
		}
		f.Jobs = append(f.Jobs, row)
	}
	created := map[string]time.Time{}
	ended := map[string]time.Time{}
	for _, j := range jobs {
		created[j.ID] = j.Created
		if j.Ended != nil {
			ended[j.ID] = *j.Ended
		}
	}
	sort.SliceStable(f.Jobs, func(a, b int) bool {
		x, y := f.Jobs[a], f.Jobs[b]
		if x.Active != y.Active {
			return x.Active
		}
		if x.Active {
			return created[x.ID].Before(created[y.ID])
		}
		return ended[x.ID].After(ended[y.ID])
	})
	return f
}

// renderTop lays frame f out as at most height lines of at most width
// characters: a title; the nodes and their GPUs (nodeSection), in the lines
// the jobs leave, though at least a few; a header and one row per job (the
// rest counted on the last row when they do not fit); and a help line. A
// height of 0 or less lays everything out. It is pure.
func renderTop(f topFrame, width, height int) []string {
	if width < 20 {
		width = 20
	}
	extra := 0 // the jobs' CPU and RSS columns, when there is room for them
	if width >= 92 {
		extra = 13
	}
	idW := min(max(width-65-extra, 10), 40)
	cols := []topCol{
		{"JOB", idW, true}, {"STATE", 9, true}, {"KxBATCH", 8, false}, {"STEP", 7, false},
		{"SMP/S", 7, false}, {"STEP_T", 7, false}, {"GNS", 6, false}, {"LEFT", 6, false}, {"COST", 7, false},
	}
	if extra > 0 {
		cols = append(cols, topCol{"CPU", 5, false}, topCol{"RSS", 6, false})
	}
	active := 0
	for _, r := range f.Jobs {
		if r.Active {
			active++
		}
	}
	title := fmt.Sprintf("scavenger top - %d job(s), %d active", len(f.Jobs), active)
	if len(f.Nodes) > 0 {
		title += fmt.Sprintf(", %d node(s)", len(f.Nodes))
	}
	if f.Node != "" {
		title += ", node " + f.Node
	}
	if !f.Now.IsZero() {
		title += " - " + f.Now.Format(time.TimeOnly)
	}
	lines := []string{title}
	nodeRoom := -1
	if height > 0 {
		// The jobs first: the nodes get what the jobs leave, but at least
		// their collapsed lines up to a third of the screen, unless that
		// leaves the jobs fewer than 3 lines.
		body := height - 2
		jobsWant := 1 + max(1, len(f.Jobs))
		reserve := min(collapsedSize(f.Nodes), max(2, body/3))
		if body-reserve < 3 {
			reserve = 0 // too short: the title counts the nodes
		}
		nodeRoom = max(body-jobsWant, reserve)
	}
	lines = append(lines, nodeSection(f.Nodes, f.Now, width, nodeRoom)...)
	lines = append(lines, tableLine(cols, colNames(cols)...))
	foot := f.Note
	if foot == "" {
		foot = "q quit"
		if f.Interval > 0 {
			foot += fmt.Sprintf(", every %s", f.Interval)
		}
		foot += "; GNS: gradient noise scale (samples); ~: predicted"
	}
	room := len(f.Jobs)
	if height > 0 {
		room = height - len(lines) - 1
	}
	for i, r := range f.Jobs {
		if i >= room {
			break
		}
		if i == room-1 && len(f.Jobs) > room {
			lines = append(lines, fmt.Sprintf("... %d more job(s)", len(f.Jobs)-i))
			break
		}
		cells := []string{r.ID, r.State, configText(r.Workers, r.Batch), stepText(r.Step),
			siText(r.SamplesPerS), msText(r.StepS), siText(r.Noise), leftText(r), costText(r)}
		if extra > 0 {
			rss := "-"
			if r.RSSBytes > 0 {
				rss = bytesShort(float64(r.RSSBytes))
			}
			cells = append(cells, coresText(r.CPUCores), rss)
		}
		lines = append(lines, tableLine(cols, cells...))
	}
	if len(f.Jobs) == 0 && (height <= 0 || len(lines) < height-1) {
		lines = append(lines, "no jobs")
	}
	if height <= 0 || len(lines) < height {
		lines = append(lines, foot)
	}
	if height > 0 && len(lines) > height {
		lines = lines[:height]
	}
	for i, l := range lines {
		lines[i] = clip(l, width)
	}
	return lines
}

// clip cuts s to n characters, marking the cut with "+" (top writes ASCII
// only, for any terminal at the end of an SSH session).
func clip(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	if n <= 1 {
		return string([]rune(s)[:n])
	}
	return string([]rune(s)[:n-1]) + "+"
}

func configText(k, b int) string {
	if b <= 0 {
		return fmt.Sprintf("%dx-", k)
	}
	return fmt.Sprintf("%dx%d", k, b)
}

func stepText(s int64) string {
	if s <= 0 {
		return "-"
	}
	return fmt.Sprint(s)
}

// siText formats a non-negative quantity in at most 6 characters: 950, 12.3k, 4.5M.
func siText(v float64) string {
	switch {
	case !(v > 0) || math.IsInf(v, 0):
		return "-"
	case v < 10:
		return fmt.Sprintf("%.1f", v)
	case v < 10e3:
		return fmt.Sprintf("%.0f", v)
	case v < 1e6:
		return fmt.Sprintf("%.1fk", v/1e3)
	case v < 1e9:
		return fmt.Sprintf("%.1fM", v/1e6)
	}
	return fmt.Sprintf("%.1fG", v/1e9)
}

// msText formats a step time in at most 7 characters: 71.7ms, 712ms, 1.23s, 42s.
func msText(s float64) string {
	switch {
	case !(s > 0) || math.IsInf(s, 0):
		return "-"
	case s < 0.1:
		return fmt.Sprintf("%.1fms", s*1e3)
	case s < 1:
		return fmt.Sprintf("%.0fms", s*1e3)
	case s < 10:
		return fmt.Sprintf("%.2fs", s)
	}
	return durText(s)
}

func leftText(r topRow) string {
	if !r.Active || !r.Predicted {
		return "-"
	}
	return "~" + durText(r.LeftS)
}

// durText formats seconds compactly: 42s, 3m05s, 2h10m, 3d04h.
func durText(s float64) string {
	d := time.Duration(s * float64(time.Second)).Round(time.Second)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd%02dh", int(d.Hours())/24, int(d.Hours())%24)
}

func costText(r topRow) string {
	if !(r.CostUSD > 0) {
		return "-"
	}
	var v string
	switch {
	case r.CostUSD < 100:
		v = fmt.Sprintf("$%.2f", r.CostUSD)
	case r.CostUSD < 100e3:
		v = fmt.Sprintf("$%.0f", r.CostUSD)
	default:
		v = fmt.Sprintf("$%.0fk", r.CostUSD/1e3)
	}
	if r.Active && r.Predicted {
		return "~" + v
	}
	return v
}
