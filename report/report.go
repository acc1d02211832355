// Package report owns the analysis and rendering behind `scavctl report`,
// `scavctl top` and the web dashboard (daemon/dashboard), as pure values
// and functions: the report of a job (JobReport: its timeline, the
// optimizer's predictions against what was measured, its time and cost,
// what each attempt cost, and the figures and HTML page drawn from them)
// and top's frames (TopTracker and NodeTracker fold step records and node
// samples, BuildTopFrame joins them with the job records, RenderTop lays a
// frame out for a terminal; the Cells of its rows are the same text in the
// dashboard's tables). It takes job records, step records, node samples
// and times; fetching them and writing files, terminals or pages is the
// caller's.
package report

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/internal/words"
	"github.com/scavenger-ml/scavenger/optimizer/policy"

	"github.com/scavenger-ml/scavenger/stepstats"
	"github.com/scavenger-ml/scavenger/telemetry"
)

// JobReport is what `scavctl report` shows: the job's timeline, the
// optimizer's predictions against what was measured, and the totals; the
// series behind its figures (noise scale, cost, the candidates of a
// decision) come with it in JSON.
type JobReport struct {
	Job       string    `json:"job"`
	State     string    `json:"state"`
	Policy    string    `json:"policy,omitempty"`
	Objective string    `json:"objective,omitempty"`
	Timeline  []Attempt `json:"timeline"`
	Decisions int       `json:"decisions"`
	TotalS    float64   `json:"total_s"`
	// RelaunchS adds up the relaunches' overhead (checkpoint, exit, start, first step).
	RelaunchS float64 `json:"relaunch_s"`
	// CostUSD is what the job cost, as every view shows it (api.Job.CostAt:
	// the bill, else the wall time at PriceUSDPerHour, else 0); CostBasis
	// says which.
	CostUSD         float64       `json:"cost_usd"`
	PriceUSDPerHour float64       `json:"price_usd_per_hour"`
	CostBasis       api.CostBasis `json:"cost_basis"`

	// Noise is the gradient noise scale (samples) over the job, from rank
	// 0's gradient norms step by step (stepstats.NoiseSeries; times in
	// seconds since the job started).
	Noise []stepstats.Point `json:"noise,omitempty"`
	// Cost is the cumulative cost over the job; PredictedCost, per decision
	// that predicted one, the cost at the finish it predicted.
	Cost          []stepstats.Point `json:"cost,omitempty"`
	PredictedCost []stepstats.Point `json:"predicted_cost,omitempty"`
	// Candidates are the predictions the latest model-based decision chose
	// among (CandidatesStep is that decision's step).
	Candidates     []api.CandidatePrediction `json:"candidates,omitempty"`
	CandidatesStep int64                     `json:"candidates_step,omitempty"`
	// Billed is what the machines a launcher acquired cost (cloudvm; nil
	// otherwise): Cost and PredictedCost are then the bill's.
	Billed *Billed `json:"billed,omitempty"`
	// Throughput is rank 0's samples per second over the job and Loss its
	// training loss, each point over a few steps of one attempt
	// (stepstats.RateSeries, stepstats.LossSeries).
	Throughput []stepstats.Point `json:"throughput,omitempty"`
	Loss       []stepstats.Point `json:"loss,omitempty"`
	// StepTime is rank 0's mean step time over the same steps as Throughput's
	// points (stepstats.StepTimeSeries).
	StepTime []stepstats.Point `json:"step_time,omitempty"`
	// Finishes are the decisions that predicted the time to finish, with
	// the time it took.
	Finishes []Finish `json:"finishes,omitempty"`
	// BadLoss is where the job's loss turned NaN or infinite (nil: never).
	BadLoss *api.BadLoss `json:"bad_loss,omitempty"`
	// Said are the policy's decisions, what and why in plain English with
	// their figures.
	Said []Said `json:"said,omitempty"`

	decisions []api.Decision
	start     time.Time // the origin of the series' times
}

// Attempt is one attempt of a job's timeline, with its step times.
type Attempt struct {
	api.Attempt
	WallS float64 `json:"wall_s"`
	// MeasuredStepS is the median step time of rank 0 after the warm-up;
	// PredictedStepS what the policy predicted for this configuration when it chose it.
	MeasuredStepS  float64 `json:"measured_step_s,omitempty"`
	PredictedStepS float64 `json:"predicted_step_s,omitempty"`
	// PredictedLater is set when no decision predicted the step time when
	// it chose the configuration (a probe before any model) and
	// PredictedStepS is the first prediction made for it afterwards.
	PredictedLater bool `json:"predicted_later,omitempty"`
	// StartedBy is the phase of the decision that started the attempt
	// ("probing", "optimised"; empty for the first and user moves).
	StartedBy string `json:"started_by,omitempty"`
	// Reason is that decision's reason (empty with StartedBy).
	Reason string `json:"reason,omitempty"`
	// ModelStepS is what the model of the latest model-based decision
	// predicts for this configuration (0 when it made none).
	ModelStepS float64 `json:"model_step_s,omitempty"`
	// PredictedFlags and ModelFlags say what made those predictions
	// doubtful (low-confidence, non-monotone): they are not facts.
	PredictedFlags []string `json:"predicted_flags,omitempty"`
	ModelFlags     []string `json:"model_flags,omitempty"`
}

// Finish is a decision's predicted time to finish against the time it took.
type Finish struct {
	Step  int64  `json:"step"`
	Phase string `json:"phase"`
	// Type, Workers and Batch are the configuration the decision chose.
	Type    string `json:"type,omitempty"`
	Workers int    `json:"workers"`
	Batch   int    `json:"batch"`
	// AtS is the decision's time, in seconds since the job started.
	AtS        float64 `json:"at_s"`
	PredictedS float64 `json:"predicted_s"`
	// PredictedLoS and PredictedHiS are its 90 % interval (0: none).
	PredictedLoS float64 `json:"predicted_lo_s,omitempty"`
	PredictedHiS float64 `json:"predicted_hi_s,omitempty"`
	// TookS is the time from the decision to the job's end once the job
	// succeeded (0 until then: it has not finished, or did not finish the
	// work the prediction was about).
	TookS float64 `json:"took_s,omitempty"`
}

// Said is one decision of the job's policy as the report shows it: where
// it went from and to (the notation of internal/words), its predicted time
// and cost to finish (cost only when the job has a cost to show), what a
// probe was expected to gain and its chance, and the decision in plain
// English (api.Decision.Words).
type Said struct {
	Step      int64   `json:"step"`
	Phase     string  `json:"phase"`
	From      string  `json:"from"`
	To        string  `json:"to"`
	FinishS   float64 `json:"finish_s,omitempty"`
	FinishUSD float64 `json:"finish_usd,omitempty"`
	Gain      float64 `json:"gain,omitempty"`
	GainUnit  string  `json:"gain_unit,omitempty"`
	Chance    float64 `json:"chance,omitempty"`
	Words     string  `json:"words"`
}

// said is what the decisions of j said, with their figures.
func said(j api.Job) []Said {
	shows := j.ShowsCost()
	out := make([]Said, 0, len(j.Decisions))
	for _, d := range j.Decisions {
		s := Said{Step: d.Step, Phase: string(d.Phase), From: words.ConfigNotation(d.From), To: words.ConfigNotation(d.To),
			FinishS: d.PredictedS, Words: words.Said(d, shows)}
		if shows {
			s.FinishUSD = d.PredictedUSD
		}
		if p := d.Probe; p != nil && p.Gain > 0 {
			s.Gain, s.GainUnit, s.Chance = p.Gain-p.Cost, p.GainUnit, p.Chance
		}
		out = append(out, s)
	}
	return out
}

// maxNoisePoints bounds the noise series of a report; maxStepPoints its
// throughput and loss series (about).
const (
	maxNoisePoints = 300
	maxStepPoints  = 150
)

// Make is the report of job j from rank 0's step records; now ends what
// is still running.
func Make(j api.Job, recs []telemetry.StepRecord, now time.Time) JobReport {
	var a stepstats.Aggregate
	for _, r := range recs {
		a.Add(r)
	}
	rep := MakeFrom(j, a.AttemptStepS(), now)
	t0 := float64(rep.start.UnixNano()) / 1e9
	rep.Noise = stepstats.NoiseSeries(recs, BaseBatch(j), t0, maxNoisePoints)
	rep.Throughput = stepstats.RateSeries(recs, t0, maxStepPoints)
	rep.Loss = stepstats.LossSeries(recs, t0, maxStepPoints)
	rep.StepTime = stepstats.StepTimeSeries(recs, t0, maxStepPoints)
	return rep
}

// MakeFrom is the report of job j from each attempt's measured step time
// (rank 0's median after the warm-up: stepstats.Aggregate.AttemptStepS,
// which a job's step digest keeps), without the series drawn from the
// records (noise, throughput, loss, step time): all that its text needs.
func MakeFrom(j api.Job, stepS map[int]float64, now time.Time) JobReport {
	cost := j.CostAt(now)
	price := cost.PriceUSDPerHour // 0 unless the cost is the time at a price
	rep := JobReport{Job: j.ID, State: string(j.State), Policy: j.Optimize.Policy, Objective: j.Optimize.Objective,
		Decisions: len(j.Decisions), PriceUSDPerHour: price, CostBasis: cost.Basis, CostUSD: cost.USD, decisions: j.Decisions, BadLoss: j.BadLoss}
	for i := len(j.Decisions) - 1; i >= 0; i-- {
		if d := j.Decisions[i]; len(d.Candidates) > 0 {
			rep.Candidates, rep.CandidatesStep = d.Candidates, d.Step
			break
		}
	}
	rep.timeline(j, stepS, now)
	start := j.Created
	if j.Started != nil {
		start = *j.Started
		end := now
		if j.Ended != nil {
			end = *j.Ended
		}
		rep.TotalS = end.Sub(start).Seconds()
	}
	rep.start = start
	if rep.TotalS > 0 && price > 0 {
		// The node is billed from start to end, relaunches included: the
		// cost grows linearly, the attempts' boundaries marked.
		rep.Cost = append(rep.Cost, stepstats.Point{T: 0, V: 0})
		for _, at := range rep.Timeline[min(1, len(rep.Timeline)):] {
			t := at.Started.Sub(start).Seconds()
			rep.Cost = append(rep.Cost, stepstats.Point{T: t, V: t / 3600 * price})
		}
		rep.Cost = append(rep.Cost, stepstats.Point{T: rep.TotalS, V: rep.CostUSD})
	}
	for _, d := range j.Decisions {
		if d.PredictedUSD > 0 && price > 0 {
			t := d.Time.Sub(start).Seconds()
			rep.PredictedCost = append(rep.PredictedCost, stepstats.Point{T: t, V: t/3600*price + d.PredictedUSD})
		}
	}
	if rep.Billed = BilledOf(j); rep.Billed != nil {
		rep.Cost, rep.PredictedCost = costSeries(j, start), nil
		for _, c := range rep.Billed.Checks {
			rep.PredictedCost = append(rep.PredictedCost, stepstats.Point{T: c.Time.Sub(start).Seconds(), V: c.PredictedUSD})
		}
	}
	rep.Finishes = finishes(j.Decisions, start, rep.TotalS, rep.State)
	rep.Said = said(j)
	return rep
}

// finishes are the decisions of ds that predicted the time to finish, with
// the time it took from each when the job succeeded (state) after totalS
// seconds from start.
func finishes(ds []api.Decision, start time.Time, totalS float64, state string) []Finish {
	var out []Finish
	for _, d := range ds {
		if d.PredictedS <= 0 {
			continue
		}
		f := Finish{Step: d.Step, Phase: string(d.Phase), Type: d.To.MachineType, Workers: d.To.Workers, Batch: d.To.GlobalBatch,
			AtS: d.Time.Sub(start).Seconds(), PredictedS: d.PredictedS, PredictedLoS: d.PredictedLoS, PredictedHiS: d.PredictedHiS}
		if state == string(api.StateSucceeded) {
			f.TookS = totalS - f.AtS
		}
		out = append(out, f)
	}
	return out
}

// CostText says what the job cost, or that no price was set to say it, in
// the words of every view (api.JobCost.Label).
func (r JobReport) CostText() string {
	return api.JobCost{Basis: r.CostBasis, USD: r.CostUSD, PriceUSDPerHour: r.PriceUSDPerHour}.Label()
}

// ShowsCost reports whether the report has a cost to show (a bill or a
// price): without, its predicted costs, made at a placeholder price, are
// not shown either.
func (r JobReport) ShowsCost() bool { return r.CostBasis != api.CostNone }

// BaseBatch is the batch job j's noise scale is measured against: its first
// attempt's global batch (the configured one before any attempt).
func BaseBatch(j api.Job) float64 { return float64(j.BaseBatch()) }

// timeline sets the report's attempts: their wall time, measured step time
// (rank 0's after the warm-up, stepS), the step time predicted when they
// were chosen and by the latest model, and the relaunch overhead.
func (r *JobReport) timeline(j api.Job, stepS map[int]float64, now time.Time) {
	for _, at := range j.Attempts {
		ra := Attempt{Attempt: at, MeasuredStepS: stepS[at.Attempt]}
		end := now
		if at.Ended != nil {
			end = *at.Ended
		}
		ra.WallS = end.Sub(at.Started).Seconds()
		ra.predicted(j.Decisions)
		for _, c := range r.Candidates {
			if c.Workers == at.Config.Workers && c.Batch == at.Config.GlobalBatch {
				ra.ModelStepS, ra.ModelFlags = c.StepS, c.Flags
			}
		}
		if m := at.Move; m != nil {
			r.RelaunchS += m.Checkpoint + m.Exit + m.Start + m.FirstStep
		}
		r.Timeline = append(r.Timeline, ra)
	}
}

// Print writes the report as text, within 100 columns: a line on the job,
// its attempts with their measured and predicted step times, the
// relaunches, the decisions that chose a configuration with their predicted
// time to finish against the time it took, and the totals.
func (r JobReport) Print(w io.Writer) error {
	fmt.Fprintf(w, "Job %s (%s)", r.Job, r.State)
	if r.Policy != "" {
		fmt.Fprintf(w, ", policy %s, objective %s, %d decision(s)", r.Policy, r.Objective, r.Decisions)
	}
	fmt.Fprintln(w)
	if b := r.BadLoss; b != nil {
		fmt.Fprintf(w, "Loss: turned %s at step %d (attempt %d): the model did not train from there\n", b.Value, b.Step, b.Attempt)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "#\tWORKERS\tBATCH\tSTEPS\tWALL\tSTEP MEASURED\tSTEP PREDICTED\tENDED BY")
	for _, a := range r.Timeline {
		steps := "-"
		if a.LastStep > 0 {
			steps = fmt.Sprintf("%d..%d", a.FirstStep, a.LastStep)
		}
		pred := a.PredictedText()
		fmt.Fprintf(tw, "%d\t%d\t%s\t%s\t%.1fs\t%.1f ms\t%s\t%s\n", a.Attempt.Attempt, a.Config.Workers, batchText(a.Config.GlobalBatch),
			steps, a.WallS, a.MeasuredStepS*1e3, pred, clip(a.EndReason, 26))
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("print report of %s: %w", r.Job, err)
	}
	r.printRelaunches(w)
	r.printFinishes(w)
	r.printSaid(w)
	total := time.Duration(r.TotalS * float64(time.Second)).Round(time.Millisecond)
	if _, err := fmt.Fprintf(w, "Total: %s, %s; relaunches %.2fs\n", total, r.CostText(), r.RelaunchS); err != nil {
		return fmt.Errorf("print report of %s: %w", r.Job, err)
	}
	if r.Billed != nil {
		return r.Billed.Print(w)
	}
	return nil
}

// printRelaunches writes what each relaunch took, part by part.
func (r JobReport) printRelaunches(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	header := false
	for _, a := range r.Timeline {
		m := a.Move
		if m == nil {
			continue
		}
		if !header {
			fmt.Fprintln(w, "Relaunches:")
			fmt.Fprintln(tw, "AFTER\tTOTAL\tCHECKPOINT\tEXIT\tSTART\tFIRST STEP\tNOTE")
			header = true
		}
		note := ""
		if m.Fallback {
			note = "no checkpoint acknowledged: stopped"
		}
		fmt.Fprintf(tw, "%d\t%.2fs\t%.2fs\t%.2fs\t%.2fs\t%.2fs\t%s\n", a.Attempt.Attempt, m.Checkpoint+m.Exit+m.Start+m.FirstStep,
			m.Checkpoint, m.Exit, m.Start, m.FirstStep, note)
	}
	_ = tw.Flush()
}

// printFinishes writes, for each decision that predicted when the job would
// finish, that time against the time it took (for a finished job).
func (r JobReport) printFinishes(w io.Writer) {
	if len(r.Finishes) == 0 {
		return
	}
	table(w, "Predicted time to finish, at each decision that made one:", "STEP\tPHASE\tTO\tPREDICTED\tTOOK\tERROR", func(tw io.Writer) {
		for _, f := range r.Finishes {
			t := f.Text()
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", f.Step, f.Phase, words.Notation(f.Type, f.Workers, f.Batch), t.Predicted, t.Took, t.Error)
		}
	})
}

// table writes a title, then a table of its header and the rows fill writes.
func table(w io.Writer, title, header string, fill func(tw io.Writer)) {
	fmt.Fprintln(w, title)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, header)
	fill(tw)
	_ = tw.Flush()
}

// printSaid writes the policy's decisions: a table of their figures, then
// each in plain English.
func (r JobReport) printSaid(w io.Writer) {
	if len(r.Said) == 0 {
		return
	}
	table(w, "Decisions:", "STEP\tPHASE\tFROM\tTO\tFINISH IN\tCOST\tEXPECTED GAIN\tCHANCE", func(tw io.Writer) {
		for _, d := range r.Said {
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", d.Step, d.Phase, d.From, d.To, d.finishText(), d.costText(), d.gainText(), d.chanceText())
		}
	})
	for _, d := range r.Said {
		fmt.Fprint(w, wrap(fmt.Sprintf("at step %d: %s", d.Step, d.Words), 98, "  ", "    "))
	}
}

func (d Said) finishText() string {
	if d.FinishS <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f s", d.FinishS)
}

func (d Said) costText() string {
	if d.FinishUSD <= 0 {
		return "-"
	}
	return api.USDText(d.FinishUSD)
}

func (d Said) gainText() string {
	switch {
	case d.Gain == 0:
		return "-"
	case d.GainUnit == "$":
		return api.USDText(d.Gain)
	}
	return fmt.Sprintf("%.3g %s", d.Gain, d.GainUnit)
}

func (d Said) chanceText() string {
	if d.Chance <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f%%", 100*d.Chance)
}

// wrap breaks text into lines of at most width characters, the first
// after first, the others after rest, each ending in a newline.
func wrap(text string, width int, first, rest string) string {
	var b strings.Builder
	line, empty := first, true
	for _, word := range strings.Fields(text) {
		if !empty && len(line)+1+len(word) > width {
			b.WriteString(line + "\n")
			line, empty = rest, true
		}
		if !empty {
			line += " "
		}
		line, empty = line+word, false
	}
	b.WriteString(line + "\n")
	return b.String()
}

// FinishText is how the reports write a Finish.
type FinishText struct {
	// Predicted is the time predicted (with its 90 % interval when known),
	// Took the time it took and Error the error in percent of it, and
	// whether the interval held it ("-" while not known).
	Predicted, Took, Error string
}

// Text is how the reports write f.
func (f Finish) Text() FinishText {
	d := func(s float64) string {
		return (time.Duration(s * float64(time.Second))).Round(100 * time.Millisecond).String()
	}
	t := FinishText{Predicted: d(f.PredictedS), Took: "-", Error: "-"}
	interval := f.PredictedHiS > f.PredictedLoS && f.PredictedLoS > 0
	if interval {
		t.Predicted += fmt.Sprintf(" (%s..%s)", d(f.PredictedLoS), d(f.PredictedHiS))
	}
	if f.TookS > 0 {
		t.Took = d(f.TookS)
		t.Error = fmt.Sprintf("%+.0f%%", pct(f.PredictedS, f.TookS))
		if interval {
			if f.TookS >= f.PredictedLoS && f.TookS <= f.PredictedHiS {
				t.Error += ", inside"
			} else {
				t.Error += ", outside"
			}
		}
	}
	return t
}

// PredictedText is how the reports write the step time predicted for a:
// the value and its error against the measured one, the flags that make it
// doubtful in brackets ("later" when it was
// predicted after the attempt started), "probe, no model yet" for a probe
// before any model, "-" otherwise.
func (a Attempt) PredictedText() string {
	if a.PredictedStepS <= 0 {
		if a.StartedBy == string(policy.PhaseProbing) {
			return "probe, no model yet"
		}
		return "-"
	}
	s := fmt.Sprintf("%.1f ms (%+.0f%%)", a.PredictedStepS*1e3, pct(a.PredictedStepS, a.MeasuredStepS))
	if len(a.PredictedFlags) > 0 {
		s += " [" + strings.Join(a.PredictedFlags, ",") + "]"
	}
	if a.PredictedLater {
		s += " later"
	}
	return s
}

// predicted sets what was predicted for the attempt's configuration: by
// the decision that started it (the last one before it that went there), or
// failing that by the first one after its start that predicted it.
func (a *Attempt) predicted(ds []api.Decision) {
	same := func(d api.Decision) bool {
		return d.To.Workers == a.Config.Workers && d.To.GlobalBatch == a.Config.GlobalBatch
	}
	for _, d := range ds {
		if !d.Time.After(a.Started) && same(d) {
			a.StartedBy, a.Reason, a.PredictedStepS, a.PredictedFlags, a.PredictedLater = string(d.Phase), d.Reason, d.PredictedStepS, d.PredictedFlags, false
		}
	}
	if a.PredictedStepS > 0 {
		return
	}
	for _, d := range ds {
		if d.Time.After(a.Started) && same(d) && d.PredictedStepS > 0 {
			a.PredictedStepS, a.PredictedFlags, a.PredictedLater = d.PredictedStepS, d.PredictedFlags, true
			return
		}
	}
}

// batchText is how reports write a global batch: the number, or "(script's
// own)" for 0 (the script chose it).
func batchText(b int) string {
	if b == 0 {
		return "(script's own)"
	}
	return fmt.Sprint(b)
}

// pct is v's difference from ref in percent of ref (0 when ref is 0).
func pct(v, ref float64) float64 {
	if ref == 0 {
		return 0
	}
	return 100 * (v - ref) / ref
}
