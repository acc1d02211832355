// Command dashexample writes the README's screenshots of the web dashboard
// (docs/dashboard-*.png, 1280×800) from real jobs on this machine's CPUs: a
// short fixed run of examples/cnn.py, then examples/resumable_cnn.py under
// the scavenger policy at an assumed $2.50/h, which probes configurations
// and moves to the one it chooses; the screenshots are taken once it runs
// there.
//
//	go run ./tools/dashexample --scavd bin/scavd --scavctl bin/scavctl --python /usr/bin/python3 --out docs
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/internal/browser"
	"github.com/scavenger-ml/scavenger/tools/internal/dashtool"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "dashexample:", err)
		os.Exit(1)
	}
}

func run() error {
	scavd := flag.String("scavd", "bin/scavd", "scavd binary")
	scavctl := flag.String("scavctl", "bin/scavctl", "scavctl binary")
	python := flag.String("python", "/usr/bin/python3", "python with torch")
	out := flag.String("out", "docs", "directory of the screenshots")
	wait := flag.Duration("wait", 8*time.Minute, "how long the policy gets to move the job")
	flag.Parse()

	d, err := dashtool.StartScavd(*scavd, "--node-sample-every", "1s")
	if err != nil {
		return err
	}
	defer d.Stop()
	if _, err := d.Scavctl(*scavctl, "run", "--name", "cnn-fixed", "--workers", "2", "--batch-size", "64", "--",
		*python, "examples/cnn.py", "--steps", "60"); err != nil {
		return err
	}
	job := exec.Command(*scavctl, "--state-dir", d.State, "run", "--name", "cnn-policy", "--workers", "1:2", "--batch-size", "32:256",
		"--policy", "scavenger", "--price", "2.5", "--target-steps", "20000", "--", *python, "examples/resumable_cnn.py")
	job.Env = append(os.Environ(), "OMP_NUM_THREADS=1")
	if err := job.Start(); err != nil {
		return err
	}
	defer func() {
		_ = job.Process.Kill()
		_ = job.Wait()
	}()
	id, err := awaitMoved(d, *scavctl, *wait)
	if err != nil {
		return err
	}
	link, err := d.Link(*scavctl)
	if err != nil {
		return err
	}
	if err := shoot(link, id, *out); err != nil {
		return err
	}
	rep, _ := d.Scavctl(*scavctl, "report", id)
	fmt.Print(rep)
	_, err = d.Scavctl(*scavctl, "stop", id)
	return err
}

// awaitMoved waits until the policy job has run at two configurations or
// more, chose one by its model, and has run 20 s there.
func awaitMoved(d *dashtool.Scavd, scavctl string, wait time.Duration) (string, error) {
	var last string
	for deadline := time.Now().Add(wait); time.Now().Before(deadline); time.Sleep(time.Second) {
		out, err := d.Scavctl(scavctl, "jobs", "--name", "cnn-policy", "-o", "json")
		var jobs []api.Job
		if err != nil || json.Unmarshal([]byte(out), &jobs) != nil || len(jobs) == 0 {
			continue
		}
		j := jobs[0]
		configs := map[[2]int]bool{}
		for _, a := range j.Attempts {
			configs[[2]int{a.Config.Workers, a.Config.GlobalBatch}] = true
		}
		n := len(j.Attempts)
		last = fmt.Sprintf("%s, %s, %d attempts at %d configurations", j.State, j.Phase, n, len(configs))
		if j.State.Done() {
			return "", fmt.Errorf("the policy job ended before the screenshots: %s", last)
		}
		if j.Phase == api.PhaseOptimised && len(configs) >= 2 && n > 0 && time.Since(j.Attempts[n-1].Started) > 20*time.Second {
			return j.ID, nil
		}
	}
	return "", fmt.Errorf("the policy did not move the job within the wait: %s", last)
}

// shoot logs in with link and writes the screenshots of the jobs page,
// the job's page (its top and its candidates) and the node page.
func shoot(link, id, out string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tab, stop, err := browser.StartTab(ctx, 1280, 800)
	if err != nil {
		return err
	}
	defer stop()
	base, _, _ := strings.Cut(link, "/ui/")
	settle := chromedp.Sleep(3 * time.Second) // a live update or two
	shots := []struct {
		file  string
		steps []chromedp.Action[chromedp.Void]
	}{
		{"dashboard-jobs.png", []chromedp.Action[chromedp.Void]{chromedp.Navigate(link), chromedp.WaitVisible(`#jobs-rows a`), settle}},
		{"dashboard-job.png", []chromedp.Action[chromedp.Void]{chromedp.Navigate(base + "/ui/job/" + id), chromedp.WaitVisible(`#c-rate canvas`), settle}},
		{"dashboard-job-front.png", []chromedp.Action[chromedp.Void]{chromedp.ScrollIntoView(`.two`), chromedp.Sleep(time.Second)}},
		{"dashboard-node.png", []chromedp.Action[chromedp.Void]{chromedp.Navigate(base + "/ui/node"), chromedp.WaitVisible(`#node-body .cards`), settle}},
	}
	for _, s := range shots {
		if err := chromedp.Do(tab, s.steps...); err != nil {
			return fmt.Errorf("%s: %w", s.file, err)
		}
		png, err := chromedp.Run(tab, chromedp.CaptureScreenshot())
		if err != nil {
			return fmt.Errorf("%s: %w", s.file, err)
		}
		if err := os.WriteFile(filepath.Join(out, s.file), png, 0o644); err != nil {
			return err
		}
		fmt.Println("wrote", filepath.Join(out, s.file))
	}
	return nil
}
