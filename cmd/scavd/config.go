package main

import (
	"reflect"
	"strings"
	"time"

	"github.com/spf13/pflag"
)

// DefaultConfigFile is read when --config is not given and it exists.
const DefaultConfigFile = "/etc/scavenger/scavd.yaml"

// settings is everything scavd can be told, by its config file (the yaml
// keys) and by its flags (bound to the same fields in bindFlags). Adding a
// setting is one field here and one flag in bindFlags, named after the key:
// key "a_b" is flag --a-b, key "x.a_b" (a field of a nested struct) is flag
// --x-a-b. TestEveryKeyHasAFlag holds both to that, and deploy/scavd.yaml
// must document the key (TestExampleConfigIsTheDefaults).
type settings struct {
	StateDir      string        `yaml:"state_dir"`
	NATS          string        `yaml:"nats"`
	Listen        string        `yaml:"listen"`
	Socket        string        `yaml:"socket"`
	Node          string        `yaml:"node"`
	StepRetention time.Duration `yaml:"step_retention"`
	// OutputMiBPerUser bounds one user's output in the history.
	OutputMiBPerUser int `yaml:"output_mib_per_user"`
	// OutputReadKiBPerUser bounds how fast one user's jobs' output is read.
	OutputReadKiBPerUser int           `yaml:"output_read_kib_per_user"`
	StoreMaxBytes        int64         `yaml:"store_max_bytes"`
	StopGrace            time.Duration `yaml:"stop_grace"`
	// JobRetention and JobHistory bound the jobs a node keeps (jobs.Retention).
	JobRetention time.Duration `yaml:"job_retention"`
	JobHistory   int           `yaml:"job_history"`
	Launcher     string        `yaml:"launcher"`
	Plugin       string        `yaml:"plugin"`
	PluginSHA256 string        `yaml:"plugin_sha256"`
	LogLevel     string        `yaml:"log_level"`
	LogFormat    string        `yaml:"log_format"`
	ResumeJobs   bool          `yaml:"resume_jobs"`
	// NodeSampleEvery 0 means never.
	NodeSampleEvery time.Duration `yaml:"node_sample_every"`
	GPUSource       string        `yaml:"gpu_source"`
	MetricsListen   string        `yaml:"metrics_listen"`
	// MetricsWebConfig is Prometheus' exporter-toolkit web config (TLS, basic auth).
	MetricsWebConfig string `yaml:"metrics_web_config"`
	// MetricsPerJob: the series that name jobs (auto: only on a daemon of one user's).
	MetricsPerJob string `yaml:"metrics_per_job"`
	// NATSKey is the nkey seed the daemons authenticate to NATS with.
	NATSKey     string `yaml:"nats_key"`
	NATSTLSCert string `yaml:"nats_tls_cert"`
	NATSTLSKey  string `yaml:"nats_tls_key"`
	NATSTLSCA   string `yaml:"nats_tls_ca"`
	// APIListen serves the API on TCP too, with APITokens and TLS.
	APIListen  string `yaml:"api_listen"`
	APITLSCert string `yaml:"api_tls_cert"`
	APITLSKey  string `yaml:"api_tls_key"`
	APITokens  string `yaml:"api_tokens"`
	// APILimits bound what the API's listeners keep open, per user and in all.
	APILimits apiLimitSettings `yaml:"api_limits"`
	// DashboardListen is the web dashboard's address for scavctl dashboard's
	// login links (the dashboard is also under /ui/ of api_listen).
	DashboardListen string `yaml:"dashboard_listen"`
	// Replicas is how many NATS servers hold each stream and bucket.
	Replicas int             `yaml:"replicas"`
	Cluster  clusterSettings `yaml:"cluster"`
	Local    localSettings   `yaml:"local"`
	// Telemetry bounds the workers' telemetry socket (ingest.Limits).
	Telemetry telemetrySettings `yaml:"telemetry"`
	SSH       sshSettings       `yaml:"ssh"`
	Slurm     slurmSettings     `yaml:"slurm"`
	Cloud     cloudSettings     `yaml:"cloud"`
}

// apiLimitSettings bound the API's listeners (apiserver.Limits).
type apiLimitSettings struct {
	MaxConns       int           `yaml:"max_conns"`
	ConnsPerUser   int           `yaml:"conns_per_user"`
	StreamsPerUser int           `yaml:"streams_per_user"`
	BodyTimeout    time.Duration `yaml:"body_timeout"`
	IdleTimeout    time.Duration `yaml:"idle_timeout"`
	WriteTimeout   time.Duration `yaml:"write_timeout"`
}

// clusterSettings join the embedded NATS server to the other nodes' (daemon.Cluster).
type clusterSettings struct {
	Name    string   `yaml:"name"`
	Listen  string   `yaml:"listen"`
	Routes  []string `yaml:"routes"`
	TLSCert string   `yaml:"tls_cert"`
	TLSKey  string   `yaml:"tls_key"`
	TLSCA   string   `yaml:"tls_ca"`
}

// cloudSettings configure the cloudvm launcher (launcher: cloudvm).
type cloudSettings struct {
	Provider         string        `yaml:"provider"`
	StateDir         string        `yaml:"state_dir"`
	Catalog          string        `yaml:"catalog"`
	Types            []string      `yaml:"types"`
	Zones            []string      `yaml:"zones"`
	Market           string        `yaml:"market"`
	Region           string        `yaml:"region"`
	Project          string        `yaml:"project"`
	PublicIP         bool          `yaml:"public_ip"`
	Subnets          []string      `yaml:"subnets"`
	Image            string        `yaml:"image"`
	Key              string        `yaml:"key"`
	InstanceProfile  string        `yaml:"instance_profile"`
	SecurityGroups   []string      `yaml:"security_groups"`
	Endpoint         string        `yaml:"endpoint"`
	Metadata         string        `yaml:"metadata"`
	User             string        `yaml:"user"`
	Owner            string        `yaml:"owner"`
	MaxInstances     int           `yaml:"max_instances"`
	PoolLimit        int           `yaml:"pool_limit"`
	IdleRelease      time.Duration `yaml:"idle_release"`
	Blocklist        time.Duration `yaml:"blocklist"`
	NoticeInterval   time.Duration `yaml:"notice_interval"`
	OrphanTimeout    time.Duration `yaml:"orphan_timeout"`
	Rebalance        bool          `yaml:"rebalance"`
	ForwardTelemetry bool          `yaml:"forward_telemetry"`
}

// localSettings configure the local launcher (launcher: local).
type localSettings struct {
	// Slots is the most workers a job may have on this node; 0: the CPU count.
	Slots int `yaml:"slots"`
}

// telemetrySettings bound the telemetry socket per user and per job
// (ingest.Limits; their flags' defaults are ingest.DefaultLimits).
type telemetrySettings struct {
	Conns              int           `yaml:"conns"`
	ConnsPerUser       int           `yaml:"conns_per_user"`
	ConnsPerJob        int           `yaml:"conns_per_job"`
	StepBytesPerSecond int64         `yaml:"step_bytes_per_second"`
	StepBurst          int64         `yaml:"step_burst"`
	BadTokensPerSecond float64       `yaml:"bad_tokens_per_second"`
	BadTokenBurst      float64       `yaml:"bad_token_burst"`
	HelloTimeout       time.Duration `yaml:"hello_timeout"`
	IdleTimeout        time.Duration `yaml:"idle_timeout"`
}

// slurmSettings configure the slurm launcher (launcher: slurm).
type slurmSettings struct {
	JobID      string        `yaml:"job_id"`
	Partition  string        `yaml:"partition"`
	Grace      time.Duration `yaml:"grace"`
	SbatchArgs []string      `yaml:"sbatch_args"`
	SrunArgs   []string      `yaml:"srun_args"`
	WorkDir    string        `yaml:"work_dir"`
	Poll       time.Duration `yaml:"poll"`
}

// sshSettings configure the ssh launcher (launcher: ssh).
type sshSettings struct {
	Hosts            []string `yaml:"hosts"`
	Inventory        string   `yaml:"inventory"`
	User             string   `yaml:"user"`
	Keys             []string `yaml:"keys"`
	Agent            bool     `yaml:"agent"`
	KnownHosts       []string `yaml:"known_hosts"`
	ForwardTelemetry bool     `yaml:"forward_telemetry"`
}

// defaultSettings are the built-in defaults.
func defaultSettings() settings {
	var s settings
	bindFlags(pflag.NewFlagSet("defaults", pflag.ContinueOnError), &s)
	return s
}

// reloadable are the keys a running scavd applies on SIGHUP (reloader.apply
// says how); a change to any other key is logged and waits for a restart.
var reloadable = map[string]bool{"log_level": true, "step_retention": true}

var durationType = reflect.TypeOf(time.Duration(0))

// keys lists the dotted keys of the settings, in order, with their values.
func (s settings) keys() []keyValue { return keysOf(s) }

// keysOf lists the dotted keys of a settings struct: a field of a nested
// struct (ssh: {hosts: ...}) is key "ssh.hosts".
func keysOf(v any) []keyValue {
	var out []keyValue
	var walk func(prefix string, v reflect.Value)
	walk = func(prefix string, v reflect.Value) {
		t := v.Type()
		for i := 0; i < t.NumField(); i++ {
			tag := strings.Split(t.Field(i).Tag.Get("yaml"), ",")[0]
			if tag == "" || tag == "-" {
				continue
			}
			fv := v.Field(i)
			if fv.Kind() == reflect.Struct && fv.Type() != durationType {
				walk(prefix+tag+".", fv)
				continue
			}
			out = append(out, keyValue{key: prefix + tag, value: fv.Interface()})
		}
	}
	walk("", reflect.ValueOf(v))
	return out
}

// keyValue is one setting.
type keyValue struct {
	key   string
	value any
}

// flagOfKey is the flag that sets key: "x.a_b" is --x-a-b.
func flagOfKey(key string) string {
	return strings.NewReplacer(".", "-", "_", "-").Replace(key)
}

// keyOfFlag maps every setting's flag to its key.
var keyOfFlag = func() map[string]string {
	m := map[string]string{}
	for _, kv := range defaultSettings().keys() {
		m[flagOfKey(kv.key)] = kv.key
	}
	return m
}()

// changedKeys lists the keys whose values differ between a and b.
func changedKeys(a, b settings) []string {
	ak, bk := a.keys(), b.keys()
	var out []string
	for i := range ak {
		if !reflect.DeepEqual(ak[i].value, bk[i].value) {
			out = append(out, ak[i].key)
		}
	}
	return out
}
