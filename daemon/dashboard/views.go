package dashboard

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/optimizer/objective"
	"github.com/scavenger-ml/scavenger/plugins"
	"github.com/scavenger-ml/scavenger/report"
	"github.com/scavenger-ml/scavenger/stepstats"
)

// This file turns job records, step records and node samples into what
// the pages show, through report (the figures of `scavctl report` and
// `scavctl top`): pure functions of their arguments.

// jobsView is the jobs page's table.
type jobsView struct {
	Rows []jobRow
	// State and Name filter the jobs as scavctl jobs --state and --name do.
	State, Name string
	// Shown counts the rows, Total the viewer's jobs, Active those not ended.
	Shown, Total, Active int
}

// jobRow is a job's row.
type jobRow struct {
	ID, Name, Owner, State string
	Active                 bool
	Config                 string
	Cells                  report.TopCells
	Policy, Objective      string
}

// buildJobsView is the table of jobs (the viewer's) with top's frame of
// them, filtered by state and name.
func buildJobsView(jobs []api.Job, fr report.TopFrame, state, name string) jobsView {
	v := jobsView{State: state, Name: name, Total: len(jobs)}
	byID := map[string]api.Job{}
	for _, j := range jobs {
		byID[j.ID] = j
		if !j.State.Done() {
			v.Active++
		}
	}
	for _, r := range fr.Jobs {
		j, ok := byID[r.ID]
		if !ok || !report.MatchJob(j, state, name) {
			continue
		}
		v.Rows = append(v.Rows, jobRow{ID: j.ID, Name: j.Name, Owner: ownerOf(j).User, State: r.State, Active: r.Active,
			Config: configText(j.Config), Cells: r.Cells(true), Policy: orDash(j.Optimize.Policy), Objective: orDash(j.Optimize.Objective)})
	}
	v.Shown = len(v.Rows)
	return v
}

// configText is a configuration as the pages write it: machine type
// (market) × nodes × workers × global batch, the parts the launcher left
// open left out.
func configText(c plugins.Config) string {
	var parts []string
	if c.MachineType != "" {
		t := c.MachineType
		if c.Market != "" {
			t += " (" + c.Market + ")"
		}
		parts = append(parts, t)
	}
	if c.Nodes > 0 {
		parts = append(parts, plural(c.Nodes, "node"))
	}
	parts = append(parts, plural(c.Workers, "worker"))
	if c.GlobalBatch > 0 {
		parts = append(parts, fmt.Sprintf("batch %d", c.GlobalBatch))
	} else {
		parts = append(parts, "the script's batch")
	}
	return strings.Join(parts, " × ")
}

// plural is n and noun, in the plural unless n is 1.
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// jobView is one job's page.
type jobView struct {
	ID, Name, Owner, State, Config string
	Policy, Objective, Message     string
	Active                         bool
	Cells                          report.TopCells
	Started, Wall                  string
	// Bill is the cost so far, in words.
	Bill       string
	Attempts   []attemptRow
	Decisions  []decisionRow
	Candidates []candidateRow
	// CandidatesNote says which decision the candidates are of.
	CandidatesNote string
	Output         []outLine
	LastStep       int64
	// Loading says the step history is still being read.
	Loading bool
	Err     string
	Charts  charts
	// Workers and Batch fill the move form.
	Workers, Batch int
}

// attemptRow is one attempt of the timeline.
type attemptRow struct {
	N                         int
	Config, Started, Wall     string
	Steps, Decision           string
	Predicted, Measured, Diff string
	Relaunch, Cost, Ended     string
	// EndedWhy is how it ended in full (Ended is its first word: the next
	// attempt's Decision says why it moved).
	EndedWhy string
	Current  bool
}

// decisionRow is one decision of the job's policy: at which time and step,
// from which configuration to which (Stay: none), why, and what it predicted.
type decisionRow struct {
	At, Step, Phase, From, To, Words, Predicted string
	Stay                                        bool
}

// candidateRow is one candidate of the latest decision that weighed them.
type candidateRow struct {
	Config, StepTime, Time, Cost string
	Chosen, Current, Front       bool
}

// charts are the series the job page draws (seconds since the job
// started), the attempts' starts and the candidates' front.
type charts struct {
	Rate     series    `json:"rate"`
	StepTime series    `json:"step_time"`
	Loss     series    `json:"loss"`
	Noise    series    `json:"noise"`
	Marks    []mark    `json:"marks"`
	Front    frontData `json:"front"`
}

// series is a chart's x (s) and y values.
type series [2][]float64

// mark is a relaunch: when the attempt started, and at what.
type mark struct {
	T     float64 `json:"t"`
	Label string  `json:"label"`
}

// frontData are the candidates' predicted time and cost to finish, sorted
// by time, with the chosen and current ones (-1: none) and the front.
type frontData struct {
	Time    []float64 `json:"time"`
	Cost    []float64 `json:"cost"`
	Labels  []string  `json:"labels"`
	Front   []int     `json:"front"`
	Chosen  int       `json:"chosen"`
	Current int       `json:"current"`
	NoPrice bool      `json:"no_price"`
}

// buildJobView is job j's page from its report and its feed at now.
func buildJobView(j api.Job, rep report.JobReport, snap jobSnap, now time.Time) jobView {
	v := jobView{ID: j.ID, Name: j.Name, Owner: ownerOf(j).User, State: snap.row.State, Config: configText(j.Config),
		Policy: orDash(j.Optimize.Policy), Objective: orDash(j.Optimize.Objective), Message: j.Message, Active: !j.State.Done(),
		Cells: snap.row.Cells(true), Wall: seconds(rep.TotalS), Output: snap.out, Loading: !snap.replayed,
		Workers: j.Config.Workers, Batch: j.Config.GlobalBatch, LastStep: snap.row.Step}
	if v.State == "" {
		v.State = string(j.State)
	}
	if snap.err != nil {
		v.Err = "step history: " + snap.err.Error()
	}
	if j.Started != nil {
		v.Started = clock(*j.Started, now)
	}
	v.Bill = billText(rep)
	costs := rep.AttemptCosts()
	for i := range rep.Timeline {
		v.Attempts = append(v.Attempts, attemptOf(rep, i, costs[i], now))
	}
	if n := len(v.Attempts); n > 0 && v.Active {
		// The running attempt's steps so far: its record has them once it ends.
		cur := &v.Attempts[n-1]
		cur.Current = true
		if a := rep.Timeline[n-1]; a.LastStep == 0 && snap.row.Step > 0 {
			first := a.FirstStep
			if first == 0 && n > 1 {
				first = rep.Timeline[n-2].LastStep + 1
			}
			if first > 0 && snap.row.Step >= first {
				cur.Steps = fmt.Sprintf("%d–%d", first, snap.row.Step)
			}
		}
	}
	start := time.Unix(0, 0)
	if j.Started != nil {
		start = *j.Started
	}
	for _, d := range j.Decisions {
		row := decisionRow{At: seconds(d.Time.Sub(start).Seconds()), Step: fmt.Sprint(d.Step), Phase: string(d.Phase),
			From: configText(d.From), To: configText(d.To), Stay: d.From == d.To, Words: decisionWords(d), Predicted: "-"}
		if d.PredictedS > 0 {
			row.Predicted = seconds(d.PredictedS) + " to finish"
			if d.PredictedUSD > 0 {
				row.Predicted += ", " + api.USDText(d.PredictedUSD)
			}
		}
		v.Decisions = append(v.Decisions, row)
	}
	v.Candidates, v.Charts.Front = candidates(rep, j.Config)
	if len(rep.Candidates) > 0 {
		v.CandidatesNote = fmt.Sprintf("the decision at step %d, objective %s", rep.CandidatesStep, orDash(rep.Objective))
	}
	v.Charts.Rate, v.Charts.StepTime = seriesOf(rep.Throughput), seriesOf(rep.StepTime)
	v.Charts.Loss, v.Charts.Noise = seriesOf(rep.Loss), seriesOf(rep.Noise)
	for _, a := range rep.Timeline[min(1, len(rep.Timeline)):] {
		v.Charts.Marks = append(v.Charts.Marks, mark{T: a.Started.Sub(start).Seconds(),
			Label: fmt.Sprintf("attempt %d: %s", a.Attempt.Attempt, configText(a.Config))})
	}
	return v
}

// attemptOf is attempt i of rep's timeline, which cost usd.
func attemptOf(rep report.JobReport, i int, usd float64, now time.Time) attemptRow {
	a := rep.Timeline[i]
	row := attemptRow{N: a.Attempt.Attempt, Config: configText(a.Config), Started: clock(a.Started, now), Wall: seconds(a.WallS),
		Steps: "-", Decision: startedBy(rep, i), Predicted: "-", Measured: "-", Diff: "-", Relaunch: "-", Cost: "-",
		Ended: orDash(strings.SplitN(a.EndReason, ":", 2)[0]), EndedWhy: a.EndReason}
	if a.LastStep > 0 {
		row.Steps = fmt.Sprintf("%d–%d", a.FirstStep, a.LastStep)
	}
	if a.MeasuredStepS > 0 {
		row.Measured = fmt.Sprintf("%.1f ms", a.MeasuredStepS*1e3)
	}
	if a.PredictedStepS > 0 {
		row.Predicted = fmt.Sprintf("%.1f ms", a.PredictedStepS*1e3)
		if len(a.PredictedFlags) > 0 {
			row.Predicted += " [" + strings.Join(a.PredictedFlags, ", ") + "]"
		}
		if a.PredictedLater {
			row.Predicted += " (predicted later)"
		}
		if a.MeasuredStepS > 0 {
			row.Diff = fmt.Sprintf("%+.0f%%", 100*(a.PredictedStepS-a.MeasuredStepS)/a.MeasuredStepS)
		}
	} else if t := a.PredictedText(); t != "-" {
		row.Predicted = t // a probe before any model
	}
	if i > 0 {
		if m := rep.Timeline[i-1].Move; m != nil {
			s := m.Checkpoint + m.Exit + m.Start + m.FirstStep
			row.Relaunch = fmt.Sprintf("%.1f s", s)
			if rep.PriceUSDPerHour > 0 && rep.Billed == nil {
				row.Relaunch += " (" + api.USDText(s/3600*rep.PriceUSDPerHour) + ")"
			}
		}
	}
	if usd > 0 {
		row.Cost = api.USDText(usd)
	}
	return row
}

// startedBy says in words what started attempt i of rep's timeline.
func startedBy(rep report.JobReport, i int) string {
	a := rep.Timeline[i]
	if i == 0 {
		return "the first launch, as submitted"
	}
	prev := rep.Timeline[i-1].EndReason
	why, moved := strings.CutPrefix(prev, "moved: ")
	switch {
	case moved && a.StartedBy != "":
		return a.StartedBy + ": " + a.Reason
	case moved:
		return "moved: " + why
	case prev != "":
		return "resumed after the last one ended: " + prev
	}
	return "-"
}

// decisionWords is a decision's reason in words.
func decisionWords(d api.Decision) string { return d.Reason }

// billText is the job's cost so far, in words.
func billText(rep report.JobReport) string {
	if rep.Billed != nil {
		return fmt.Sprintf("%s (%.0f instance-seconds)", rep.CostText(), rep.Billed.InstanceSeconds)
	}
	return rep.CostText()
}

// candidates are the rows and the front chart of rep's candidates, cur
// being the configuration the job runs at.
func candidates(rep report.JobReport, cur plugins.Config) ([]candidateRow, frontData) {
	cs := append([]api.CandidatePrediction(nil), rep.Candidates...)
	sort.SliceStable(cs, func(a, b int) bool { return cs[a].TotalS < cs[b].TotalS })
	fd := frontData{Chosen: -1, Current: -1, NoPrice: rep.PriceUSDPerHour <= 0 && rep.Billed == nil}
	for _, c := range cs {
		fd.Time, fd.Cost = append(fd.Time, c.TotalS), append(fd.Cost, c.TotalUSD)
	}
	front := map[int]bool{}
	fd.Front = objective.Pareto(fd.Time, fd.Cost)
	for _, i := range fd.Front {
		front[i] = true
	}
	var rows []candidateRow
	for i, c := range cs {
		cfg := plugins.Config{MachineType: c.Type, Workers: c.Workers, GlobalBatch: c.Batch}
		if c.Type == "local" {
			cfg.MachineType = ""
		}
		current := c.Workers == cur.Workers && c.Batch == cur.GlobalBatch && (cur.MachineType == "" || c.Type == cur.MachineType)
		row := candidateRow{Config: configText(cfg), StepTime: fmt.Sprintf("%.1f ms", c.StepS*1e3), Time: seconds(c.TotalS),
			Cost: "-", Chosen: c.Chosen, Current: current, Front: front[i]}
		if !fd.NoPrice {
			row.Cost = api.USDText(c.TotalUSD)
		}
		if c.Chosen {
			fd.Chosen = i
		}
		if current {
			fd.Current = i
		}
		fd.Labels = append(fd.Labels, row.Config)
		rows = append(rows, row)
	}
	return rows, fd
}

// seriesOf is a report's series as a chart takes it.
func seriesOf(ps []stepstats.Point) series {
	s := series{make([]float64, len(ps)), make([]float64, len(ps))}
	for i, p := range ps {
		s[0][i], s[1][i] = p.T, p.V
	}
	return s
}

// seconds is a duration in seconds, in words: 42.0 s, 3m05s, 2h10m.
func seconds(s float64) string {
	if s < 60 {
		return fmt.Sprintf("%.1f s", s)
	}
	d := time.Duration(s * float64(time.Second)).Round(time.Second)
	if d < time.Hour {
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	}
	return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
}

// clock is a time of day, with the date when it is not now's day.
func clock(t, now time.Time) string {
	t, now = t.Local(), now.Local()
	if t.YearDay() == now.YearDay() && t.Year() == now.Year() {
		return t.Format("15:04:05")
	}
	return t.Format("Jan 2 15:04:05")
}
