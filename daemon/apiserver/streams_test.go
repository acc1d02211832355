package apiserver

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/telemetry"
	"github.com/scavenger-ml/scavenger/telemetry/history"
)

// stepLine is a step record of job, as a worker writes it.
func stepLine(job string, step int64) []byte {
	b, _ := json.Marshal(telemetry.StepRecord{V: telemetry.SchemaVersion, Job: job, Attempt: 1, World: 1, Step: step, Time: 1})
	return b
}

// withHistory is a fixture whose store holds alice-1's and bob-1's step
// records, alice-1's output, and node n1's host and GPU samples, in which
// both jobs have processes.
func withHistory(t *testing.T) *fixture {
	t.Helper()
	f := newFixture(t, nil)
	ctx := t.Context()
	if _, err := history.OpenStore(ctx, f.js, history.Retention{}); err != nil {
		t.Fatal(err)
	}
	publish := func(subject string, data []byte) {
		t.Helper()
		if _, err := f.js.Publish(ctx, subject, data); err != nil {
			t.Fatal(err)
		}
	}
	for _, job := range []string{"alice-1", "bob-1"} {
		publish(telemetry.StepSubject(job), stepLine(job, 1))
		publish(telemetry.StepSubject(job), stepLine(job, 2))
	}
	line, _ := json.Marshal(telemetry.LogLine{Attempt: 1, Stream: "stdout", Line: "hello", Time: time.Now()})
	publish(telemetry.LogSubject("alice-1"), line)
	ev, _ := json.Marshal(telemetry.Event{Kind: telemetry.EventStarted, Job: "alice-1", Attempt: 1, Time: time.Now()})
	publish(telemetry.EventSubject("alice-1"), ev)
	now := time.Now()
	host := telemetry.NodeSample{Kind: telemetry.NodeHost, Node: "n1", Time: now, Host: &telemetry.HostStat{
		CPUs: 2, Jobs: []telemetry.JobUsage{{Job: "alice-1"}, {Job: "bob-1"}}}}
	gpu := telemetry.NodeSample{Kind: telemetry.NodeGPU, Node: "n1", Time: now, GPUs: []telemetry.GPUStat{{
		Processes: []telemetry.GPUProcess{{PID: 10, Job: "alice-1"}, {PID: 11, Job: "bob-1"}}}}}
	publish(telemetry.NodeSubject(telemetry.SubjectNode("n1"), telemetry.NodeHost), host.Encode())
	publish(telemetry.NodeSubject(telemetry.SubjectNode("n1"), telemetry.NodeGPU), gpu.Encode())
	return f
}

// TestJobStreamsAreTheOwners: a job's steps, output and last step are
// read by its owner and root only; an unknown job is told as such.
func TestJobStreamsAreTheOwners(t *testing.T) {
	f := withHistory(t)
	ctx := t.Context()
	type reader func(c *api.Client, job string) (int, error)
	for name, read := range map[string]reader{
		"steps": func(c *api.Client, job string) (int, error) {
			n := 0
			return n, c.Steps(ctx, job, false, func(telemetry.StepRecord) error { n++; return nil })
		},
		"output": func(c *api.Client, job string) (int, error) {
			n := 0
			return n, c.Output(ctx, job, false, func(*telemetry.LogLine, *telemetry.Event) error { n++; return nil })
		},
		"last step": func(c *api.Client, job string) (int, error) {
			rec, ok, err := c.LastStep(ctx, job)
			if ok && rec.Step != 2 {
				return 0, fmt.Errorf("last step %d, want 2", rec.Step)
			}
			if ok {
				return 1, err
			}
			return 0, err
		},
	} {
		for _, tc := range []struct {
			who  api.Owner
			job  string
			n    int
			want string // in the error
		}{
			{who: alice, job: "alice-1", n: 2},
			{who: root, job: "alice-1", n: 2},
			{who: bob, job: "alice-1", want: "permission denied: read job alice-1: it is alice's"},
			{who: alice, job: "nope-1", want: "no such job"},
		} {
			want := tc.n
			if name == "last step" && want > 0 {
				want = 1
			}
			n, err := read(f.as(t, tc.who), tc.job)
			if tc.want == "" && (err != nil || n != want) || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Errorf("%s of %s read by %s: %d, %v; want %d, %q", name, tc.job, tc.who.User, n, err, want, tc.want)
			}
		}
	}
	for _, tc := range []struct {
		query string
		code  int
	}{
		{"?what=steps&job=bob-1", http.StatusForbidden},
		{"?what=output&job=nope-1", http.StatusNotFound},
		{"?what=last-step", http.StatusNotFound},
		{"?what=live&job=bob-1", http.StatusForbidden},
		{"?what=nodes-since&since=yesterday", http.StatusBadRequest},
	} {
		if code, rep := f.do(t, &alice, http.MethodGet, api.PathStream+tc.query, nil); code != tc.code {
			t.Errorf("%s: %d %q; want %d", tc.query, code, rep.Error, tc.code)
		}
	}
}

// TestNodeSamplesHideOtherUsersJobs: every caller reads the node samples,
// without the processes of other users' jobs and without naming the job
// that holds a GPU process; root reads them whole.
func TestNodeSamplesHideOtherUsersJobs(t *testing.T) {
	f := withHistory(t)
	ctx := t.Context()
	// seen says which jobs a caller's samples name: host jobs, then GPU
	// processes' jobs (a hidden one is "").
	seen := func(read func(fn func(telemetry.NodeSample) error) error) (host, gpu []string, err error) {
		err = read(func(s telemetry.NodeSample) error {
			if s.Host != nil {
				for _, u := range s.Host.Jobs {
					host = append(host, u.Job)
				}
			}
			for _, g := range s.GPUs {
				for _, p := range g.Processes {
					gpu = append(gpu, p.Job)
				}
			}
			return nil
		})
		return host, gpu, err
	}
	for _, tc := range []struct {
		who       api.Owner
		host, gpu []string
	}{
		{alice, []string{"alice-1"}, []string{"alice-1", ""}},
		{carol, nil, []string{"", ""}},
		{root, []string{"alice-1", "bob-1"}, []string{"alice-1", "bob-1"}},
	} {
		c := f.as(t, tc.who)
		for name, read := range map[string]func(fn func(telemetry.NodeSample) error) error{
			"nodes":        func(fn func(telemetry.NodeSample) error) error { return c.NodeSamples(ctx, "n1", "", false, fn) },
			"nodes-latest": func(fn func(telemetry.NodeSample) error) error { return c.LatestNodeSamples(ctx, false, fn) },
			"nodes-since": func(fn func(telemetry.NodeSample) error) error {
				return c.NodeSamplesSince(ctx, "", time.Now().Add(-time.Hour), fn)
			},
		} {
			host, gpu, err := seen(read)
			slices.Sort(gpu)
			want := slices.Clone(tc.gpu)
			slices.Sort(want)
			if err != nil || !slices.Equal(host, tc.host) || !slices.Equal(gpu, want) {
				t.Errorf("%s reads %s: host jobs %q, gpu jobs %q (%v); want %q, %q", tc.who.User, name, host, gpu, err, tc.host, want)
			}
		}
	}
}

// feed collects the live step records a caller's feed delivers.
type feed struct {
	mu   sync.Mutex
	jobs []string
}

func (fd *feed) add(r telemetry.StepRecord) {
	fd.mu.Lock()
	defer fd.mu.Unlock()
	fd.jobs = append(fd.jobs, r.Job)
}

// wait returns the jobs of the records delivered once one of job's came,
// failing after 10 seconds.
func (fd *feed) wait(t *testing.T, job string) []string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		fd.mu.Lock()
		got := slices.Clone(fd.jobs)
		fd.mu.Unlock()
		if slices.Contains(got, job) {
			return got
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no live record of %s", job)
	return nil
}

// TestLiveStepsAreTheCallersJobs: the live feed of every job delivers a
// user only their jobs' records, root every job's; a feed of another's job
// is refused.
func TestLiveStepsAreTheCallersJobs(t *testing.T) {
	f := newFixture(t, nil)
	feeds := map[string]*feed{}
	for _, who := range []api.Owner{alice, root} {
		fd := &feed{}
		sf, err := f.as(t, who).FollowSteps("", fd.add)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(sf.Close)
		feeds[who.User] = fd
	}
	if _, err := f.as(t, bob).FollowSteps("alice-1", func(telemetry.StepRecord) {}); err == nil || !strings.Contains(err.Error(), "permission denied") {
		t.Errorf("bob follows alice-1: %v", err)
	}
	// In the order published: alice's feed has passed over bob's record
	// once it has her own.
	for _, job := range []string{"bob-1", "alice-1"} {
		if err := f.nc.Publish(telemetry.StepSubject(job), stepLine(job, 3)); err != nil {
			t.Fatal(err)
		}
	}
	if got := feeds["alice"].wait(t, "alice-1"); !slices.Equal(got, []string{"alice-1"}) {
		t.Errorf("alice's live records are of %v, want alice-1's only", got)
	}
	if got := feeds["root"].wait(t, "alice-1"); !slices.Equal(got, []string{"bob-1", "alice-1"}) {
		t.Errorf("root's live records are of %v, want bob-1's and alice-1's", got)
	}
}

// TestStepsInRange: a job's last records, or those stored since a time,
// are served alone (the first message they start in cut), to the job's
// owner only; a range that is not one is refused.
func TestStepsInRange(t *testing.T) {
	f := newFixture(t, nil)
	ctx := t.Context()
	var msg []byte
	for step := int64(1); step <= 30; step++ { // three records a message
		msg = append(append(msg, stepLine("alice-1", step)...), '\n')
		if step%3 == 0 {
			if _, err := f.js.Publish(ctx, telemetry.StepSubject("alice-1"), msg); err != nil {
				t.Fatal(err)
			}
			msg = nil
		}
	}
	mid := time.Now()
	if _, err := f.js.Publish(ctx, telemetry.StepSubject("alice-1"), stepLine("alice-1", 31)); err != nil {
		t.Fatal(err)
	}
	steps := func(who api.Owner, r api.StepRange) ([]int64, error) {
		var got []int64
		err := f.as(t, who).StepsIn(ctx, "alice-1", r, false, func(rec telemetry.StepRecord) error {
			got = append(got, rec.Step)
			return nil
		})
		return got, err
	}
	for _, c := range []struct {
		r    api.StepRange
		want []int64
	}{
		{api.StepRange{Last: 5}, []int64{27, 28, 29, 30, 31}},
		{api.StepRange{Last: 1}, []int64{31}},
		{api.StepRange{Last: 100}, nil}, // all 31
		{api.StepRange{Since: mid}, []int64{31}},
		{api.StepRange{Since: time.Now().Add(time.Hour)}, []int64{}},
	} {
		got, err := steps(alice, c.r)
		want := c.want
		if want == nil {
			for s := int64(1); s <= 31; s++ {
				want = append(want, s)
			}
		}
		if err != nil || !slices.Equal(got, want) && !(len(got) == 0 && len(want) == 0) {
			t.Errorf("range %+v: %v, %v; want %v", c.r, got, err, want)
		}
	}
	if _, err := steps(bob, api.StepRange{Last: 5}); err == nil || !strings.Contains(err.Error(), "it is alice's") {
		t.Errorf("bob reads alice's last steps: %v", err)
	}
	if code, _ := f.do(t, &alice, http.MethodGet, api.PathStream+"?what=steps&job=alice-1&last=-2", nil); code != http.StatusBadRequest {
		t.Errorf("last -2: %d, want a bad request", code)
	}
}

// TestLiveStreamNobodyReadsIsBounded: a live stream whose reader reads
// nothing holds at most its bound while the jobs publish far more (issue
// 20's flood: 32 such streams held 1.9 GB of step messages): once its
// reader reads again it gets what was held, a small part of the 100 MiB,
// and then the records published after.
func TestLiveStreamNobodyReadsIsBounded(t *testing.T) {
	f := newFixture(t, nil)
	c, err := net.Dial("unix", f.sock(t, &root))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if code, _, err := send(t, c, followNodes); err != nil || code != http.StatusOK {
		t.Fatalf("open a live stream: %d %v", code, err)
	}
	line := stepLine("alice-1", 3)
	msg := bytes.Repeat(line, 256<<10/len(line)) // 256 KiB of records
	for range 400 {                              // 100 MiB in all
		if err := f.nc.Publish(telemetry.StepSubject("alice-1"), msg); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond) // the subscription's goroutine takes what it is given
	type result struct {
		read int
		err  error
	}
	done := make(chan result, 1)
	go func() {
		r := bufio.NewReaderSize(c, 1<<20)
		read := 0
		for {
			_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
			b, err := r.ReadBytes('\n')
			read += len(b)
			if err != nil || bytes.Contains(b, []byte(`\"step\":99`)) {
				done <- result{read, err}
				return
			}
		}
	}()
	for i := 0; ; i++ {
		if err := f.nc.Publish(telemetry.StepSubject("alice-1"), stepLine("alice-1", 99)); err != nil {
			t.Fatal(err)
		}
		select {
		case res := <-done:
			if res.err != nil {
				t.Fatalf("the stream after the reader read again: %v", res.err)
			}
			// What was held: the subscription's bound, the frame being
			// written and the sockets' buffers, each frame JSON-quoted.
			if res.read > 16<<20 {
				t.Errorf("the reader got %d MiB before the record published after it read again; want what the stream held, %d KiB and the buffers", res.read>>20, livePendingBytes>>10)
			}
			return
		case <-time.After(100 * time.Millisecond):
		}
		if i > 100 {
			t.Fatal("a record published after the reader read again did not arrive")
		}
	}
}
