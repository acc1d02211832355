// Command benchlooptrace measures the live loop — the real scavd, the real
// policy and the real relaunch path — on jobs that replay the shared traces
// (python/bench/trace_replay.py) time-compressed, and prints each cell's
// overhead against its oracle beside the simulator's for the same cell: its
// figure does not depend on this machine's speed or load, only on the
// decisions the loop takes.
//
// A cell is an application and an objective on one node of one machine type
// (the trace's suffix: aws, azure, dgx-ext): the job may run 1 to a node's
// GPUs workers and the traces' batches, on the local launcher, one worker
// process per GPU, priced at the catalog's price of the type. The replay
// sleeps each traced step's time divided by the factor (--factor, less for
// a cell whose fastest step would otherwise pass the replay's floor of a
// millisecond a step) and reports that, so
// every time the policy sees is the traced one divided by the factor, and a
// relaunch costs the penalty the controller's prior assumes (3 s, the
// traced 3·factor s; 30 s at the default factor 10, bench-sim's). The
// overhead is counted in traced time from what the job did: each attempt's
// steps at its configuration's traced step time, and the penalty for each
// relaunch; the oracle is the best fixed candidate of the cell. The
// simulator runs the same cell the same way (optimizer/sim: the same search
// space, step by step, a report every 10 steps as the live controller makes
// them, the daemon's lead before a move's checkpoint).
//
// With --stress N it runs every cell again while `stress -c N` loads the
// machine's CPUs.
//
//	go run ./tools/benchlooptrace --scavctl bin/scavctl --traces ../shared/traces [--cells deepspeech2/time:dgx-ext] [--stress 2]
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/daemon/control"
	"github.com/scavenger-ml/scavenger/optimizer/objective"
	"github.com/scavenger-ml/scavenger/optimizer/predict"
	"github.com/scavenger-ml/scavenger/optimizer/sim"
	"github.com/scavenger-ml/scavenger/plugins"
	"github.com/scavenger-ml/scavenger/telemetry"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "benchlooptrace:", err)
		os.Exit(1)
	}
}

// defaultCells are every application's time cell on a DGX node and cost
// cell on an AWS node (the types of bench-sim's oracles for them).
const defaultCells = "bert/time:dgx-ext,bert/cost:aws,cifar10/time:dgx-ext,cifar10/cost:aws,deepspeech2/time:dgx-ext,deepspeech2/cost:aws,ncf/time:dgx-ext,ncf/cost:aws"

// controllerPriorS is the relaunch the live controller assumes before it
// measures one (control.Spec's RelaunchS); moveLeadS is how far ahead the
// daemon names a move's checkpoint step (daemon/jobs' moveLeadTime).
const (
	controllerPriorS = 3
	moveLeadS        = 0.3
)

// minWallStepS is the replay's shortest step (python/bench/trace_replay.py's
// MIN_WALL_STEP_S).
const minWallStepS = 0.001

type bench struct {
	scavctl, python, traces, policy string
	factor, maxFactor               float64
	stress                          int
}

type cell struct {
	app, typ string
	kind     objective.Kind
}

func run() error {
	var b bench
	var cells string
	flag.StringVar(&b.scavctl, "scavctl", "bin/scavctl", "scavctl binary")
	flag.StringVar(&b.python, "python", "/usr/bin/python3", "python")
	flag.StringVar(&b.traces, "traces", "../shared/traces", "the traces' directory")
	flag.StringVar(&b.policy, "policy", "scavenger", "the policy")
	flag.Float64Var(&b.maxFactor, "factor", 10, "time compression of the replay (at most: see the factor column)")
	flag.IntVar(&b.stress, "stress", 0, "also run every cell under stress -c N (0: not)")
	flag.StringVar(&cells, "cells", defaultCells, "APP/OBJECTIVE:TYPE,...")
	flag.Parse()
	var cs []cell
	for _, c := range strings.Split(cells, ",") {
		ao, typ, ok := strings.Cut(c, ":")
		app, obj, ok2 := strings.Cut(ao, "/")
		if !ok || !ok2 {
			return fmt.Errorf("cell %q: want APP/OBJECTIVE:TYPE", c)
		}
		cs = append(cs, cell{app: app, kind: objective.Kind(obj), typ: typ})
	}
	fmt.Printf("Replay compressed %g× (less where a cell's fastest step would pass the replay's floor of %g ms: its factor column), a traced second "+
		"lasting 1/factor s; a relaunch costs the controller's prior of %d s, %d·factor traced s; policy %s; %d cores.\n\n",
		b.maxFactor, 1e3*minWallStepS, controllerPriorS, controllerPriorS, b.policy, runtime.NumCPU())
	head := "| cell | type (one node) | factor | oracle (K B) | oracle h | simulated % (relaunches) | live % (relaunches) | live − simulated |"
	sep := "|---|---|---|---|---|---|---|---|"
	if b.stress > 0 {
		head += fmt.Sprintf(" live under stress -c %d %% (relaunches) | stressed − unstressed |", b.stress)
		sep += "---|---|"
	}
	fmt.Println(head + " bench-sim's first run % (all types) |")
	fmt.Println(sep + "---|")
	benchSim := map[string]string{}
	var tally tally
	for _, c := range cs {
		if _, ok := benchSim[c.app+string(c.kind)]; !ok {
			if r, err := sim.Run(context.Background(), sim.Options{TraceDir: filepath.Join(b.traces, c.app), Objective: objective.Objective{Kind: c.kind}, Policy: b.policy}); err == nil {
				benchSim[c.app+string(c.kind)] = fmt.Sprintf("%+.1f (%d)", overhead(r.JCTS, r.CostUSD, r.Oracle, c.kind), r.Relaunches)
			}
		}
		row, err := b.cell(c, &tally)
		if err != nil {
			return err
		}
		fmt.Println(row + " " + benchSim[c.app+string(c.kind)] + " |")
	}
	tally.print(b.stress)
	return nil
}

// tally counts the cells that meet issue 19's goals for the live replay.
type tally struct {
	cells, nearSim, nearUnstressed int
	worstSim, worstStress          float64
}

func (t tally) print(stress int) {
	fmt.Printf("\n## Against the targets (issue 19)\n\n| figure | now | goal | met |\n|---|---|---|---|\n")
	yes := map[bool]string{true: "yes", false: "no"}
	fmt.Printf("| live overhead vs the simulator's, same cell | %d of %d cells within 3 points (largest difference %.1f) | within 3 points on every cell | %s |\n",
		t.nearSim, t.cells, t.worstSim, yes[t.nearSim == t.cells])
	if stress > 0 {
		fmt.Printf("| live overhead under stress -c %d vs without | %d of %d cells within 3 points (largest difference %.1f) | within 3 points on every cell | %s |\n",
			stress, t.nearUnstressed, t.cells, t.worstStress, yes[t.nearUnstressed == t.cells])
	}
}

// cell runs one cell (and again under stress) and returns its table row.
func (b bench) cell(c cell, t *tally) (string, error) {
	dir := filepath.Join(b.traces, c.app)
	w, err := sim.Run(context.Background(), sim.Options{TraceDir: dir, Types: []string{c.typ}, Objective: objective.Objective{Kind: c.kind}, Policy: "fixed"})
	if err != nil {
		return "", err
	}
	req, cands, err := b.request(c, w)
	if err != nil {
		return "", err
	}
	truth, err := sim.LoadTruth(sim.Options{TraceDir: dir, Types: []string{c.typ}, Candidates: cands})
	if err != nil {
		return "", err
	}
	// The fastest step, compressed, stays twice the replay's floor: the
	// replay's records then come at the compressed pace.
	b.factor = math.Inf(1)
	for _, cand := range cands {
		b.factor = math.Min(b.factor, truth.StepTime(cand)/(2*minWallStepS))
	}
	b.factor = math.Max(math.Min(b.factor, b.maxFactor), 1)
	penalty := controllerPriorS * b.factor
	ref, err := sim.Run(context.Background(), sim.Options{TraceDir: dir, Types: []string{c.typ}, Candidates: cands, Objective: objective.Objective{Kind: c.kind},
		Policy: b.policy, ReportSteps: 10, Stepwise: true, RelaunchPenalty: time.Duration(penalty * float64(time.Second)),
		MoveLead: time.Duration(moveLeadS * b.factor * float64(time.Second))})
	if err != nil {
		return "", err
	}
	simOver := overhead(ref.JCTS, ref.CostUSD, ref.Oracle, c.kind)
	var path []string
	for _, h := range ref.History {
		path = append(path, fmt.Sprintf("%d/%d×%.0f", h.Workers, h.Batch, h.Steps))
	}
	fmt.Fprintf(os.Stderr, "benchlooptrace: simulated %s/%s: %s\n", c.app, c.kind, strings.Join(path, " → "))
	price := ref.Oracle.CostUSD / ref.Oracle.JCTS * 3600
	live, err := b.live(c, req, price, penalty, ref.Oracle, false)
	if err != nil {
		return "", err
	}
	row := fmt.Sprintf("| %s/%s | %s | %.3g | %d %d | %.2f | %+.1f (%d) | %s | %+.1f |", c.app, c.kind, c.typ, b.factor, ref.Oracle.Workers, ref.Oracle.Batch, ref.Oracle.JCTS/3600,
		simOver, ref.Relaunches, live.text(), live.over-simOver)
	t.cells++
	d := math.Abs(live.over - simOver)
	t.worstSim = math.Max(t.worstSim, d)
	if d <= 3 {
		t.nearSim++
	}
	if b.stress > 0 {
		stressed, err := b.live(c, req, price, penalty, ref.Oracle, true)
		if err != nil {
			return "", err
		}
		row += fmt.Sprintf(" %s | %+.1f |", stressed.text(), stressed.over-live.over)
		d := math.Abs(stressed.over - live.over)
		t.worstStress = math.Max(t.worstStress, d)
		if d <= 3 {
			t.nearUnstressed++
		}
	}
	return row, nil
}

// request is the live job's search space for cell c (1 to a node's GPUs
// workers, the traces' batches) and those candidates named as the traces
// name the type: what control.Spec makes of it.
func (b bench) request(c cell, w *sim.Report) (api.Optimize, []predict.Candidate, error) {
	gpus, minB, maxB := 0, math.MaxInt, 0
	for _, f := range w.Front {
		if f.Type == c.typ && f.Nodes == 1 {
			gpus = max(gpus, f.Workers)
		}
		minB, maxB = min(minB, f.Batch), max(maxB, f.Batch)
	}
	opt := api.Optimize{Policy: b.policy, Objective: string(c.kind), MinWorkers: 1, MaxWorkers: gpus, MinBatch: minB, MaxBatch: maxB, TargetSamples: 1}
	spec, _, err := control.Spec(opt, plugins.Config{Workers: 1, GlobalBatch: minB})
	if err != nil {
		return opt, nil, fmt.Errorf("cell %s/%s: %w", c.app, c.kind, err)
	}
	cands := spec.Candidates
	for i := range cands {
		cands[i].Type = c.typ
	}
	return opt, cands, nil
}

// result is a live job's figures in traced time.
type result struct {
	over       float64
	relaunches int
}

func (r result) text() string { return fmt.Sprintf("%+.1f (%d)", r.over, r.relaunches) }

var jobRe = regexp.MustCompile(`scavctl: job ([A-Za-z0-9_-]+):`)

// live runs cell c's job under the real daemon and scores what it did in
// traced time against oracle.
func (b bench) live(c cell, opt api.Optimize, price, penalty float64, oracle sim.Outcome, stressed bool) (result, error) {
	state, err := os.MkdirTemp("", "benchlooptrace-")
	if err != nil {
		return result{}, err
	}
	defer os.RemoveAll(state)
	truth, err := sim.LoadTruth(sim.Options{TraceDir: filepath.Join(b.traces, c.app), Types: []string{c.typ}})
	if err != nil {
		return result{}, err
	}
	args := []string{"--state-dir", state, "run", "--name", "replay-" + c.app, "--workers", fmt.Sprintf("1:%d", opt.MaxWorkers),
		"--batch-size", fmt.Sprintf("%d:%d", opt.MinBatch, opt.MaxBatch), "--policy", b.policy, "--objective", string(c.kind),
		"--price", strconv.FormatFloat(price, 'g', -1, 64), "--target-samples", strconv.FormatInt(int64(math.Round(truth.Target*truth.M0)), 10),
		"--", b.python, "python/bench/trace_replay.py", "--traces", b.traces, "--app", c.app, "--type", c.typ,
		"--factor", strconv.FormatFloat(b.factor, 'g', -1, 64), "--penalty", strconv.FormatFloat(penalty, 'g', -1, 64)}
	var load *exec.Cmd
	if stressed {
		load = exec.Command("stress", "-c", strconv.Itoa(b.stress))
		if err := load.Start(); err != nil {
			return result{}, fmt.Errorf("start stress (apt install stress): %w", err)
		}
		defer func() {
			_ = syscall.Kill(load.Process.Pid, syscall.SIGTERM)
			_ = load.Wait()
		}()
	}
	began := time.Now()
	fmt.Fprintf(os.Stderr, "benchlooptrace: %s/%s on %s%s ...\n", c.app, c.kind, c.typ, map[bool]string{true: " under stress"}[stressed])
	var errOut bytes.Buffer
	cmd := exec.Command(b.scavctl, args...)
	// One worker process per GPU of the node, whatever the CPUs here: the
	// replay sleeps.
	cmd.Stderr, cmd.Env = &errOut, append(os.Environ(), "OMP_NUM_THREADS=1", fmt.Sprintf("SCAV_LOCAL_SLOTS=%d", opt.MaxWorkers))
	if err := cmd.Run(); err != nil {
		return result{}, fmt.Errorf("scavctl %s: %w\n%s", strings.Join(args, " "), err, errOut.String())
	}
	fmt.Fprintf(os.Stderr, "benchlooptrace: ... %s\n", time.Since(began).Round(time.Second))
	m := jobRe.FindStringSubmatch(errOut.String())
	if m == nil {
		return result{}, fmt.Errorf("no job id in:\n%s", errOut.String())
	}
	j, recs, err := b.job(state, m[1])
	if err != nil {
		return result{}, err
	}
	return score(j, recs, c, price, penalty, oracle, b.traces)
}

// score counts what job j did in traced time: each attempt's rank-0 steps at
// its configuration's traced step time, and the penalty for each relaunch.
func score(j api.Job, recs []telemetry.StepRecord, c cell, price, penalty float64, oracle sim.Outcome, traces string) (result, error) {
	steps := map[int]float64{}
	for _, r := range recs {
		if r.Rank == 0 && r.IsStep() {
			steps[r.Attempt]++
		}
	}
	var cands []predict.Candidate
	for _, a := range j.Attempts {
		cands = append(cands, predict.Candidate{Type: c.typ, Nodes: 1, Workers: a.Config.Workers, Batch: a.Config.GlobalBatch})
	}
	truth, err := sim.LoadTruth(sim.Options{TraceDir: filepath.Join(traces, c.app), Types: []string{c.typ}, Candidates: cands})
	if err != nil {
		return result{}, err
	}
	var secs float64
	var path []string
	for i, a := range j.Attempts {
		secs += steps[a.Attempt] * truth.StepTime(cands[i])
		path = append(path, fmt.Sprintf("%d/%d×%.0f", a.Config.Workers, a.Config.GlobalBatch, steps[a.Attempt]))
	}
	fmt.Fprintf(os.Stderr, "benchlooptrace: live %s/%s: %s\n", c.app, c.kind, strings.Join(path, " → "))
	n := max(len(j.Attempts)-1, 0)
	secs += float64(n) * penalty
	return result{over: overhead(secs, secs*price/3600, oracle, c.kind), relaunches: n}, nil
}

// job reads a job's record and its step records.
func (b bench) job(state, id string) (api.Job, []telemetry.StepRecord, error) {
	out, err := exec.Command(b.scavctl, "--state-dir", state, "status", id, "-o", "json").Output()
	if err != nil {
		return api.Job{}, nil, fmt.Errorf("status %s: %w", id, err)
	}
	var st struct {
		Job api.Job `json:"job"`
	}
	if err := json.Unmarshal(out, &st); err != nil {
		return api.Job{}, nil, err
	}
	out, err = exec.Command(b.scavctl, "--state-dir", state, "steps", id, "-o", "json").Output()
	if err != nil {
		return api.Job{}, nil, fmt.Errorf("steps %s: %w", id, err)
	}
	var recs []telemetry.StepRecord
	dec := json.NewDecoder(bytes.NewReader(out))
	for dec.More() {
		var r telemetry.StepRecord
		if err := dec.Decode(&r); err != nil {
			return api.Job{}, nil, err
		}
		recs = append(recs, r)
	}
	return st.Job, recs, nil
}

// overhead is a run's overhead over oracle in the objective's terms (%).
func overhead(jct, cost float64, oracle sim.Outcome, k objective.Kind) float64 {
	if k == objective.Cost {
		return 100 * (cost/oracle.CostUSD - 1)
	}
	return 100 * (jct/oracle.JCTS - 1)
}
