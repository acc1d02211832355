package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/internal/browser"
	"github.com/scavenger-ml/scavenger/report"
)

// The dashboard in a real browser (Debian's chromium, headless, driven by
// chromedp) against a real root scavd running a real job of a real user:
// alice's examples/resumable_cnn.py under the scavenger policy, which
// probes and moves it; bob is a second user. One scavd and one browser
// serve every check.

// dashLink asks scavd, as u, for a login link (scavctl dashboard).
func dashLink(t *testing.T, u testUser, work, apiSock string) string {
	t.Helper()
	out, errOut, code := u.as(t, work, nil, scavctlBin, "--api", apiSock, "dashboard", "--no-browser")
	link, _, _ := strings.Cut(strings.TrimPrefix(out, "Open "), "\n")
	if code != 0 || !strings.Contains(link, "/ui/login?t=") {
		t.Fatalf("scavctl dashboard as %s: exit %d\n%s%s", u.name, code, out, errOut)
	}
	return link
}

// eval evaluates a script expression in tab ctx.
func eval[T any](t *testing.T, ctx context.Context, expr string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// bounded is ctx with a deadline of two minutes: a page that never shows
// what a step waits for fails the test instead of hanging it.
func bounded(t *testing.T, ctx context.Context) context.Context {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// within polls cond every half second until it is true or d passes; then
// it fails with what last says.
func within(t *testing.T, d time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	var last string
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		var ok bool
		if ok, last = cond(); ok {
			return
		}
	}
	t.Fatalf("%s: not within %s: %s", what, d, last)
}

func TestDashboardInABrowser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("SKIP: the dashboard's two-user suite runs as root (useradd, setpriv)")
	}
	needTorch(t)
	bctx, stopBrowser, err := browser.Start(t.Context(), 1280, 800)
	if errors.Is(err, browser.ErrNoChromium) {
		t.Skipf("SKIP: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stopBrowser)
	alice, bob := addUser(t, "a"), addUser(t, "b")
	work := sharedDir(t)
	state := filepath.Join(work, "state")
	info := startScavd(t, state)

	// Alice's job prints markup, then trains under a moving policy until stopped.
	const markup = `<script>document.title="owned"</script>`
	run := exec.Command("setpriv", "--reuid="+alice.name, "--regid="+alice.name, "--init-groups", "--",
		scavctlBin, "--api", info.API, "run", "--name", "web", "--workers", "1:2", "--batch-size", "32:128", "--policy", "scavenger",
		"--price", "2.5", "--target-steps", "1000000", "--grace", "20s", "--", "/bin/sh", "-c",
		"echo '"+markup+"'; exec "+pythonBin+" "+filepath.Join(repoRoot, "examples", "resumable_cnn.py"))
	run.Dir, run.Env = work, []string{"PATH=/usr/bin:/bin", "HOME=" + work, "OMP_NUM_THREADS=1"}
	var runOut bytes.Buffer
	run.Stdout, run.Stderr = &runOut, &runOut
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	ran := make(chan struct{}) // closed when alice's scavctl run has ended
	go func() {
		_ = run.Wait()
		close(ran)
	}()
	t.Cleanup(func() {
		_ = run.Process.Kill()
		<-ran
	})
	job := awaitUserJob(t, state, alice.name)
	jobURL := "/ui/job/" + job.ID

	tab, closeTab, err := browser.Tab(bctx, 1280, 800)
	if err != nil {
		t.Fatal(err)
	}
	defer closeTab()
	link := dashLink(t, alice, work, info.API)
	base, _, _ := strings.Cut(link, "/ui/")
	if err := chromedp.Do(bounded(t, tab), chromedp.Navigate(link), chromedp.WaitVisible(`#jobs-rows tr[data-job="`+job.ID+`"]`)); err != nil {
		t.Fatalf("alice's jobs page: %v", err)
	}

	t.Run("the jobs table updates without a reload", func(t *testing.T) {
		eval[bool](t, tab, `window.notReloaded = true`)
		cell := `document.querySelector('#jobs-rows tr[data-job="` + job.ID + `"] td.step').textContent`
		first := eval[string](t, tab, cell)
		within(t, 60*time.Second, "the step cell changes", func() (bool, string) {
			now := eval[string](t, tab, cell)
			a, _ := strconv.Atoi(first)
			b, err := strconv.Atoi(now)
			return err == nil && b > a, fmt.Sprintf("step %q, then %q", first, now)
		})
		if !eval[bool](t, tab, `window.notReloaded === true`) {
			t.Error("the page reloaded")
		}
	})

	if err := chromedp.Do(bounded(t, tab), chromedp.Navigate(base+jobURL), chromedp.WaitVisible(`#job-attempts`)); err != nil {
		t.Fatalf("alice's job page: %v", err)
	}
	t.Run("the job page shows each attempt and its prediction", func(t *testing.T) {
		eval[bool](t, tab, `window.notReloaded = true`)
		within(t, 5*time.Minute, "the attempts and predictions of scavctl report", func() (bool, string) {
			out, _, _ := scavctl(t, state, "report", job.ID, "-o", "json")
			var rep report.JobReport
			if err := json.Unmarshal([]byte(out), &rep); err != nil {
				return false, err.Error()
			}
			rows := eval[[][]string](t, tab, `[...document.querySelectorAll('#job-attempts tr')].map(r => [...r.cells].map(c => c.textContent))`)
			// The policy predicts an attempt's step time when it chooses
			// it, or (a probe, chosen before any model) at a later decision.
			predicted := 0
			for _, a := range rep.Timeline {
				if a.PredictedStepS > 0 {
					predicted++
				}
			}
			if len(rep.Timeline) < 2 || predicted == 0 || len(rows) != len(rep.Timeline) {
				return false, fmt.Sprintf("%d attempts (%d with a prediction) in the report, %d rows on the page", len(rep.Timeline), predicted, len(rows))
			}
			for i, a := range rep.Timeline {
				r := rows[i]
				if len(r) < 8 || r[0] != strconv.Itoa(a.Attempt.Attempt) {
					return false, fmt.Sprintf("row %d: %q", i, r)
				}
				want := a.PredictedText() // "-", or a probe's words
				if a.PredictedStepS > 0 {
					want = fmt.Sprintf("%.1f ms", a.PredictedStepS*1e3)
				}
				if !strings.HasPrefix(r[6], want) || a.PredictedLater != strings.Contains(r[6], "later") {
					return false, fmt.Sprintf("attempt %d: predicted %q on the page, %q in the report (later: %v)", a.Attempt.Attempt, r[6], want, a.PredictedLater)
				}
				if a.MeasuredStepS > 0 && i < len(rep.Timeline)-1 && r[7] != fmt.Sprintf("%.1f ms", a.MeasuredStepS*1e3) {
					return false, fmt.Sprintf("attempt %d: measured %q on the page, %.1f ms in the report", a.Attempt.Attempt, r[7], a.MeasuredStepS*1e3)
				}
				if i > 0 && r[2] == "-" {
					return false, fmt.Sprintf("attempt %d: no decision", a.Attempt.Attempt)
				}
			}
			return true, ""
		})
		if !eval[bool](t, tab, `window.notReloaded === true`) {
			t.Error("the page reloaded")
		}
		if n := eval[int](t, tab, `document.querySelectorAll('#c-rate canvas, #c-step canvas, #c-loss canvas').length`); n < 3 {
			t.Errorf("%d chart canvases, want the charts drawn", n)
		}
		if eval[bool](t, tab, `!document.getElementById('nocharts').hidden`) {
			t.Error("the page says the charts did not load, with uPlot loaded")
		}
	})

	t.Run("markup in the output shows as text", func(t *testing.T) {
		within(t, 30*time.Second, "the output line", func() (bool, string) {
			text := eval[string](t, tab, `document.getElementById('job-output').textContent`)
			return strings.Contains(text, markup), text
		})
		if eval[int](t, tab, `document.querySelectorAll('#job-output script, #job-output *[onerror]').length`) != 0 {
			t.Error("the output line became markup")
		}
		if title := eval[string](t, tab, `document.title`); title == "owned" {
			t.Error("the output line's script ran")
		}
	})

	t.Run("the node page shows the job's processes", func(t *testing.T) {
		if err := chromedp.Do(bounded(t, tab), chromedp.Navigate(base+"/ui/node")); err != nil {
			t.Fatal(err)
		}
		within(t, 20*time.Second, "alice's job on the node page", func() (bool, string) {
			text := eval[string](t, tab, `document.getElementById('node-body').textContent`)
			return strings.Contains(text, job.ID) && strings.Contains(text, "python3"), text
		})
	})

	t.Run("another user sees nothing of it", func(t *testing.T) {
		btab, closeB, err := browser.Tab(bctx, 1280, 800)
		if err != nil {
			t.Fatal(err)
		}
		defer closeB()
		if err := chromedp.Do(bounded(t, btab), chromedp.Navigate(dashLink(t, bob, work, info.API)), chromedp.WaitVisible(`#jobs-rows`)); err != nil {
			t.Fatal(err)
		}
		if rows := eval[string](t, btab, `document.getElementById('jobs-rows').textContent`); strings.Contains(rows, job.ID) {
			t.Errorf("bob's jobs list alice's: %s", rows)
		}
		resp, err := chromedp.Run(btab, chromedp.NavigateResponse(base+jobURL))
		if err != nil || resp.Status != 403 {
			t.Errorf("bob opens alice's job page: %v, %v; want 403", err, resp)
		}
		if err := chromedp.Do(bounded(t, btab), chromedp.Navigate(base+"/ui/")); err != nil {
			t.Fatal(err)
		}
		if code := eval[int](t, btab, `fetch('`+"/ui/events/job/"+job.ID+`').then(r => r.status)`); code != 403 {
			t.Errorf("bob follows alice's job's events: %d, want 403", code)
		}
		stop := `fetch('` + jobURL + `/stop', {method: 'POST', headers: {'X-CSRF-Token': document.querySelector('meta[name=csrf]').content}}).then(r => r.status)`
		if code := eval[int](t, btab, stop); code != 403 {
			t.Errorf("bob stops alice's job from his page: %d, want 403", code)
		}
		if node := eval[string](t, btab, `fetch('/ui/node').then(r => r.text())`); strings.Contains(node, job.ID) {
			t.Error("bob's node page shows alice's job")
		}
	})

	t.Run("the page says so when the charts' script does not load", func(t *testing.T) {
		ntab, closeN := chromedp.NewContext(tab) // alice's browser context: her session
		defer closeN()
		if _, err := chromedp.Call(ntab, network.Enable, network.EnableParams{}); err != nil {
			t.Fatal(err)
		}
		if _, err := chromedp.Call(ntab, network.SetBlockedURLs, network.SetBlockedURLsParams{
			URLPatterns: []*network.BlockPattern{{URLPattern: "*://*:*/ui/static/uPlot*", Block: true}}}); err != nil {
			t.Fatal(err)
		}
		if err := chromedp.Do(bounded(t, ntab), chromedp.Navigate(base+jobURL), chromedp.WaitVisible(`#nocharts`)); err != nil {
			t.Fatalf("no word that the charts are off: %v", err)
		}
		within(t, 10*time.Second, "the tables still update", func() (bool, string) {
			live := eval[string](t, ntab, `document.getElementById('live').textContent`)
			return strings.HasPrefix(live, "live "), live
		})
	})

	t.Run("a stop from the page stops the job", func(t *testing.T) {
		if err := chromedp.Do(bounded(t, tab), chromedp.Navigate(base+jobURL), chromedp.WaitVisible(`#stop`),
			chromedp.Click(`#stop`), chromedp.WaitVisible(`#stop.armed`), chromedp.Click(`#stop`)); err != nil {
			t.Fatal(err)
		}
		within(t, 15*time.Second, "the page says the stop was asked", func() (bool, string) {
			msg := eval[string](t, tab, `document.getElementById('act-result').textContent`)
			return strings.HasPrefix(msg, "Stop asked"), msg
		})
		select {
		case <-ran:
		case <-time.After(60 * time.Second):
			t.Fatal("alice's scavctl run did not end within 60 s of the stop")
		}
		if j := jobRecord(t, state, job.ID); j.State != api.StateStopped {
			t.Errorf("job state %s, want stopped\n%s", j.State, runOut.String())
		}
		within(t, 10*time.Second, "the page shows the job stopped", func() (bool, string) {
			head := eval[string](t, tab, `document.getElementById('job-head').textContent`)
			return strings.Contains(head, "stopped"), head
		})
	})
}
