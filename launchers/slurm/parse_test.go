package slurm

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/scavenger-ml/scavenger/plugins"
)

func readTestdata(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// The testdata files were recorded from Slurm 22.05.8's scontrol here.
func TestParseJob(t *testing.T) {
	tests := []struct {
		file string
		want jobInfo
	}{
		{"scontrol_running.txt", jobInfo{ID: "1", Name: "hold job", State: "RUNNING", Reason: "None", NumCPUs: 4, NumNodes: 1, NumTasks: 4, NodeList: "localhost"}},
		{"scontrol_pending.txt", jobInfo{ID: "2", Name: "pend", State: "PENDING", Reason: "Resources", NumCPUs: 8, NumNodes: 1, NumTasks: 8, NodeList: ""}},
		{"scontrol_cancelled.txt", jobInfo{ID: "2", Name: "pend", State: "CANCELLED", Reason: "Resources", NumCPUs: 8, NumNodes: 1, NumTasks: 8}},
		{"scontrol_failed.txt", jobInfo{ID: "3", Name: "wrap", State: "FAILED", Reason: "NonZeroExitCode", NumCPUs: 1, NumNodes: 1, NumTasks: 1, NodeList: "localhost", ExitCode: 3}},
		{"scontrol_requeued.txt", jobInfo{ID: "4", Name: "wrap", State: "PENDING", Reason: "BeginTime", Restarts: 1, NumCPUs: 1, NumNodes: 1, NumTasks: 1}},
	}
	for _, tt := range tests {
		j, err := parseJob(readTestdata(t, tt.file))
		if err != nil {
			t.Errorf("%s: %v", tt.file, err)
			continue
		}
		if j.fields["WorkDir"] != "/tmp/sr" {
			t.Errorf("%s: WorkDir %q", tt.file, j.fields["WorkDir"])
		}
		j.fields = nil
		if tt.want.NodeList == "" {
			j.NodeList = "" // "(null)" or empty while pending
		}
		if !reflect.DeepEqual(j, tt.want) {
			t.Errorf("%s:\n got %+v\nwant %+v", tt.file, j, tt.want)
		}
		if got, want := j.final(), tt.want.State != "PENDING" && tt.want.State != "RUNNING"; got != want {
			t.Errorf("%s: final = %v", tt.file, got)
		}
	}
	if _, err := parseJob("slurm_load_jobs error: Invalid job id specified"); err == nil {
		t.Error("an error message parsed as a job")
	}
}

func TestParseFieldsWithSpaces(t *testing.T) {
	f := parseFields("JobId=7 JobName=a b  c Command=/bin/x --flag=1 y WorkDir=/tmp/a dir ExitCode=0:15")
	want := map[string]string{"JobId": "7", "JobName": "a b  c", "Command": "/bin/x --flag=1 y", "WorkDir": "/tmp/a dir", "ExitCode": "0:15"}
	if !reflect.DeepEqual(f, want) {
		t.Errorf("got %q, want %q", f, want)
	}
}

func TestParseSinfoNodes(t *testing.T) {
	out := readTestdata(t, "sinfo_nodes.txt") + "gpu1 16 gpu mixed\ngpu2 16 gpu allocated\nlocalhost 8 gpu idle\n" +
		"gpu3 16 gpu down*\ngpu4 16 gpu idle*\ngpu5 16 gpu down\n" // lost: left out
	got, err := parseSinfoNodes(out, "")
	if err != nil || !reflect.DeepEqual(got, []nodeCPUs{{"localhost", 8}}) {
		t.Errorf("default partition: %v, %v", got, err)
	}
	got, err = parseSinfoNodes(out, "gpu")
	if err != nil || !reflect.DeepEqual(got, []nodeCPUs{{"gpu1", 16}, {"gpu2", 16}, {"localhost", 8}}) {
		t.Errorf("gpu: %v, %v", got, err)
	}
	if _, err := parseSinfoNodes(out, "nope"); err == nil {
		t.Error("unknown partition accepted")
	}
}

func TestCutLabel(t *testing.T) {
	tests := []struct {
		in   string
		rank int
		text string
		ok   bool
	}{
		{"0: hello", 0, "hello", true},
		{" 7: x: y", 7, "x: y", true},
		{"12: ", 12, "", true},
		{"3:no space", 3, "no space", true},
		{"srun: error: x", 0, "srun: error: x", false},
		{": x", 0, ": x", false},
		{"12345678: x", 0, "12345678: x", false},
		{"42", 0, "42", false},
	}
	for _, tt := range tests {
		r, text, ok := cutLabel(tt.in)
		if r != tt.rank || text != tt.text || ok != tt.ok {
			t.Errorf("cutLabel(%q) = %d, %q, %v; want %d, %q, %v", tt.in, r, text, ok, tt.rank, tt.text, tt.ok)
		}
	}
}

func TestTaskListAndResults(t *testing.T) {
	if got, err := parseTaskList("0-2,5,7-8"); err != nil || !reflect.DeepEqual(got, []int{0, 1, 2, 5, 7, 8}) {
		t.Errorf("parseTaskList = %v, %v", got, err)
	}
	for _, bad := range []string{"", "a", "3-1", "1-x"} {
		if _, err := parseTaskList(bad); err == nil {
			t.Errorf("parseTaskList(%q) accepted", bad)
		}
	}
	res := []struct {
		text string
		want plugins.RankResult
		ok   bool
	}{
		{"Completed", plugins.RankResult{}, true},
		{"Exited with exit code 3", plugins.RankResult{ExitCode: 3}, true},
		{"Killed", plugins.RankResult{ExitCode: 137, Signal: "SIGKILL"}, true},
		{"Terminated", plugins.RankResult{ExitCode: 143, Signal: "SIGTERM"}, true},
		{"User defined signal 1", plugins.RankResult{ExitCode: 138, Signal: "SIGUSR1"}, true},
		{"Segmentation fault (core dumped)", plugins.RankResult{ExitCode: 139, Signal: "SIGSEGV"}, true},
		{"Something else", plugins.RankResult{}, false},
	}
	for _, tt := range res {
		got, ok := textResult(tt.text)
		if got != tt.want || ok != tt.ok {
			t.Errorf("textResult(%q) = %+v, %v", tt.text, got, ok)
		}
	}
	if got := statusResult(0x0300); got != (plugins.RankResult{ExitCode: 3}) {
		t.Errorf("status 0x0300: %+v", got)
	}
	if got := statusResult(0x0089); got != (plugins.RankResult{ExitCode: 137, Signal: "SIGKILL"}) { // core flag set
		t.Errorf("status 0x0089: %+v", got)
	}
}

// TestParserOnRecordedStep feeds the recorded output of a real 3-task srun
// step (rank 1 exits 3, rank 2 segfaults, rank 0 is terminated by
// --kill-on-bad-exit) through the parser.
func TestParserOnRecordedStep(t *testing.T) {
	var out lines
	var events []event
	var others []string
	p := lineParser{n: 3, out: out.add, emit: func(e event) { events = append(events, e) },
		other: func(_ plugins.Stream, l string) { others = append(others, l) }}
	for _, l := range strings.Split(strings.TrimSpace(readTestdata(t, "srun_fail.stdout")), "\n") {
		p.line(plugins.Stdout, l)
	}
	for _, l := range strings.Split(strings.TrimSpace(readTestdata(t, "srun_fail.stderr")), "\n") {
		p.line(plugins.Stderr, l)
	}
	for r := range 3 {
		got := out.of(r)
		want := []string{"stdout: out " + string(rune('0'+r)), "stderr: err " + string(rune('0'+r))}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("rank %d: %q, want %q", r, got, want)
		}
	}
	want := []event{
		{kind: evPID, ranks: []int{0}, pid: 17766},
		{kind: evPID, ranks: []int{1}, pid: 17767},
		{kind: evPID, ranks: []int{2}, pid: 17768},
		{kind: evStep, step: "1.0"},
		{kind: evExit, ranks: []int{1}, res: plugins.RankResult{ExitCode: 3}},
		{kind: evExit, ranks: []int{2}, res: plugins.RankResult{ExitCode: 139, Signal: "SIGSEGV"}},
		{kind: evExit, ranks: []int{0}, res: plugins.RankResult{ExitCode: 143, Signal: "SIGTERM"}},
	}
	if !reflect.DeepEqual(events, want) {
		t.Errorf("events:\n got %+v\nwant %+v", events, want)
	}
	var stepd bool
	for _, o := range others {
		stepd = stepd || strings.Contains(o, "*** STEP 1.0 ON localhost CANCELLED")
	}
	if !stepd {
		t.Errorf("slurmstepd's cancel notice did not go to the log: %q", others)
	}
}

func TestParserMarkers(t *testing.T) {
	var events []event
	p := lineParser{n: 2, emit: func(e event) { events = append(events, e) }, other: func(plugins.Stream, string) {}}
	p.line(plugins.Stdout, "SCAVRUN 1") // swallowed on stdout
	p.line(plugins.Stderr, "SCAVRUN 1")
	p.line(plugins.Stderr, "srun: launch/slurm: _task_finish: localhost: tasks 0-1: Completed")
	p.line(plugins.Stderr, "SCAVEND 0")
	p.line(plugins.Stdout, "5: SCAVPID 3") // rank out of range: not an event
	p.line(plugins.Stdout, "1: SCAVPID 42 7.3")
	p.line(plugins.Stdout, "0: SCAVPID 43 7.")
	want := []event{{kind: evRun, n: 1}, {kind: evExit, ranks: []int{0, 1}}, {kind: evEnd},
		{kind: evPID, ranks: []int{1}, pid: 42, step: "7.3"}, {kind: evPID, ranks: []int{0}, pid: 43}}
	if !reflect.DeepEqual(events, want) {
		t.Errorf("events %+v, want %+v", events, want)
	}
}

// TestTailCutsLongLines writes a labelled line longer than the tail's
// buffer to a file: its pieces all go to the line's rank.
func TestTailCutsLongLines(t *testing.T) {
	path := filepath.Join(t.TempDir(), "out")
	long := strings.Repeat("x", 50)
	if err := os.WriteFile(path, []byte("1: "+long+"\n0: short\nsrun: note\n2: unterminated"), 0o644); err != nil {
		t.Fatal(err)
	}
	var out lines
	var others []string
	p := &lineParser{n: 3, out: out.add, cont: -1, emit: func(event) {}, other: func(_ plugins.Stream, l string) { others = append(others, l) }}
	tl := &tail{path: path, stream: plugins.Stdout, p: p, max: 20}
	defer tl.close()
	if err := tl.read(false); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(strings.Fields(strings.ReplaceAll(strings.Join(out.of(1), ""), "stdout: ", " ")), ""); got != long {
		t.Errorf("rank 1 got %q, want the %d x's in pieces", out.of(1), len(long))
	}
	if got := out.of(0); !reflect.DeepEqual(got, []string{"stdout: short"}) {
		t.Errorf("rank 0 got %q", got)
	}
	if len(out.of(2)) != 0 {
		t.Errorf("an unterminated line was delivered before the end: %q", out.of(2))
	}
	if err := tl.read(true); err != nil {
		t.Fatal(err)
	}
	if got := out.of(2); !reflect.DeepEqual(got, []string{"stdout: unterminated"}) {
		t.Errorf("rank 2 got %q", got)
	}
	if !reflect.DeepEqual(others, []string{"srun: note"}) {
		t.Errorf("unlabelled lines %q", others)
	}
}
