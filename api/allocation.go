package api

import (
	"regexp"
	"strings"
	"time"
)

// A scheduler's prolog and epilog hooks (`scavctl slurm prolog|epilog`) tell
// the node daemon when an allocation begins and ends on its node; jobs that
// `scavctl run` starts inside the allocation are tied to it, so that their
// telemetry can be found by the scheduler's job id, and the epilog stops
// any that outlive it.

// Allocation is one scheduler allocation (a Slurm job) as the hooks on this
// node reported it, with the Scavenger jobs run inside it.
type Allocation struct {
	// Scheduler names the scheduler ("slurm"); ID is its job id there.
	Scheduler string `json:"scheduler"`
	ID        string `json:"id"`
	User      string `json:"user,omitempty"`
	UID       int    `json:"uid,omitempty"`
	Partition string `json:"partition,omitempty"`
	// Nodes is the allocation's node list as the scheduler writes it.
	Nodes string `json:"nodes,omitempty"`
	// Node is the node whose hooks reported the allocation.
	Node    string     `json:"node"`
	Started *time.Time `json:"started,omitempty"`
	Ended   *time.Time `json:"ended,omitempty"`
	// Jobs lists the ids of the Scavenger jobs run inside the allocation.
	Jobs []string `json:"jobs,omitempty"`
}

// Key is the allocation's key in the allocation bucket and in
// RunRequest.Allocation: "<scheduler>.<id>", e.g. "slurm.4711".
func (a Allocation) Key() string { return a.Scheduler + "." + a.ID }

// AllocationEvent is the body of scav.api.allocation: a hook's report that
// an allocation began or ended on this node.
type AllocationEvent struct {
	// Event is AllocationBegin or AllocationEnd.
	Event      string     `json:"event"`
	Allocation Allocation `json:"allocation"`
}

// Allocation events.
const (
	AllocationBegin = "begin"
	AllocationEnd   = "end"
)

var allocationPart = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// ValidAllocationKey reports whether key has the form "<scheduler>.<id>".
func ValidAllocationKey(key string) bool {
	scheduler, id, ok := strings.Cut(key, ".")
	return ok && allocationPart.MatchString(scheduler) && allocationPart.MatchString(id)
}
