package trace

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"
)

func TestReadPlacements(t *testing.T) {
	tests := []struct {
		name     string
		in       string
		wantRows int
		wantErr  error
		wantLine int
		wantCol  int
	}{
		{name: "ok reordered", in: "local_bsz,step_time,sync_time,placement\n4,0.5,0.1,22\n8,0.7,0.1,1\n", wantRows: 2},
		{name: "bom header", in: "\ufeffplacement,local_bsz,step_time,sync_time\n1,4,0.5,0\n", wantRows: 1},
		{name: "missing column", in: "placement,local_bsz,step_time\n1,4,0.5\n", wantErr: ErrMissingColumn, wantLine: 1},
		{name: "duplicate column", in: "placement,placement,local_bsz,step_time,sync_time\n", wantErr: ErrDuplicateColumn, wantLine: 1, wantCol: 2},
		{name: "empty", in: "", wantErr: ErrEmpty, wantLine: 1},
		{name: "no rows", in: "placement,local_bsz,step_time,sync_time\n", wantErr: ErrEmpty, wantLine: 2},
		{name: "bad number", in: "placement,local_bsz,step_time,sync_time\n1,4,0.5,0\n1,x,0.5,0\n", wantErr: ErrBadValue, wantLine: 3, wantCol: 2},
		{name: "negative time", in: "placement,local_bsz,step_time,sync_time\n1,4,-0.5,0\n", wantErr: ErrBadValue, wantLine: 2, wantCol: 3},
		{name: "nan", in: "placement,local_bsz,step_time,sync_time\n1,4,NaN,0\n", wantErr: ErrBadValue, wantLine: 2, wantCol: 3},
		{name: "bad placement digit", in: "placement,local_bsz,step_time,sync_time\n10,4,0.5,0\n", wantErr: ErrBadValue, wantLine: 2, wantCol: 1},
		{name: "field count", in: "placement,local_bsz,step_time,sync_time\n1,4,0.5\n", wantErr: ErrBadValue, wantLine: 2},
		{name: "bare quote", in: "placement,local_bsz,step_time,sync_time\n1,4\"x,0.5,0\n", wantErr: ErrBadValue, wantLine: 2, wantCol: 4},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rows, err := ReadPlacements(strings.NewReader(tc.in), "p.csv")
			if tc.wantErr == nil {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				if len(rows) != tc.wantRows {
					t.Fatalf("rows = %d, want %d", len(rows), tc.wantRows)
				}
				return
			}
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			var pe *ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("err %T is not *ParseError", err)
			}
			if pe.File != "p.csv" || pe.Line != tc.wantLine || pe.Column != tc.wantCol {
				t.Fatalf("location = %s:%d:%d, want p.csv:%d:%d (%v)", pe.File, pe.Line, pe.Column, tc.wantLine, tc.wantCol, err)
			}
		})
	}
}

func TestReadPlacementsValues(t *testing.T) {
	rows, err := ReadPlacements(strings.NewReader("local_bsz,placement,step_time,sync_time\n12,1234,1.5,0.25\n"), "p.csv")
	if err != nil {
		t.Fatal(err)
	}
	want := StepRow{Placement: "1234", Nodes: 4, Replicas: 10, LocalBatch: 12, StepTime: 1.5, SyncTime: 0.25}
	if rows[0] != want {
		t.Fatalf("row = %+v, want %+v", rows[0], want)
	}
}

func TestReadScalability(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    StepRow
		wantErr error
		wantCol int
	}{
		{name: "ok", in: "local_bsz,step_time,sync_time,num_nodes,num_replicas\n36,1.3,0.5,5,40\n",
			want: StepRow{Nodes: 5, Replicas: 40, LocalBatch: 36, StepTime: 1.3, SyncTime: 0.5}},
		{name: "fewer replicas than nodes", in: "num_nodes,num_replicas,local_bsz,step_time,sync_time\n4,2,8,1,0\n", wantErr: ErrInconsistent, wantCol: 2},
		{name: "non integer nodes", in: "num_nodes,num_replicas,local_bsz,step_time,sync_time\n1.5,2,8,1,0\n", wantErr: ErrBadValue, wantCol: 1},
		{name: "zero replicas", in: "num_nodes,num_replicas,local_bsz,step_time,sync_time\n1,0,8,1,0\n", wantErr: ErrBadValue, wantCol: 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rows, err := ReadScalability(strings.NewReader(tc.in), "s.csv")
			if tc.wantErr != nil {
				var pe *ParseError
				if !errors.Is(err, tc.wantErr) || !errors.As(err, &pe) || pe.Line != 2 || pe.Column != tc.wantCol {
					t.Fatalf("err = %v, want %v at s.csv:2:%d", err, tc.wantErr, tc.wantCol)
				}
				return
			}
			if err != nil || len(rows) != 1 || rows[0] != tc.want {
				t.Fatalf("rows = %+v, err = %v; want %+v", rows, err, tc.want)
			}
		})
	}
}

func TestReadValidation(t *testing.T) {
	const head = "progress,iteration,metric,grad_sqr,grad_var\n"
	tests := []struct {
		name     string
		in       string
		wantErr  error
		wantLine int
		wantCol  int
	}{
		{name: "ok", in: head + "10,10,0.5,1,2\n25,20,0.6,1,2\n"},
		{name: "progress goes back", in: head + "10,10,0.5,1,2\n9,20,0.6,1,2\n", wantErr: ErrInconsistent, wantLine: 3, wantCol: 1},
		{name: "iteration repeats", in: head + "10,10,0.5,1,2\n12,10,0.6,1,2\n", wantErr: ErrInconsistent, wantLine: 3, wantCol: 2},
		{name: "negative variance", in: head + "10,10,0.5,1,-2\n", wantErr: ErrBadValue, wantLine: 2, wantCol: 5},
		{name: "inf", in: head + "10,10,0.5,+Inf,2\n", wantErr: ErrBadValue, wantLine: 2, wantCol: 4},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ReadValidation(strings.NewReader(tc.in), "v.csv")
			if tc.wantErr == nil {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			var pe *ParseError
			if !errors.Is(err, tc.wantErr) || !errors.As(err, &pe) || pe.Line != tc.wantLine || pe.Column != tc.wantCol {
				t.Fatalf("err = %v, want %v at v.csv:%d:%d", err, tc.wantErr, tc.wantLine, tc.wantCol)
			}
		})
	}
}

func TestLoadApp(t *testing.T) {
	fsys := fstest.MapFS{
		"app/placements-aws.csv":  {Data: []byte("placement,local_bsz,step_time,sync_time\n1,4,0.5,0\n")},
		"app/scalability-aws.csv": {Data: []byte("num_nodes,num_replicas,local_bsz,step_time,sync_time\n2,8,4,0.9,0.3\n")},
		"app/validation-32.csv":   {Data: []byte("progress,iteration,metric,grad_sqr,grad_var\n100,50,1,1,1\n")},
		"app/validation-16.csv":   {Data: []byte("progress,iteration,metric,grad_sqr,grad_var\n90,90,1,1,1\n")},
		"app/README.md":           {Data: []byte("ignored")},
	}
	app, err := LoadApp(fsys, "app", nil)
	if err != nil {
		t.Fatal(err)
	}
	if app.Name != "app" || len(app.Validations) != 2 || app.Validations[0].Batch != 16 || app.TargetProgress() != 90 {
		t.Fatalf("app = %+v", app)
	}
	if _, err := LoadApp(fsys, "app", []string{"azure"}); !errors.Is(err, ErrNoTraces) {
		t.Fatalf("missing type: err = %v, want ErrNoTraces", err)
	}
	bad := fstest.MapFS{
		"app/placements-aws.csv": {Data: []byte("placement,local_bsz,step_time,sync_time\n1,4,0.5,0\n")},
		"app/validation-x.csv":   {Data: []byte("progress,iteration,metric,grad_sqr,grad_var\n1,1,1,1,1\n")},
	}
	if _, err := LoadApp(bad, "app", nil); !errors.Is(err, ErrBadValue) || !strings.Contains(err.Error(), "validation-x.csv") {
		t.Fatalf("bad name: err = %v", err)
	}
}

// TracesDir returns the shared trace directory or skips the test.
func tracesDir(t testing.TB) string {
	t.Helper()
	dir := os.Getenv("SCAV_TRACES")
	if dir == "" {
		dir = filepath.Join("..", "..", "..", "shared", "traces")
	}
	if _, err := os.Stat(filepath.Join(dir, "README.md")); err != nil {
		t.Skipf("traces not found at %s (set SCAV_TRACES)", dir)
	}
	return dir
}

func TestLoadSharedTraces(t *testing.T) {
	dir := tracesDir(t)
	for _, app := range []string{"bert", "cifar10", "deepspeech2", "ncf"} {
		a, err := LoadApp(os.DirFS(dir), app, []string{"aws", "azure", "dgx-ext", "quad", "rtx"})
		if err != nil {
			t.Fatalf("%s: %v", app, err)
		}
		if len(a.Validations) < 6 || a.TargetProgress() <= 0 {
			t.Fatalf("%s: %d validations, target %g", app, len(a.Validations), a.TargetProgress())
		}
	}
}

// parseFailed reports whether a reader failed, and fails t unless it failed
// with a *ParseError.
func parseFailed(t *testing.T, err error) bool {
	t.Helper()
	var pe *ParseError
	if err != nil && !errors.As(err, &pe) {
		t.Fatalf("error %v is not a *ParseError", err)
	}
	return err != nil
}

func FuzzReadPlacements(f *testing.F) {
	f.Add("placement,local_bsz,step_time,sync_time\n1,4,0.5,0.1\n22,8,0.9,0.3\n")
	f.Add("local_bsz,step_time,sync_time,placement\n4,0.5,0.1,1234\n")
	f.Add("placement,local_bsz\n\"1,4\n")
	f.Fuzz(func(t *testing.T, in string) {
		rows, err := ReadPlacements(strings.NewReader(in), "f.csv")
		if parseFailed(t, err) {
			return
		}
		for _, r := range rows {
			if r.Replicas < r.Nodes || r.StepTime <= 0 || r.LocalBatch <= 0 {
				t.Fatalf("accepted invalid row %+v", r)
			}
		}
	})
}

func FuzzReadValidation(f *testing.F) {
	f.Add("progress,iteration,metric,grad_sqr,grad_var\n10,10,0.5,1,2\n25,20,0.6,1,2\n")
	f.Add("iteration,progress,metric,grad_var,grad_sqr\n1,1,1,1,1\n")
	f.Fuzz(func(t *testing.T, in string) {
		rows, err := ReadValidation(strings.NewReader(in), "f.csv")
		if parseFailed(t, err) {
			return
		}
		for i := 1; i < len(rows); i++ {
			if rows[i].Progress <= rows[i-1].Progress {
				t.Fatalf("accepted decreasing progress %+v", rows)
			}
		}
	})
}

func FuzzReadScalability(f *testing.F) {
	f.Add("num_nodes,num_replicas,local_bsz,step_time,sync_time\n2,8,4,0.9,0.3\n")
	f.Add("local_bsz,step_time,sync_time,num_nodes,num_replicas\n36,1.3,0.5,5,40\n")
	f.Fuzz(func(t *testing.T, in string) {
		rows, err := ReadScalability(strings.NewReader(in), "f.csv")
		if parseFailed(t, err) {
			return
		}
		for _, r := range rows {
			if r.Replicas < r.Nodes || r.Nodes < 1 || r.StepTime <= 0 {
				t.Fatalf("accepted invalid row %+v", r)
			}
		}
	})
}
