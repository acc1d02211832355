package slurm

import (
	"context"
	"reflect"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/scavenger-ml/scavenger/plugins"
)

// superviseEvents runs a batch attempt's supervisor over events, as the
// watcher would deliver them, and returns its Result.
func superviseEvents(t *testing.T, n int, job jobInfo, events ...event) plugins.Result {
	t.Helper()
	l := &Launcher{opts: Options{Grace: time.Second}, logger: zap.NewNop()}
	a := newAttempt(l, plugins.AttemptSpec{JobID: "j", Attempt: 1}, n, true)
	a.jobID, a.lastJob = "9", job
	go a.supervise()
	for _, e := range events {
		a.events <- e
	}
	close(a.events)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	res, err := a.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func TestSuperviseAttribution(t *testing.T) {
	term := plugins.RankResult{ExitCode: 143, Signal: "SIGTERM"}
	tests := []struct {
		name   string
		job    jobInfo
		events []event
		want   plugins.Result
	}{{
		name: "first failure, peers stopped",
		job:  jobInfo{State: "FAILED", ExitCode: 143},
		events: []event{{kind: evRun}, {kind: evPID, ranks: []int{0}, pid: 10}, {kind: evPID, ranks: []int{1}, pid: 11},
			{kind: evExit, ranks: []int{1}, res: plugins.RankResult{ExitCode: 3}}, {kind: evExit, ranks: []int{0}, res: term}, {kind: evEnd, n: 143}},
		want: plugins.Result{ExitCode: 3, FailedRank: 1, Ranks: []plugins.RankResult{
			{Rank: 0, PID: 10, ExitCode: 143, Signal: "SIGTERM", Stopped: true}, {Rank: 1, PID: 11, ExitCode: 3}}},
	}, {
		name: "requeued: the last run counts, and srun's 0 stands for tasks it did not report",
		job:  jobInfo{State: "COMPLETED", Restarts: 1},
		events: []event{{kind: evRun}, {kind: evPID, ranks: []int{0}, pid: 10}, {kind: evPID, ranks: []int{1}, pid: 11},
			{kind: evExit, ranks: []int{0, 1}, res: term},
			{kind: evRun, n: 1}, {kind: evPID, ranks: []int{0}, pid: 20}, {kind: evPID, ranks: []int{1}, pid: 21}, {kind: evEnd, n: 0}},
		want: plugins.Result{FailedRank: -1, Ranks: []plugins.RankResult{{Rank: 0, PID: 20}, {Rank: 1, PID: 21}}},
	}, {
		name:   "cancelled while pending: no run at all",
		job:    jobInfo{State: "CANCELLED", ExitSignal: 15},
		events: nil,
		want: plugins.Result{ExitCode: 143, FailedRank: 0, Ranks: []plugins.RankResult{
			{Rank: 0, ExitCode: 143, Signal: "SIGTERM"}, {Rank: 1, ExitCode: 143, Signal: "SIGTERM"}}},
	}, {
		name:   "nothing known",
		job:    jobInfo{State: "NODE_FAIL"},
		events: []event{{kind: evRun}},
		want: plugins.Result{ExitCode: 255, FailedRank: 0, Ranks: []plugins.RankResult{
			{Rank: 0, ExitCode: 255}, {Rank: 1, ExitCode: 255}}},
	}}
	for _, tt := range tests {
		if got := superviseEvents(t, 2, tt.job, tt.events...); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s:\n got %+v\nwant %+v", tt.name, got, tt.want)
		}
	}
}
