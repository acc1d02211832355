// Command benchdash measures the web dashboard: how long a job's page takes
// to load, how far its live updates lag the step records, and how much
// scavd's memory grows with 4 browser tabs on it. It starts the scavd
// binary on a fresh state directory, writes into its store (as its ingest
// would) a job of --records step records over 4 attempts, with the
// decisions that moved it and their candidates, then drives Debian's
// chromium, headless, through the dashboard, and prints markdown tables.
//
//	go run ./tools/benchdash --scavd bin/scavd --scavctl bin/scavctl [--records 10000] [--loads 20]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/scavenger-ml/scavenger/internal/browser"
	"github.com/scavenger-ml/scavenger/tools/internal/dashtool"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "benchdash:", err)
		os.Exit(1)
	}
}

func run() error {
	scavd := flag.String("scavd", "bin/scavd", "scavd binary")
	scavctl := flag.String("scavctl", "bin/scavctl", "scavctl binary")
	records := flag.Int("records", 10000, "step records of the job")
	loads := flag.Int("loads", 20, "loads of the job's page")
	live := flag.Duration("live", 20*time.Second, "how long new step records arrive (10 steps/s) while the lag is measured")
	flag.Parse()

	d, err := dashtool.StartScavd(*scavd, "--node-sample-every", "0")
	if err != nil {
		return err
	}
	defer d.Stop()
	ctx := context.Background()
	opt, err := nats.NkeyOptionFromSeed(filepath.Join(d.State, "nats.nk"))
	if err != nil {
		return err
	}
	nc, err := nats.Connect(d.Info.NATS, opt)
	if err != nil {
		return fmt.Errorf("connect to scavd's nats: %w", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	me, err := user.Current()
	if err != nil {
		return err
	}
	h := newHistory(*records, me, time.Now())
	if err := h.write(ctx, js); err != nil {
		return err
	}
	time.Sleep(2 * time.Second)
	rssBefore, err := dashtool.RSS(d.Cmd.Process.Pid, "VmRSS")
	if err != nil {
		return err
	}

	link, err := d.Link(*scavctl)
	if err != nil {
		return err
	}
	tab, stop, err := browser.StartTab(ctx, 1280, 800)
	if err != nil {
		return err
	}
	defer stop()
	if err := chromedp.Do(tab, chromedp.Navigate(link)); err != nil {
		return err
	}
	base, _, _ := strings.Cut(link, "/ui/")
	page := base + "/ui/job/" + h.job.ID
	ld, err := measureLoads(tab, page, *loads)
	if err != nil {
		return err
	}
	lag, err := measureLag(tab, js, h, *live)
	if err != nil {
		return err
	}
	var tabs []context.CancelFunc
	for i := 0; i < 3; i++ {
		t, cancel := chromedp.NewContext(tab) // the same session, a tab more
		tabs = append(tabs, cancel)
		if err := chromedp.Do(t, chromedp.Navigate(page), chromedp.WaitVisible(`#c-rate canvas`)); err != nil {
			return fmt.Errorf("tab %d: %w", i+2, err)
		}
	}
	// 30 s of live updates with the 4 tabs open, scavd's memory read each second.
	var growth []float64
	for i := 0; i < 30; i++ {
		if _, err := h.publishLive(ctx, js, time.Second); err != nil {
			return err
		}
		rss, err := dashtool.RSS(d.Cmd.Process.Pid, "VmRSS")
		if err != nil {
			return err
		}
		growth = append(growth, float64(rss-rssBefore))
	}
	peak, _ := dashtool.RSS(d.Cmd.Process.Pid, "VmHWM")
	for _, c := range tabs {
		c()
	}

	if la, err := os.ReadFile("/proc/loadavg"); err == nil {
		fmt.Printf("The machine's load average at the end (1, 5, 15 min): %s (other work shares its cores).\n\n", strings.Join(strings.Fields(string(la))[:3], ", "))
	}
	fmt.Printf("A job of %d step records (%d steps) over 4 attempts, 3 decisions with %d candidates each, in scavd's store; its page /ui/job/%s in headless Chromium.\n\n",
		h.records, h.steps, len(h.job.Decisions[len(h.job.Decisions)-1].Candidates), h.job.ID)
	fmt.Println("## Page load (ms)")
	fmt.Println()
	fmt.Println("| load | document received | page loaded (scripts, styles) | first live update (charts drawn) |")
	fmt.Println("|---|---:|---:|---:|")
	fmt.Printf("| first (the job's feed reads its history) | %.0f | %.0f | %.0f |\n", ld[0].doc, ld[0].load, ld[0].update)
	warm := ld[1:]
	for _, q := range []struct {
		name string
		p    float64
	}{{"median of the next " + strconv.Itoa(len(warm)), 0.5}, {"90th percentile", 0.9}} {
		fmt.Printf("| %s | %.0f | %.0f | %.0f |\n", q.name, pick(warm, q.p, func(l load) float64 { return l.doc }),
			pick(warm, q.p, func(l load) float64 { return l.load }), pick(warm, q.p, func(l load) float64 { return l.update }))
	}
	fmt.Println()
	fmt.Printf("## Live updates\n\nNew step records at 10 steps/s for %s; the lag is from a record's publication to the page showing its step (or a later one).\n\n", *live)
	fmt.Println("| records | median lag (ms) | 90th percentile (ms) | max (ms) |")
	fmt.Println("|---:|---:|---:|---:|")
	fmt.Printf("| %d | %.0f | %.0f | %.0f |\n\n", len(lag), quantile(lag, 0.5), quantile(lag, 0.9), quantile(lag, 1))
	fmt.Println("## scavd's memory")
	fmt.Println()
	fmt.Println("Resident memory (VmRSS) before any page, and its growth read each second of 30 s of live updates with 4 tabs on the job's page.")
	fmt.Println()
	fmt.Println("| before any page | growth: median | growth: max | peak (VmHWM) |")
	fmt.Println("|---:|---:|---:|---:|")
	fmt.Printf("| %s | %s | %s | %s |\n", mib(rssBefore), mib(int64(quantile(growth, 0.5))), mib(int64(quantile(growth, 1))), mib(peak))
	return nil
}

// load is one page load's times, in ms from the navigation's start.
type load struct{ doc, load, update float64 }

// measureLoads loads page n times and reads the browser's navigation timing
// and when the first live update was applied (app.js records it).
func measureLoads(tab context.Context, page string, n int) ([]load, error) {
	var out []load
	for i := 0; i < n; i++ {
		if err := chromedp.Do(tab, chromedp.Navigate(page)); err != nil {
			return nil, err
		}
		t, err := chromedp.Run(tab, chromedp.Poll[[]float64](`(() => { const n = performance.getEntriesByType('navigation')[0];
			return window.scavFirstUpdate && n.loadEventEnd > 0 ? [n.responseEnd - n.startTime, n.loadEventEnd - n.startTime, window.scavFirstUpdate] : null })()`,
			chromedp.WithPollingTimeout(30*time.Second)))
		if err != nil {
			return nil, fmt.Errorf("load %d: %w", i+1, err)
		}
		out = append(out, load{t[0], t[1], t[2]})
	}
	return out, nil
}

// measureLag publishes new step records for d while the page shows the
// job's last step, and returns each record's lag to the page, in ms.
func measureLag(tab context.Context, js jetstream.JetStream, h *history, d time.Duration) ([]float64, error) {
	if err := chromedp.Do(tab, chromedp.Evaluate[chromedp.Void](`window.seen = [];
		new MutationObserver(() => { const e = document.getElementById('last-step'); if (e) window.seen.push([+e.textContent, Date.now()]); })
			.observe(document.getElementById('job-head'), {childList: true, subtree: true, characterData: true})`)); err != nil {
		return nil, err
	}
	sent, err := h.publishLive(context.Background(), js, d)
	if err != nil {
		return nil, err
	}
	time.Sleep(3 * time.Second)
	seen, err := chromedp.Run(tab, chromedp.Evaluate[[][2]float64](`window.seen`))
	if err != nil {
		return nil, err
	}
	var lags []float64
	for _, s := range sent {
		for _, v := range seen {
			if int64(v[0]) >= s.step && v[1] >= s.at {
				lags = append(lags, v[1]-s.at)
				break
			}
		}
	}
	if len(lags) == 0 {
		return nil, fmt.Errorf("the page showed none of the %d new steps", len(sent))
	}
	if len(lags) < len(sent) {
		return nil, fmt.Errorf("the page showed %d of the %d new steps", len(lags), len(sent))
	}
	return lags, nil
}

func quantile(v []float64, q float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if len(s) == 0 {
		return 0
	}
	return s[int(q*float64(len(s)-1)+0.5)]
}

func pick(ls []load, q float64, f func(load) float64) float64 {
	v := make([]float64, len(ls))
	for i, l := range ls {
		v[i] = f(l)
	}
	return quantile(v, q)
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }
