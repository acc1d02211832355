package control

import (
	"fmt"
	"time"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/optimizer/objective"
)

// A job's limits hold: the policy keeps the projected total within the
// budget (and the deadline), and when what was measured reaches one the
// controller stops the job — its workers checkpoint and it ends stopped
// (exit 143), the reason naming the limit and what was reached.

// limitReached is the reason to stop a job optimised by opt once its
// machines have cost spent (known: a bill, not an estimate) and elapsed
// has passed since it was submitted; "" while its limits hold. The budget
// holds for every objective; the deadline stops a cost objective's job
// (least cost under a deadline: the time objective races it instead).
// Pure.
func limitReached(opt api.Optimize, spent float64, known bool, elapsed time.Duration) string {
	if opt.BudgetUSD > 0 && known && spent >= opt.BudgetUSD {
		return fmt.Sprintf("the budget of %s is spent (%s so far, measured from its machines' bills)", objective.USD(opt.BudgetUSD), objective.USD(spent))
	}
	if d := opt.Deadline.D(); d > 0 && opt.Objective == string(objective.Cost) && elapsed >= d {
		return fmt.Sprintf("the deadline of %s is reached (%s since it was submitted)", d, elapsed.Round(time.Second))
	}
	return ""
}
