package plugins

import (
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
)

func envMap(t *testing.T, env []string) map[string]string {
	t.Helper()
	m := map[string]string{}
	for _, kv := range env {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			t.Fatalf("entry %q is not KEY=VALUE", kv)
		}
		if _, dup := m[k]; dup {
			t.Fatalf("key %s appears twice in %q", k, env)
		}
		m[k] = v
	}
	return m
}

func TestWorkerEnv(t *testing.T) {
	base := AttemptSpec{
		JobID: "j1", Attempt: 2, Command: []string{"python3", "train.py"},
		Config:        Config{Workers: 4, GlobalBatch: 64, LRScale: 0.5},
		Socket:        "/run/scav.sock",
		CheckpointDir: "/ck", Restore: "/ck/step-20",
		Env: []string{"FOO=1", "RANK=9", "FOO=2", "BAR=x=y", "SCAV_LR_SCALE=7", "bad"},
	}
	self := base
	self.Command = []string{"torchrun", "--nproc_per_node={workers}", "train.py"}
	fresh := base
	fresh.Restore = ""
	fresh.Config = Config{Workers: 2}
	fresh.Env = nil

	tests := []struct {
		name   string
		spec   AttemptSpec
		rank   int
		want   map[string]string
		absent []string
	}{
		{
			name: "ranks mode rank 3",
			spec: base, rank: 3,
			want: map[string]string{
				"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "3", "LOCAL_WORLD_SIZE": "4",
				"MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500",
				"SCAV_JOB_ID": "j1", "SCAV_ATTEMPT": "2", "SCAV_SOCKET": "/run/scav.sock",
				"SCAV_GLOBAL_BATCH": "64", "SCAV_LOCAL_BATCH": "16", "SCAV_LR_SCALE": "0.5",
				"SCAV_CHECKPOINT_DIR": "/ck", "SCAV_RESTORE": "/ck/step-20",
				"FOO": "2", "BAR": "x=y",
			},
		},
		{
			name: "self mode has no rank variables",
			spec: self, rank: 0,
			want: map[string]string{
				"MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500", "SCAV_JOB_ID": "j1",
				"SCAV_GLOBAL_BATCH": "64", "SCAV_LOCAL_BATCH": "16", "FOO": "2",
			},
			absent: []string{"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
		},
		{
			name: "defaults: lr scale 1, batch unknown (unset, never 0), no restore",
			spec: fresh, rank: 1,
			want: map[string]string{
				"RANK": "1", "WORLD_SIZE": "2", "SCAV_LR_SCALE": "1", "SCAV_RESTORE": "",
			},
			absent: []string{"SCAV_GLOBAL_BATCH", "SCAV_LOCAL_BATCH"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := envMap(t, WorkerEnv(tt.spec, tt.rank, tt.rank, tt.spec.Config.Workers, "10.0.0.1", 29500))
			for k, v := range tt.want {
				if got, ok := m[k]; !ok || got != v {
					t.Errorf("%s = %q (set %v), want %q", k, got, ok, v)
				}
			}
			for _, k := range tt.absent {
				if _, ok := m[k]; ok {
					t.Errorf("%s is set, want absent", k)
				}
			}
			if _, ok := m["bad"]; ok {
				t.Errorf("malformed entry kept")
			}
		})
	}
}

func TestInheritEnv(t *testing.T) {
	got := InheritEnv([]string{"PATH=/bin", "RANK=5", "SCAV_SOCKET=/x", "HOME=/root", "MASTER_PORT=1", "NOTIFY_SOCKET=/run/systemd/notify", "WATCHDOG_USEC=30000000"})
	want := []string{"PATH=/bin", "HOME=/root"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("InheritEnv = %q, want %q", got, want)
	}
}

func TestExpandCommand(t *testing.T) {
	cfg := Config{Workers: 4, GlobalBatch: 128}
	tests := []struct {
		in, want []string
	}{
		{[]string{"python3", "train.py"}, []string{"python3", "train.py"}},
		{
			[]string{"torchrun", "--nproc_per_node={workers}", "t.py", "--bs={batch_size}", "--lbs", "{local_batch_size}"},
			[]string{"torchrun", "--nproc_per_node=4", "t.py", "--bs=128", "--lbs", "32"},
		},
		{[]string{"sh", "-c", "echo {workers}x{batch_size}/{local_batch_size} {other}"}, []string{"sh", "-c", "echo 4x128/32 {other}"}},
	}
	for _, tt := range tests {
		in := append([]string(nil), tt.in...)
		if got := ExpandCommand(tt.in, cfg); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("ExpandCommand(%q) = %q, want %q", tt.in, got, tt.want)
		}
		if !reflect.DeepEqual(in, tt.in) {
			t.Errorf("ExpandCommand modified its input")
		}
	}
}

func TestResolveMode(t *testing.T) {
	tests := []struct {
		mode LaunchMode
		cmd  []string
		want LaunchMode
	}{
		{ModeAuto, []string{"python3", "train.py"}, ModeRanks},
		{"", []string{"python3", "train.py"}, ModeRanks},
		{ModeAuto, []string{"torchrun", "--nproc_per_node=2", "t.py"}, ModeSelf},
		{ModeAuto, []string{"/usr/bin/torchrun", "t.py"}, ModeSelf},
		{ModeAuto, []string{"/usr/bin/python3", "-m", "torch.distributed.run", "t.py"}, ModeSelf},
		{ModeAuto, []string{"python3", "-u", "-m", "torch.distributed.launch", "t.py"}, ModeSelf},
		{ModeAuto, []string{"python3", "-mtorch.distributed.run", "t.py"}, ModeSelf},
		{ModeAuto, []string{"python3", "-m", "torch.distributed.other", "t.py"}, ModeRanks},
		{ModeAuto, []string{"python3", "torchrun311.py", "t.py"}, ModeRanks},
		{ModeAuto, nil, ModeRanks},
		{ModeRanks, []string{"torchrun", "t.py"}, ModeRanks},
		{ModeSelf, []string{"python3", "t.py"}, ModeSelf},
	}
	for _, tt := range tests {
		if got := ResolveMode(tt.mode, tt.cmd); got != tt.want {
			t.Errorf("ResolveMode(%q, %q) = %q, want %q", tt.mode, tt.cmd, got, tt.want)
		}
	}
}

func TestValidate(t *testing.T) {
	ok := AttemptSpec{JobID: "j", Attempt: 1, Command: []string{"python3", "t.py"}, Config: Config{Workers: 2, GlobalBatch: 64}}
	with := func(f func(*AttemptSpec)) AttemptSpec {
		s := ok
		s.Env = append([]string(nil), ok.Env...)
		f(&s)
		return s
	}
	tests := []struct {
		name string
		spec AttemptSpec
		want []string // substrings of the error; none means valid
	}{
		{"valid", ok, nil},
		{"batch unknown", with(func(s *AttemptSpec) { s.Config.GlobalBatch = 0 }), nil},
		{"valid env and mode", with(func(s *AttemptSpec) { s.Env = []string{"A=1", "B="}; s.Mode = ModeSelf }), nil},
		{"empty command", with(func(s *AttemptSpec) { s.Command = nil }), []string{"command is empty"}},
		{"empty program", with(func(s *AttemptSpec) { s.Command = []string{""} }), []string{"argv[0]"}},
		{"no workers", with(func(s *AttemptSpec) { s.Config.Workers = 0 }), []string{"workers 0 is less than 1"}},
		{"batch below workers", with(func(s *AttemptSpec) { s.Config = Config{Workers: 4, GlobalBatch: 2} }), []string{"global batch 2 is smaller than the 4 workers"}},
		{"batch not divisible", with(func(s *AttemptSpec) { s.Config = Config{Workers: 3, GlobalBatch: 64} }), []string{"global batch 64 is not divisible by the 3 workers"}},
		{"negative batch", with(func(s *AttemptSpec) { s.Config.GlobalBatch = -1 }), []string{"global batch -1 is negative"}},
		{"template without batch", with(func(s *AttemptSpec) { s.Config.GlobalBatch = 0; s.Command = []string{"t", "--bs={batch_size}"} }), []string{"uses the batch size"}},
		{"bad lr", with(func(s *AttemptSpec) { s.Config.LRScale = math.NaN() }), []string{"lr scale"}},
		{"bad mode", with(func(s *AttemptSpec) { s.Mode = "mpi" }), []string{`launch mode "mpi"`}},
		{"reserved env", with(func(s *AttemptSpec) { s.Env = []string{"RANK=1", "SCAV_RESTORE=x"} }), []string{"env RANK is set by the launcher", "env SCAV_RESTORE"}},
		{"malformed env", with(func(s *AttemptSpec) { s.Env = []string{"NOEQUALS", "=v"} }), []string{`"NOEQUALS" is not KEY=VALUE`, `"=v" is not`}},
		{"everything at once", AttemptSpec{Config: Config{Workers: 0, GlobalBatch: -3, Nodes: -1}},
			[]string{"job id is empty", "attempt 0", "command is empty", "workers 0", "global batch -3", "nodes -1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.spec.Validate()
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("Validate = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, ErrInvalidSpec) {
				t.Fatalf("Validate = %v, want ErrInvalidSpec", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}
