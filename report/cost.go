package report

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/plugins"
	"github.com/scavenger-ml/scavenger/stepstats"
)

// Billed is what the machines of a job whose launcher acquired them
// (cloudvm) cost, attempt by attempt, and how the cost predicted at each
// decision compares with it.
type Billed struct {
	api.Cost
	Attempts []BilledAttempt `json:"attempts"`
	// Checks are the decisions that predicted a cost: the total each
	// predicted (spent by then plus the cost to finish) against the total
	// billed.
	Checks []CostCheck `json:"checks,omitempty"`
}

// BilledAttempt is one attempt's machines and their cost.
type BilledAttempt struct {
	Attempt int    `json:"attempt"`
	Type    string `json:"type,omitempty"`
	Market  string `json:"market,omitempty"`
	Workers int    `json:"workers"`
	api.Cost
}

// CostCheck is one decision's predicted total cost against the actual one.
type CostCheck struct {
	Time         time.Time `json:"t"`
	Step         int64     `json:"step"`
	To           string    `json:"to"`
	SpentUSD     float64   `json:"spent_usd"`
	PredictedUSD float64   `json:"predicted_usd"`
	ActualUSD    float64   `json:"actual_usd"`
	// ErrorPct is (predicted - actual) / actual, in percent.
	ErrorPct float64 `json:"error_pct"`
}

// BilledOf is the billed cost of j, or nil when its launcher bills nothing.
func BilledOf(j api.Job) *Billed {
	if j.Cost == nil {
		return nil
	}
	b := &Billed{Cost: *j.Cost}
	for _, a := range j.Attempts {
		ba := BilledAttempt{Attempt: a.Attempt, Type: a.Config.MachineType, Market: a.Config.Market, Workers: a.Config.Workers}
		if a.Cost != nil {
			ba.Cost = *a.Cost
		}
		b.Attempts = append(b.Attempts, ba)
	}
	for _, d := range j.Decisions {
		if d.PredictedUSD <= 0 {
			continue
		}
		spent := d.SpentUSD
		if spent <= 0 { // a record made before decisions kept it
			spent = SpentAt(j, d.Time)
		}
		c := CostCheck{Time: d.Time, Step: d.Step, To: configName(d.To), SpentUSD: spent, PredictedUSD: spent + d.PredictedUSD, ActualUSD: j.Cost.USD}
		c.ErrorPct = pct(c.PredictedUSD, c.ActualUSD)
		b.Checks = append(b.Checks, c)
	}
	return b
}

// SpentAt is what job j's machines had cost by t: the attempts that ended
// before it, and the running one's cost in proportion of its time by then.
func SpentAt(j api.Job, t time.Time) float64 {
	var spent float64
	var from time.Time
	if j.Started != nil {
		from = *j.Started
	}
	for _, a := range j.Attempts {
		if a.Cost == nil {
			continue
		}
		end := time.Now()
		if a.Ended != nil {
			end = *a.Ended
		}
		if !t.Before(end) {
			spent += a.Cost.USD
		} else if t.After(from) && end.After(from) {
			spent += a.Cost.USD * t.Sub(from).Seconds() / end.Sub(from).Seconds()
		}
		from = end
		if t.Before(end) {
			break
		}
	}
	return spent
}

// costSeries is the cumulative billed cost at each attempt's end.
func costSeries(j api.Job, start time.Time) []stepstats.Point {
	out := []stepstats.Point{{T: 0, V: 0}}
	var sum float64
	for _, a := range j.Attempts {
		if a.Cost == nil || a.Ended == nil {
			continue
		}
		sum += a.Cost.USD
		out = append(out, stepstats.Point{T: a.Ended.Sub(start).Seconds(), V: sum})
	}
	return out
}

// configName names a configuration: K x type (market), batch B.
func configName(c plugins.Config) string {
	s := fmt.Sprint(c.Workers)
	if c.MachineType != "" {
		s += " x " + c.MachineType
		if c.Market != "" {
			s += " (" + c.Market + ")"
		}
	}
	return s + ", batch " + batchText(c.GlobalBatch)
}

// Print writes the machines' cost: per attempt, and each decision's
// prediction against the total.
func (b *Billed) Print(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "#\tTYPE\tMARKET\tWORKERS\tINSTANCES\tINSTANCE-S\tBILLED-S\tUSD")
	for _, a := range b.Attempts {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%d\t%.1f\t%.1f\t%.5f\n", a.Attempt, dash(a.Type), dash(a.Market), a.Workers, len(a.Instances),
			a.InstanceSeconds, a.BilledSeconds, a.USD)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("print billed cost: %w", err)
	}
	fmt.Fprintf(w, "Billed: %.1f instance-seconds (%.1f billed, provider rounding and minimum included), $%.5f\n", b.InstanceSeconds, b.BilledSeconds, b.USD)
	if len(b.Checks) == 0 {
		return nil
	}
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "DECISION AT STEP\tTO\tSPENT\tPREDICTED TOTAL\tACTUAL TOTAL\tERROR")
	for _, c := range b.Checks {
		fmt.Fprintf(tw, "%d\t%s\t$%.5f\t$%.5f\t$%.5f\t%+.1f%%\n", c.Step, c.To, c.SpentUSD, c.PredictedUSD, c.ActualUSD, c.ErrorPct)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("print cost checks: %w", err)
	}
	return nil
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
