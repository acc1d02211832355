package report

import (
	"fmt"
	"sort"
	"time"

	"github.com/scavenger-ml/scavenger/api"

	"github.com/scavenger-ml/scavenger/stepstats"
	"github.com/scavenger-ml/scavenger/telemetry"
)

// This file holds the jobs of `scavctl top`: the tracker folds step records
// into per-job figures, BuildTopFrame joins them with the job records, and
// RenderTop lays a frame out for a terminal of a given size.

// TopTracker folds rank 0's step records into the live figures of each job
// (stepstats.Live). It keeps no clock: times come from the records.
type TopTracker struct {
	jobs map[string]*stepstats.Live
}

// NewTopTracker returns a tracker that knows no job.
func NewTopTracker() *TopTracker { return &TopTracker{jobs: map[string]*stepstats.Live{}} }

// Add takes one step record of a job; m0 is the job's base batch for the
// noise scale (BaseBatch). Records of ranks other than 0, and those of steps
// already seen, are ignored.
func (t *TopTracker) Add(r telemetry.StepRecord, m0 float64) {
	if r.Rank != 0 || !r.IsStep() {
		return
	}
	j := t.jobs[r.Job]
	if j == nil {
		l := stepstats.NewLive(m0)
		j = &l
		t.jobs[r.Job] = j
	}
	j.Add(r)
}

// Seed starts job's figures from l (what the daemon's step digest of it
// holds) unless the tracker has seen a newer step of it: the records that
// follow go on from there.
func (t *TopTracker) Seed(job string, l stepstats.Live) {
	if j := t.jobs[job]; j != nil && j.Step >= l.Step {
		return
	}
	t.jobs[job] = &l
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
	// (Predicted); for a finished job CostUSD is what it cost.
	LeftS     float64
	CostUSD   float64
	Predicted bool
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
		if t := tr.jobs[j.ID]; t != nil {
			row.Step = t.Step
			row.Noise = t.NoiseScale()
			if n := len(j.Attempts); n == 0 || j.Attempts[n-1].Attempt == t.Attempt {
				// Right after a relaunch the speed is the last
				// configuration's until the new one's first step.
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
		price := j.Optimize.PriceUSDPerHour // 0: none set, no cost shown
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
				if price > 0 {
					row.CostUSD += d.PredictedUSD * left / d.PredictedS
				}
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
