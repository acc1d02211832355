package main

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestJobFile(t *testing.T) {
	write := func(text string) string {
		p := filepath.Join(t.TempDir(), "job.yaml")
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, c := range []struct {
		name, file string
		argv       []string // the command line's flags
		wantCmd    []string
		want       map[string]string // flag → its value after the file
		wantErr    string
	}{
		{name: "flags and a list command",
			file:    "name: cnn\nworkers: 1:2\nbatch_size: 32:128\ntarget-steps: 300\ncommand: [python3, train.py, --epochs, 3]\n",
			wantCmd: []string{"python3", "train.py", "--epochs", "3"},
			want:    map[string]string{"name": "cnn", "workers": "1:2", "batch-size": "32:128", "target-steps": "300"}},
		{name: "env as a mapping and a list",
			file: "env: {OMP_NUM_THREADS: 1, A: b c}\ntypes: [t1, t2]\n",
			want: map[string]string{"env": "[OMP_NUM_THREADS=1,A=b c]", "types": "[t1,t2]"}},
		{name: "the command line wins",
			file: "workers: 4\npolicy: adaptive\n", argv: []string{"--workers", "2"},
			want: map[string]string{"workers": "2", "policy": "adaptive"}},
		{name: "a command line split as sh does",
			file:    `command: python3 "my script.py" --tag 'a b' x\ y` + "\n",
			wantCmd: []string{"python3", "my script.py", "--tag", "a b", "x y"}},
		{name: "an unknown key names the line and the keys",
			file: "workers: 2\nnodes: 3\n", wantErr: "job.yaml:2: nodes: no such key; the keys are run's flags ("},
		{name: "a bad value names the flag",
			file: "grace: soon\n", wantErr: `job.yaml:1: grace: invalid argument "soon"`},
		{name: "a mapping where a value goes",
			file: "workers: {a: 1}\n", wantErr: "only env is a mapping"},
		{name: "not a mapping", file: "- workers\n", wantErr: "want a mapping"},
		{name: "empty", file: "", wantErr: "the file is empty"},
		{name: "an unclosed quote", file: "command: python3 'train.py\n", wantErr: "unclosed '"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cmd := newRunCmd(&app{})
			if err := cmd.Flags().Parse(c.argv); err != nil {
				t.Fatal(err)
			}
			got, err := applyJobFile(cmd.Flags(), write(c.file))
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, c.wantCmd) {
				t.Errorf("command %q, want %q", got, c.wantCmd)
			}
			for name, want := range c.want {
				if v := cmd.Flags().Lookup(name).Value.String(); v != want {
					t.Errorf("--%s = %q, want %q", name, v, want)
				}
			}
		})
	}
}
