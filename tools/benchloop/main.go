// Command benchloop measures Scavenger's closed loop on this machine: it runs
// examples/resumable_cnn.py once under a moving policy and once at every
// fixed candidate of the same search space, with the same amount of work, and
// prints the time to finish of each, the loop's overhead against the best
// fixed candidate, the relaunch overhead broken into its parts against the
// bare start of a fresh job, and the predicted against the measured step time
// of the configuration the policy chose.
//
//	go run ./tools/benchloop --scavctl bin/scavctl [--target 2500] [--policy scavenger]
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "benchloop:", err)
		os.Exit(1)
	}
}

type flags struct {
	scavctl, python, policy, objective string
	target                             int
	workers, batches                   []int
}

func run() error {
	var f flags
	var workers, batches string
	flag.StringVar(&f.scavctl, "scavctl", "bin/scavctl", "scavctl binary")
	flag.StringVar(&f.python, "python", "/usr/bin/python3", "python with torch")
	flag.StringVar(&f.policy, "policy", "scavenger", "the moving policy to measure")
	flag.StringVar(&f.objective, "objective", "time", "its objective")
	flag.IntVar(&f.target, "target", 2500, "work of each run: steps at the smallest batch")
	flag.StringVar(&workers, "workers", "1,2", "worker counts of the search space")
	flag.StringVar(&batches, "batches", "32,64,128,256", "global batches of the search space")
	flag.Parse()
	var err error
	if f.workers, err = ints(workers); err != nil {
		return err
	}
	if f.batches, err = ints(batches); err != nil {
		return err
	}
	state, err := os.MkdirTemp("", "benchloop-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(state)

	loop, err := f.job(state, []string{"--workers", fmt.Sprintf("%d:%d", f.workers[0], f.workers[len(f.workers)-1]),
		"--batch-size", fmt.Sprintf("%d:%d", f.batches[0], f.batches[len(f.batches)-1]), "--policy", f.policy, "--objective", f.objective})
	if err != nil {
		return err
	}
	type fixed struct {
		workers, batch int
		r              result
	}
	var fixeds []fixed
	for _, k := range f.workers {
		for _, b := range f.batches {
			if b%k != 0 {
				continue
			}
			r, err := f.job(state, []string{"--workers", strconv.Itoa(k), "--batch-size", strconv.Itoa(b)})
			if err != nil {
				return err
			}
			fixeds = append(fixeds, fixed{k, b, r})
		}
	}
	sort.Slice(fixeds, func(a, b int) bool { return fixeds[a].r.totalS < fixeds[b].r.totalS })
	best := fixeds[0]
	var bare []float64
	for _, x := range fixeds {
		bare = append(bare, x.r.bareStartS)
	}

	fmt.Printf("## Fixed candidates (%d steps' work at batch %d each)\n\n"+
		"Load is the mean 1-minute load average while the run went (%d cores): above that, other processes competed for the CPUs.\n\n"+
		"| workers | batch | time to finish s | load |\n|---|---|---|---|\n", f.target, f.batches[0], runtime.NumCPU())
	for _, x := range fixeds {
		fmt.Printf("| %d | %d | %.1f | %.1f |\n", x.workers, x.batch, x.r.totalS, x.r.load)
	}
	fmt.Printf("\n## Policy %s, objective %s\n\n| measure | value |\n|---|---|\n", f.policy, f.objective)
	fmt.Printf("| time to finish | %.1f s (load %.1f) |\n", loop.totalS, loop.load)
	fmt.Printf("| best fixed candidate | %d workers, batch %d: %.1f s (load %.1f) |\n", best.workers, best.batch, best.r.totalS, best.r.load)
	fmt.Printf("| **overhead vs the best fixed** | **%+.1f %%** (goal <= 10 %%, issue 14) |\n", 100*(loop.totalS-best.r.totalS)/best.r.totalS)
	fmt.Printf("| median fixed candidate | %.1f s |\n", fixeds[len(fixeds)/2].r.totalS)
	fmt.Printf("| relaunches | %d |\n", len(loop.moves))
	if len(loop.moves) > 0 {
		var ck, ex, st, fs, tot []float64
		for _, m := range loop.moves {
			ck, ex, st, fs = append(ck, m.Checkpoint), append(ex, m.Exit), append(st, m.Start), append(fs, m.FirstStep)
			tot = append(tot, m.Checkpoint+m.Exit+m.Start+m.FirstStep)
		}
		b := median(bare)
		fmt.Printf("| relaunch, median: checkpoint + exit + start + first step | %.2f + %.2f + %.2f + %.2f = %.2f s |\n", median(ck), median(ex), median(st), median(fs), median(tot))
		fmt.Printf("| bare start of a fresh job (process start to first step), median | %.2f s |\n", b)
		fmt.Printf("| **relaunch beyond the bare start** | **%.2f s** (goal <= 3 s) |\n", median(tot)-b)
	}
	if loop.predictedS > 0 {
		fmt.Printf("| chosen configuration | %d workers, batch %d |\n", loop.finalWorkers, loop.finalBatch)
		fmt.Printf("| **its step time, predicted vs measured** | **%.1f ms vs %.1f ms (%+.1f %%)** (goal <= 10 %%) |\n",
			loop.predictedS*1e3, loop.measuredS*1e3, 100*(loop.predictedS-loop.measuredS)/loop.measuredS)
	}
	fmt.Printf("\n### The loop's attempts (`scavctl report`)\n\n```\n%s```\n", loop.timeline)
	return nil
}

// result is one job's figures, from `scavctl report -o json` and its steps.
type result struct {
	totalS                float64
	bareStartS            float64
	moves                 []move
	finalWorkers          int
	finalBatch            int
	predictedS, measuredS float64
	// load is the mean 1-minute load average while the job ran: above
	// the core count, other processes competed with it for the CPUs.
	load float64
	// timeline is the job's `scavctl report` in text: each attempt, its
	// step times and what ended it.
	timeline string
}

type move struct {
	Checkpoint float64 `json:"checkpoint_s"`
	Exit       float64 `json:"exit_s"`
	Start      float64 `json:"start_s"`
	FirstStep  float64 `json:"first_step_s"`
}

var jobRe = regexp.MustCompile(`scavctl: job ([A-Za-z0-9_-]+):`)

// job runs one job with the given flags and reads its report.
func (f flags) job(state string, extra []string) (result, error) {
	work := strconv.Itoa(f.target * f.batches[0]) // the same samples for every run
	// counted at the first batch, so that every run does the same work
	args := append([]string{"--state-dir", state, "run", "--target-samples", work, "--base-batch", strconv.Itoa(f.batches[0])}, extra...)
	args = append(args, "--", f.python, "examples/resumable_cnn.py")
	var errOut bytes.Buffer
	cmd := exec.Command(f.scavctl, args...)
	cmd.Stderr = &errOut
	stop := make(chan struct{})
	loadc := sampleLoad(stop)
	err := cmd.Run()
	close(stop)
	load := <-loadc
	if err != nil {
		return result{}, fmt.Errorf("scavctl %s: %w\n%s", strings.Join(args, " "), err, errOut.String())
	}
	m := jobRe.FindStringSubmatch(errOut.String())
	if m == nil {
		return result{}, fmt.Errorf("no job id in:\n%s", errOut.String())
	}
	out, err := exec.Command(f.scavctl, "--state-dir", state, "report", m[1], "-o", "json").Output()
	if err != nil {
		return result{}, fmt.Errorf("report %s: %w", m[1], err)
	}
	var rep struct {
		TotalS   float64 `json:"total_s"`
		Timeline []struct {
			Config struct {
				Workers     int `json:"workers"`
				GlobalBatch int `json:"global_batch"`
			} `json:"config"`
			Started        time.Time `json:"started"`
			Move           *move     `json:"move"`
			MeasuredStepS  float64   `json:"measured_step_s"`
			PredictedStepS float64   `json:"predicted_step_s"`
		} `json:"timeline"`
	}
	if err := json.Unmarshal(out, &rep); err != nil {
		return result{}, fmt.Errorf("decode report: %w", err)
	}
	text, err := exec.Command(f.scavctl, "--state-dir", state, "report", m[1]).Output()
	if err != nil {
		return result{}, fmt.Errorf("report %s: %w", m[1], err)
	}
	r := result{totalS: rep.TotalS, load: load, timeline: string(text)}
	for _, a := range rep.Timeline {
		if a.Move != nil {
			r.moves = append(r.moves, *a.Move)
		}
	}
	last := rep.Timeline[len(rep.Timeline)-1]
	r.finalWorkers, r.finalBatch = last.Config.Workers, last.Config.GlobalBatch
	r.predictedS, r.measuredS = last.PredictedStepS, last.MeasuredStepS
	first, err := firstStepTime(f.scavctl, state, m[1])
	if err != nil {
		return result{}, err
	}
	r.bareStartS = first.Sub(rep.Timeline[0].Started).Seconds()
	return r, nil
}

// firstStepTime is when rank 0 finished the job's first step.
func firstStepTime(scavctl, state, id string) (time.Time, error) {
	out, err := exec.Command(scavctl, "--state-dir", state, "steps", id, "-o", "json").Output()
	if err != nil {
		return time.Time{}, fmt.Errorf("steps %s: %w", id, err)
	}
	dec := json.NewDecoder(bytes.NewReader(out))
	for dec.More() {
		var r struct {
			Rank int     `json:"rank"`
			Step int64   `json:"step"`
			T    float64 `json:"t"`
		}
		if err := dec.Decode(&r); err != nil {
			return time.Time{}, err
		}
		if r.Rank == 0 && r.Step == 1 {
			return time.Unix(0, int64(r.T*1e9)), nil
		}
	}
	return time.Time{}, fmt.Errorf("job %s has no first step", id)
}

// sampleLoad samples the 1-minute load average every 5 s until stop is
// closed and then sends the mean of its samples (0 where /proc/loadavg
// cannot be read).
func sampleLoad(stop <-chan struct{}) <-chan float64 {
	out := make(chan float64, 1)
	go func() {
		var sum float64
		var n int
		tick := time.NewTicker(5 * time.Second)
		defer tick.Stop()
		for {
			if b, err := os.ReadFile("/proc/loadavg"); err == nil {
				if fs := strings.Fields(string(b)); len(fs) > 0 {
					if v, err := strconv.ParseFloat(fs[0], 64); err == nil {
						sum, n = sum+v, n+1
					}
				}
			}
			select {
			case <-stop:
				if n > 0 {
					sum /= float64(n)
				}
				out <- sum
				return
			case <-tick.C:
			}
		}
	}()
	return out
}

func ints(s string) ([]int, error) {
	var out []int
	for _, p := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%q is not a list of positive integers", s)
		}
		out = append(out, n)
	}
	sort.Ints(out)
	return out, nil
}

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if n := len(s); n == 0 {
		return 0
	} else if n%2 == 1 {
		return s[n/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
