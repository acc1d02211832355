package main

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// writeConfig writes a config file into a temporary directory.
func writeConfig(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "scavd.yaml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// loadWith parses args as scavd's command line and loads the settings.
func loadWith(t *testing.T, args ...string) (loaded, error) {
	t.Helper()
	var s settings
	var config string
	f := pflag.NewFlagSet("scavd", pflag.ContinueOnError)
	f.StringVar(&config, "config", "", "")
	bindFlags(f, &s)
	if err := f.Parse(args); err != nil {
		t.Fatal(err)
	}
	return newLoader(f, config, f.Changed("config")).load()
}

// TestPrecedence: defaults, then the file, then only the flags that were set.
func TestPrecedence(t *testing.T) {
	path := writeConfig(t, "state_dir: /srv/scav\nlisten: 127.0.0.2:4222\nlog_level: debug\nstep_retention: 24h\n")
	for _, tc := range []struct {
		name string
		args []string
		want func(s *settings)
	}{
		{name: "defaults", args: []string{"--config", ""}, want: func(s *settings) {}},
		{name: "file over defaults", args: []string{"--config", path}, want: func(s *settings) {
			s.StateDir, s.Listen, s.LogLevel, s.StepRetention = "/srv/scav", "127.0.0.2:4222", "debug", 24*time.Hour
		}},
		{name: "flags over file", args: []string{"--config", path, "--log-level", "warn", "--node", "n7"}, want: func(s *settings) {
			s.StateDir, s.Listen, s.LogLevel, s.StepRetention, s.Node = "/srv/scav", "127.0.0.2:4222", "warn", 24*time.Hour, "n7"
		}},
		{name: "a flag set to its default still wins", args: []string{"--config", path, "--listen", "127.0.0.1:4233"}, want: func(s *settings) {
			s.StateDir, s.LogLevel, s.StepRetention = "/srv/scav", "debug", 24*time.Hour
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := loadWith(t, tc.args...)
			if err != nil {
				t.Fatal(err)
			}
			want := defaultSettings()
			tc.want(&want)
			if !reflect.DeepEqual(got.settings, want) {
				t.Fatalf("settings\n got %+v\nwant %+v", got.settings, want)
			}
		})
	}
}

// TestInvalidConfigListsEveryProblem: every problem is reported at once, each
// naming its key and where it came from.
func TestInvalidConfigListsEveryProblem(t *testing.T) {
	path := writeConfig(t, `state_dir: /tmp/x
listen: nope
bogus: 1
log_level: loud
step_retention: forever
launcher: slurmish
plugin_sha256: abc
nats: http://x
ssh:
  port: 22
`)
	_, err := loadWith(t, "--config", path, "--log-format", "xml")
	if err == nil {
		t.Fatal("accepted")
	}
	for _, want := range []string{
		path + `:3: unknown key "bogus"`,
		path + `:10: unknown key "ssh.port"`,
		path + ":5: step_retention: cannot unmarshal",
		path + `:2: listen: "nope" is not host:port`,
		path + ":7: plugin_sha256: given without plugin",
		path + `:6: launcher: "slurmish" is not a built-in launcher`,
		path + `:4: log_level: "loud"`,
		path + `:8: nats: "http://x" is not a NATS URL`,
		`--log-format: "xml": use console or json`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not say %q:\n%v", want, err)
		}
	}
	if n := strings.Count(err.Error(), "\n") + 1; n != 9 {
		t.Errorf("%d problems reported, want 9:\n%v", n, err)
	}
	// The file's problems come in the order of its lines, the flags' after them.
	var order []string
	for _, l := range strings.Split(err.Error(), "\n") {
		if rest, ok := strings.CutPrefix(l, path+":"); ok {
			n, _, _ := strings.Cut(rest, ":")
			order = append(order, n)
		} else {
			order = append(order, l[:strings.IndexByte(l, ':')])
		}
	}
	if want := []string{"2", "3", "4", "5", "6", "7", "8", "10", "--log-format"}; !reflect.DeepEqual(order, want) {
		t.Errorf("problems in the order %v, want the file's lines in order, then the flags: %v\n%v", order, want, err)
	}
}

func TestConfigFileErrors(t *testing.T) {
	for _, tc := range []struct{ name, text, want string }{
		{"syntax", "a: [\n", ":1: did not find expected node content"},
		{"not a mapping", "- a\n- b\n", ":1: want a mapping"},
		{"twice", "node: a\nnode: b\n", `mapping key "node" already defined`},
		{"plugin without sum", "plugin: /bin/true\n", `plugin_sha256: "" is not a sha256`},
		{"plugin and launcher", "plugin: /bin/true\nlauncher: ssh\nplugin_sha256: " + strings.Repeat("ab", 32) + "\n", `launcher: "ssh" and plugin`},
		{"socket too long", "socket: /" + strings.Repeat("s", 120) + "\n", "longer than a unix socket allows"},
		{"retention", "step_retention: -1h\n", "step_retention: -1h0m0s: must be positive"},
		{"twice nested", "ssh:\n  user: a\n  user: b\n", `:3: ssh.user: mapping key "user" already defined at line 2`},
		{"list element", "cloud:\n  types:\n    - a\n    - {b: c}\n", ":4: cloud.types: cannot unmarshal !!map into string"},
		{"not a list", "ssh:\n  hosts: {a: b}\n", ":2: ssh.hosts: cannot unmarshal !!map into []string"},
		{"not a group", "ssh: 5\n", ":1: ssh: cannot unmarshal !!int `5` into main.sshSettings"},
		{"syntax without a line", "a: *b\n", ": unknown anchor 'b' referenced"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := loadWith(t, "--config", writeConfig(t, tc.text))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
		})
	}
	if _, err := loadWith(t, "--config", filepath.Join(t.TempDir(), "absent.yaml")); err == nil {
		t.Error("a missing --config file was accepted")
	}
	if got, err := loadWith(t, "--config", writeConfig(t, "")); err != nil || !reflect.DeepEqual(got.settings, defaultSettings()) {
		t.Errorf("an empty file: %+v, %v; want the defaults", got.settings, err)
	}
}

// TestEveryKeyHasAFlag holds settings to the naming rule that lets a flag
// override its key: key x.a_b is flag --x-a-b.
func TestEveryKeyHasAFlag(t *testing.T) {
	var s settings
	f := pflag.NewFlagSet("scavd", pflag.ContinueOnError)
	bindFlags(f, &s)
	keys := map[string]bool{}
	for _, kv := range s.keys() {
		keys[kv.key] = true
		if f.Lookup(flagOfKey(kv.key)) == nil {
			t.Errorf("key %s has no flag --%s", kv.key, flagOfKey(kv.key))
		}
	}
	f.VisitAll(func(fl *pflag.Flag) {
		if !keys[keyOfFlag[fl.Name]] {
			t.Errorf("flag --%s sets no key (name it after its key)", fl.Name)
		}
	})
	for key := range reloadable {
		if !keys[key] {
			t.Errorf("reloadable key %s is not a setting", key)
		}
	}
}

// TestExampleConfigIsTheDefaults: deploy/scavd.yaml documents every key, each
// with a comment, and its values are the built-in defaults, so that it
// cannot go stale.
func TestExampleConfigIsTheDefaults(t *testing.T) {
	path := filepath.Join("..", "..", "deploy", "scavd.yaml")
	got, err := loadWith(t, "--config", path)
	if err != nil {
		t.Fatalf("%s does not load: %v", path, err)
	}
	want := defaultSettings()
	want.StateDir = "/var/lib/scavenger" // the default for root, as the service runs
	if !reflect.DeepEqual(got.settings, want) {
		t.Errorf("%s is not the defaults:\n got %+v\nwant %+v", path, got.settings, want)
	}
	for _, kv := range want.keys() {
		if got.from[kv.key] != fromFile {
			t.Errorf("%s does not document key %s", path, kv.key)
		}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	key := regexp.MustCompile(`^[a-z_0-9]+:`)
	for i, l := range lines {
		if key.MatchString(l) && i > 0 && !strings.HasPrefix(lines[i-1], "#") && !key.MatchString(lines[i-1]) {
			t.Errorf("%s:%d: %s has no comment above it", path, i+1, l)
		}
	}
}

// TestCheckConfigOutput compares --check-config's output with
// testdata/check-config.golden (go test -update rewrites it).
func TestCheckConfigOutput(t *testing.T) {
	path := writeConfig(t, "state_dir: /srv/scav\nnode: gpu-7\nlog_level: debug\n")
	var out bytes.Buffer
	err := run0(t, &out, "--config", path, "--check-config", "--listen", "127.0.0.2:4222")
	if err != nil {
		t.Fatal(err)
	}
	got := strings.ReplaceAll(out.String(), path, "CONFIG")
	golden := filepath.Join("testdata", "check-config.golden")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Errorf("--check-config printed\n%s\nwant (%s)\n%s", got, golden, want)
	}
	// What it prints is itself a valid config with the same settings.
	again, err := loadWith(t, "--config", writeConfig(t, out.String()))
	if err != nil {
		t.Fatalf("the printed config does not load: %v", err)
	}
	if again.StateDir != "/srv/scav" || again.Listen != "127.0.0.2:4222" || again.LogLevel != "debug" || again.Socket != "/srv/scav/scavd.sock" {
		t.Errorf("the printed config loads as %+v", again.settings)
	}
}

// run0 runs scavd's command line in process, its stdout to out.
func run0(t *testing.T, out *bytes.Buffer, args ...string) error {
	t.Helper()
	return run(t.Context(), args, out)
}

// TestNestedKeys: a group of keys (ssh.*, slurm.*) is a nested struct; its
// keys are dotted, its flags prefixed, and its unknown keys named in full.
func TestNestedKeys(t *testing.T) {
	type group struct {
		Hosts   []string      `yaml:"hosts"`
		Timeout time.Duration `yaml:"connect_timeout"`
	}
	type withGroup struct {
		Node string `yaml:"node"`
		SSH  group  `yaml:"ssh"`
	}
	var keys []string
	for _, kv := range keysOf(withGroup{}) {
		keys = append(keys, kv.key+"="+flagOfKey(kv.key))
	}
	if got, want := strings.Join(keys, " "), "node=node ssh.hosts=ssh-hosts ssh.connect_timeout=ssh-connect-timeout"; got != want {
		t.Errorf("keys %s, want %s", got, want)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte("node: a\nssh:\n  hosts: [h1]\n  port: 22\n"), &doc); err != nil {
		t.Fatal(err)
	}
	lines := map[string]int{}
	errs := decodeKeys("f.yaml", "", doc.Content[0], reflect.ValueOf(&withGroup{}).Elem(), lines)
	if len(errs) != 1 || errs[0].Error() != `f.yaml:4: unknown key "ssh.port"` {
		t.Errorf("errors %v", errs)
	}
	if lines["ssh.hosts"] != 3 || lines["node"] != 1 {
		t.Errorf("lines %v", lines)
	}
}
