package report

import (
	"fmt"
	"sort"
	"time"
	"unicode/utf8"

	"github.com/scavenger-ml/scavenger/api"

	"github.com/scavenger-ml/scavenger/stepstats"
	"github.com/scavenger-ml/scavenger/telemetry"
)

// This file holds the jobs of `scavctl top`: the tracker folds step records
// into per-job figures, BuildTopFrame joins them with the job records, and
// RenderTop lays a frame out for a terminal of a given size.

// TopTracker folds rank 0's step records into the live figures of each job
// (stepstats.Live). Its figures' times come from the records; it notes when
// each job's newest arrived, so that a job that stopped stepping shows no
// speed (stale).
type TopTracker struct {
	jobs map[string]*jobTrack
}

// jobTrack is what the tracker knows of one job: its live figures, and
// lastT, the newest record's time (s since the epoch, the worker's clock),
// and seenAt, when it arrived here (zero: figures seeded from a digest).
type jobTrack struct {
	stepstats.Live
	lastT  float64
	seenAt time.Time
}

// NewTopTracker returns a tracker that knows no job.
func NewTopTracker() *TopTracker { return &TopTracker{jobs: map[string]*jobTrack{}} }

// Add takes one step record of a job; m0 is the job's base batch for the
// noise scale (BaseBatch). Records of ranks other than 0, and those of steps
// already seen, are ignored.
func (t *TopTracker) Add(r telemetry.StepRecord, m0 float64) {
	if r.Rank != 0 || !r.IsStep() {
		return
	}
	j := t.jobs[r.Job]
	if j == nil {
		j = &jobTrack{Live: stepstats.NewLive(m0)}
		t.jobs[r.Job] = j
	}
	if r.Step > j.Step {
		j.lastT, j.seenAt = r.Time, time.Now()
	}
	j.Live.Add(r)
}

// staleAfter bounds how long after a job's newest step its speed is still
// shown as current: staleSteps of its steps, and at least staleMin.
const (
	staleSteps = 5
	staleMin   = 10 * time.Second
)

// stale reports whether the job's newest step is too old at now for its
// speed to be its speed now (a rank hangs, the job is stuck): it arrived
// too long ago, or (a record read back from history) the worker's clock
// says it was taken too long ago. A record time a day off its arrival is
// no clock to judge by.
func (j *jobTrack) stale(now time.Time) bool {
	if j.seenAt.IsZero() {
		return false
	}
	after := max(staleMin, time.Duration(staleSteps*j.StepS()*float64(time.Second)))
	taken := time.Unix(0, int64(j.lastT*1e9))
	plausible := j.lastT > 0 && j.seenAt.Sub(taken).Abs() < 24*time.Hour
	return now.Sub(j.seenAt) > after || plausible && now.Sub(taken) > after+staleMin
}

// Seed starts job's figures from l (what the daemon's step digest of it
// holds) unless the tracker has seen a newer step of it: the records that
// follow go on from there.
func (t *TopTracker) Seed(job string, l stepstats.Live) {
	if j := t.jobs[job]; j != nil && j.Step >= l.Step {
		return
	}
	t.jobs[job] = &jobTrack{Live: l}
}

// TopFrame is one screen of `scavctl top`: the nodes (from the samples on
// scav.node.<node>.gpu|host) above the jobs.
type TopFrame struct {
	// Now is the time of the frame; Node the daemon's node; Interval the refresh.
	Now      time.Time
	Node     string
	Interval time.Duration
	// Nodes are the nodes that sampled, by name; none when no sample came.
	Nodes []TopNode
	Jobs  []TopRow
	// Note is a line at the bottom (an error fetching, say); empty: the key help.
	Note string
	// Gone is when the daemon stopped answering (zero: it answers): the
	// frame says so under its title, and counts no job as active.
	Gone time.Time
}

// TopRow is one job's line.
type TopRow struct {
	ID             string
	State          string // the job's state, or the policy's phase while it runs
	Active         bool
	Workers, Batch int
	Step           int64
	SamplesPerS    float64
	StepS          float64
	Noise          float64
	// LeftS and CostUSD are the predicted time left and cost at the finish
	// (Predicted); for a finished job CostUSD is what it cost. The cost is
	// every view's (api.Job.CostAt): the bill, else the time at the price
	// set, else none. LeftLoS..HiS and CostLoUSD..HiUSD are their 90 %
	// intervals (0: none known; see api.Forecast).
	LeftS, LeftLoS, LeftHiS       float64
	CostUSD, CostLoUSD, CostHiUSD float64
	Predicted                     bool
	// CPUCores and RSSBytes are what the job's processes use on the nodes,
	// from the newest host samples (CPUCores nil when unknown).
	CPUCores *float64
	RSSBytes uint64
}

// BuildTopFrame joins job records with the tracker's figures and the nodes'
// per-job usage: the active jobs first, oldest first, then the finished
// ones, newest first.
func BuildTopFrame(jobs []api.Job, tr *TopTracker, nodes []TopNode, now time.Time) TopFrame {
	f := TopFrame{Now: now, Nodes: nodes}
	usage := jobUsage(nodes)
	for _, j := range jobs {
		row := TopRow{ID: j.ID, State: string(j.State), Active: !j.State.Done(), Workers: j.Config.Workers, Batch: j.Config.GlobalBatch}
		if row.Active && j.State == api.StateRunning && j.Phase != "" {
			row.State = string(j.Phase)
		}
		switch {
		case row.Active && j.Stalled != nil:
			row.State = "stalled"
		case row.Active && j.BadLoss != nil && j.BadLoss.Attempt == j.Attempt:
			row.State = "loss-" + j.BadLoss.Value
		}
		if t := tr.jobs[j.ID]; t != nil {
			row.Step = t.Step
			row.Noise = t.NoiseScale()
			if n := len(j.Attempts); (n == 0 || j.Attempts[n-1].Attempt == t.Attempt) && !t.stale(now) && j.Stalled == nil {
				// Right after a relaunch the speed is the last
				// configuration's until the new one's first step; and
				// a job that reports no step has no speed now.
				row.SamplesPerS = t.Rate.PerSecond()
				row.StepS = t.StepS()
			}
		}
		for _, at := range j.Attempts {
			row.Step = max(row.Step, at.LastStep)
		}
		if u, ok := usage[j.ID]; ok && row.Active {
			row.CPUCores, row.RSSBytes = u.CPUCores, u.RSSBytes
		}
		cost := j.CostAt(now) // the bill, else the time at the price set, else none (api.Job.CostAt)
		row.CostUSD = cost.USD
		if l, ok := api.Forecast(j.Decisions, row.Step, row.StepS, now); ok && row.Active {
			row.LeftS, row.Predicted = l.S, true
			if l.LoS < l.S || l.HiS > l.S {
				row.LeftLoS, row.LeftHiS = l.LoS, l.HiS
			}
			if cost.Basis != api.CostNone && l.USD > 0 {
				spent := row.CostUSD
				row.CostUSD += l.USD
				if l.LoUSD < l.USD || l.HiUSD > l.USD {
					row.CostLoUSD, row.CostHiUSD = spent+l.LoUSD, spent+l.HiUSD
				}
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

// shortIDs are the rows' ids as a column of width w shows them: whole
// when they fit; else cut to w-1 characters and "+" when that prefix is
// still unique among them (a prefix that scavctl takes for the job), or to
// the w characters of their unique prefix; else, when even that is longer,
// their head and their tail (the random suffix) either side of a "+".
func shortIDs(rows []TopRow, w int) []string {
	out := make([]string, len(rows))
	for i, r := range rows {
		id := r.ID
		unique := 1 // the length of its shortest prefix that no other id shares
		for k, o := range rows {
			if k != i {
				unique = max(unique, commonPrefix(id, o.ID)+1)
			}
		}
		switch {
		case utf8.RuneCountInString(id) <= w:
			out[i] = id
		case unique <= w-1:
			out[i] = clip(id, w)
		case unique <= w:
			out[i] = string([]rune(id)[:w])
		default:
			rs, tail := []rune(id), min(7, w/2)
			out[i] = string(rs[:w-tail-1]) + "+" + string(rs[len(rs)-tail:])
		}
	}
	return out
}

// commonPrefix is the length in runes of the prefix a and b share.
func commonPrefix(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	n := 0
	for n < len(ra) && n < len(rb) && ra[n] == rb[n] {
		n++
	}
	return n
}

// RenderTop lays frame f out as at most height lines of at most width
// characters: a title; the nodes and their GPUs (nodeSection), in the lines
// the jobs leave, though at least a few; a header and one row per job (the
// rest counted on the last row when they do not fit); and a help line. A
// height of 0 or less lays everything out.
func RenderTop(f TopFrame, width, height int) []string {
	if width < 20 {
		width = 20
	}
	extra := 0 // the jobs' CPU and RSS columns, when there is room for them
	if width >= 92 {
		extra = 13
	}
	// With room, the time and cost left show their 90 % intervals.
	wide := 0
	if width >= 104 {
		wide = 12
	}
	idW := min(max(width-65-extra-wide, 10), 40)
	cols := []topCol{
		{"JOB", idW, true}, {"STATE", 9, true}, {"KxBATCH", 8, false}, {"STEP", 7, false},
		{"SMP/S", 7, false}, {"STEP_T", 7, false}, {"GNS", 6, false}, {"LEFT", 6 + wide/2, false}, {"COST", 7 + wide/2, false},
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
	if !f.Gone.IsZero() {
		title = fmt.Sprintf("scavenger top - %d job(s), none known to be active", len(f.Jobs))
	}
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
	if !f.Gone.IsZero() {
		gone := fmt.Sprintf("!! scavd is gone since %s", f.Gone.Format(time.TimeOnly))
		if !f.Now.IsZero() {
			gone += fmt.Sprintf(" (%s ago)", durText(f.Now.Sub(f.Gone).Seconds()))
		}
		lines = append(lines, gone+": jobs and nodes as it last said")
	}
	nodeRoom := -1
	if height > 0 {
		// The jobs first: the nodes get what the jobs leave, but at least
		// their collapsed lines up to a third of the screen, unless that
		// leaves the jobs fewer than 3 lines.
		body := height - len(lines) - 1
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
		if wide > 0 {
			foot += " (a-b: its 90% interval)"
		}
	}
	room := len(f.Jobs)
	if height > 0 {
		room = height - len(lines) - 1
	}
	ids := shortIDs(f.Jobs, idW)
	for i, r := range f.Jobs {
		if i >= room {
			break
		}
		if i == room-1 && len(f.Jobs) > room {
			lines = append(lines, fmt.Sprintf("... %d more job(s)", len(f.Jobs)-i))
			break
		}
		c := r.Cells(wide > 0)
		cells := []string{ids[i], r.State, c.Config, c.Step, c.SamplesPerS, c.StepTime, c.Noise, c.Left, c.Cost}
		if extra > 0 {
			cells = append(cells, c.CPU, c.RSS)
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
