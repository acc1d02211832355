package allocs

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/internal/testnats"
	"github.com/scavenger-ml/scavenger/internal/testuser"
	"github.com/scavenger-ml/scavenger/telemetry/history"
)

// TestAJobJoinsOnlyItsOwnersAllocation: issue 20's allocation attack. Bob's
// Slurm job is reported by the prolog; mallory's job naming it
// ("allocation": "slurm.N") is refused and not listed in it (nor stopped
// with it); bob's own job joins it; an allocation no hook reported becomes
// the first job's owner's.
func TestAJobJoinsOnlyItsOwnersAllocation(t *testing.T) {
	mallory, bob := testuser.Add(t, "m"), testuser.Add(t, "b")
	owner := func(u testuser.User) api.Owner {
		return api.Owner{UID: uint32(u.UID), GID: uint32(u.GID), User: u.Name}
	}
	_, js := testnats.JetStream(t)
	st, err := history.OpenStore(context.Background(), js, history.Retention{})
	if err != nil {
		t.Fatal(err)
	}
	as := &Store{KV: st.Allocations, Node: "n1", Stop: func(string) {}}
	ctx := t.Context()
	if _, err := as.Report(ctx, api.AllocationEvent{Event: api.AllocationBegin,
		Allocation: api.Allocation{Scheduler: "slurm", ID: "77", User: bob.Name, UID: bob.UID}}); err != nil {
		t.Fatal(err)
	}
	if err := as.Attach(ctx, "slurm.77", "mallorys-000001", owner(mallory)); err == nil || !strings.Contains(err.Error(), "not "+mallory.Name+"'s") {
		t.Errorf("mallory's job joins bob's allocation: %v", err)
	}
	if err := as.Attach(ctx, "slurm.77", "bobs-000001", owner(bob)); err != nil {
		t.Errorf("bob's job joins his allocation: %v", err)
	}
	if err := as.Attach(ctx, "slurm.78", "mallorys-000002", owner(mallory)); err != nil {
		t.Errorf("mallory's job in an allocation no hook reported: %v", err)
	}
	if err := as.Attach(ctx, "slurm.78", "bobs-000002", owner(bob)); err == nil {
		t.Error("bob's job joins the allocation mallory's job made")
	}
	all, err := as.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range all {
		want := map[string][]string{"77": {"bobs-000001"}, "78": {"mallorys-000002"}}[a.ID]
		if !slices.Equal(a.Jobs, want) {
			t.Errorf("allocation %s holds %v, want %v", a.Key(), a.Jobs, want)
		}
	}
}
