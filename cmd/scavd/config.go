package main

import (
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/daemon/apiserver"

	"github.com/spf13/pflag"
	"go.uber.org/zap/zapcore"
	"go.yaml.in/yaml/v3"

	"github.com/scavenger-ml/scavenger/daemon"
	"github.com/scavenger-ml/scavenger/launchers/builtin"
	"github.com/scavenger-ml/scavenger/launchers/cloudvm"
	"github.com/scavenger-ml/scavenger/launchers/cloudvm/notice"
	"github.com/scavenger-ml/scavenger/launchers/cloudvm/provider"
	"github.com/scavenger-ml/scavenger/launchers/slurm"
	"github.com/scavenger-ml/scavenger/telemetry"
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
	Launcher      string        `yaml:"launcher"`
	Plugin        string        `yaml:"plugin"`
	PluginSHA256  string        `yaml:"plugin_sha256"`
	LogLevel      string        `yaml:"log_level"`
	LogFormat     string        `yaml:"log_format"`
	ResumeJobs    bool          `yaml:"resume_jobs"`
	// NodeSampleEvery 0 means never.
	NodeSampleEvery time.Duration `yaml:"node_sample_every"`
	GPUSource       string        `yaml:"gpu_source"`
	MetricsListen   string        `yaml:"metrics_listen"`
	// MetricsWebConfig is Prometheus' exporter-toolkit web config (TLS, basic auth).
	MetricsWebConfig string `yaml:"metrics_web_config"`
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
	// Replicas is how many NATS servers hold each stream and bucket.
	Replicas int             `yaml:"replicas"`
	Cluster  clusterSettings `yaml:"cluster"`
	Local    localSettings   `yaml:"local"`
	SSH      sshSettings     `yaml:"ssh"`
	Slurm    slurmSettings   `yaml:"slurm"`
	Cloud    cloudSettings   `yaml:"cloud"`
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

// flagAliases are the singular names of repeatable flags: --ssh-host is --ssh-hosts.
var flagAliases = map[string]string{"ssh-host": "ssh-hosts", "ssh-key": "ssh-keys", "cluster-route": "cluster-routes",
	"slurm-sbatch-arg": "slurm-sbatch-args", "slurm-srun-arg": "slurm-srun-args",
	"cloud-subnet": "cloud-subnets", "cloud-security-group": "cloud-security-groups", "cloud-type": "cloud-types", "cloud-zone": "cloud-zones"}

// normalizeFlag lets a flag be given by its alias.
func normalizeFlag(_ *pflag.FlagSet, name string) pflag.NormalizedName {
	if n, ok := flagAliases[name]; ok {
		return pflag.NormalizedName(n)
	}
	return pflag.NormalizedName(name)
}

// bindFlags registers a flag for every setting, bound to s, and sets s to the
// defaults: the flags' defaults are the built-in defaults.
func bindFlags(f *pflag.FlagSet, s *settings) {
	f.StringVar(&s.StateDir, "state-dir", api.DefaultStateDir(), "state directory: JetStream store, socket, checkpoints")
	f.StringVar(&s.NATS, "nats", "", "join this NATS server instead of embedding one")
	f.StringVar(&s.Listen, "listen", api.DefaultListen, "address of the embedded NATS server (port 0: any free port)")
	f.StringVar(&s.Socket, "socket", "", "telemetry socket (default <state-dir>/scavd.sock)")
	f.StringVar(&s.Node, "node", "", "node name (default the host name)")
	f.DurationVar(&s.StepRetention, "step-retention", telemetry.DefaultRetention.StepMaxAge, "how long step records are kept (reloadable)")
	f.StringVar(&s.Launcher, "launcher", "local", "built-in launcher that starts the workers: "+strings.Join(builtin.Names(), ", "))
	f.StringVar(&s.Plugin, "plugin", "", "an external launcher plugin binary to start the workers with (needs --plugin-sha256)")
	f.StringVar(&s.PluginSHA256, "plugin-sha256", "", "the sha256 of the --plugin binary, in hex: it is not run unless it matches")
	f.StringVar(&s.LogLevel, "log-level", "info", "log level: debug, info, warn, error (reloadable)")
	f.StringVar(&s.LogFormat, "log-format", "console", "log format: console or json")
	f.BoolVar(&s.ResumeJobs, "resume-jobs", true, "resume, from their checkpoints, the jobs this daemon stops when it stops, once it starts again")
	f.DurationVar(&s.NodeSampleEvery, "node-sample-every", daemon.DefaultNodeSampleEvery, "how often to sample and publish the node's GPUs and host (0: never)")
	f.StringVar(&s.GPUSource, "gpu-source", "auto", "how to read GPUs: auto (NVML, else nvidia-smi, else none), nvml, nvidia-smi or none")
	f.StringVar(&s.MetricsListen, "metrics-listen", daemon.DefaultMetricsListen, "address of the Prometheus /metrics endpoint (empty: none; port 0: any free port)")
	f.StringVar(&s.MetricsWebConfig, "metrics-web-config", "", "Prometheus exporter-toolkit web config for /metrics (tls_server_config, basic_auth_users); required off loopback")
	f.StringVar(&s.NATSKey, "nats-key", "", "nkey seed file (mode 0600) scavd authenticates to NATS with; the daemons of a cluster or of an external server share one (default <state-dir>/nats.nk, made on the first start)")
	f.StringVar(&s.NATSTLSCert, "nats-tls-cert", "", "TLS certificate of the embedded NATS server's client port; required with a listen address off loopback")
	f.StringVar(&s.NATSTLSKey, "nats-tls-key", "", "TLS key of the embedded NATS server's client port")
	f.StringVar(&s.NATSTLSCA, "nats-tls-ca", "", "CA certificate that verifies an external (--nats) NATS server")
	f.StringVar(&s.APIListen, "api-listen", "", "also serve the API on TCP at host:port, for scavctl on other machines (needs --api-tokens; TLS off loopback)")
	f.StringVar(&s.APITLSCert, "api-tls-cert", "", "TLS certificate of the TCP API")
	f.StringVar(&s.APITLSKey, "api-tls-key", "", "TLS key of the TCP API")
	f.StringVar(&s.APITokens, "api-tokens", "", `file of "TOKEN USER" lines (mode 0600): the bearer tokens of the TCP API and the users they stand for`)
	f.IntVar(&s.Replicas, "replicas", 1, "copies of each stream and bucket in a NATS cluster (3 keeps them through the loss of any one node)")
	f.StringVar(&s.Cluster.Name, "cluster-name", "scavenger", "the NATS cluster's name, the same on every node")
	f.StringVar(&s.Cluster.Listen, "cluster-listen", "", "join the other nodes' NATS servers: this node's route address, host:port (empty: no cluster)")
	f.StringArrayVar(&s.Cluster.Routes, "cluster-routes", []string{}, "another node's route, nats-route://host:port (repeatable as --cluster-route)")
	f.StringVar(&s.Cluster.TLSCert, "cluster-tls-cert", "", "TLS certificate of the routes (required off loopback)")
	f.StringVar(&s.Cluster.TLSKey, "cluster-tls-key", "", "TLS key of the routes")
	f.StringVar(&s.Cluster.TLSCA, "cluster-tls-ca", "", "CA that verifies the other nodes' route certificates")
	f.IntVar(&s.Local.Slots, "local-slots", 0, "launcher local: the most workers one job may have on this node; larger requests are refused at submit (0: the number of CPUs)")
	f.SetNormalizeFunc(normalizeFlag)
	f.StringArrayVar(&s.SSH.Hosts, "ssh-hosts", []string{}, `launcher ssh: a host, "[user@]addr[:port] [slots=N]", e.g. "10.0.0.5 slots=4" `+
		`or "ubuntu@gpu1:2222,slots=8" (repeatable as --ssh-host; ranks fill the hosts in order, rank 0's host is MASTER_ADDR)`)
	f.StringVar(&s.SSH.Inventory, "ssh-inventory", "", "launcher ssh: a file of hosts, one --ssh-host line each; '#' starts a comment")
	f.StringVar(&s.SSH.User, "ssh-user", "", "launcher ssh: login user of hosts that name none (default root)")
	f.StringArrayVar(&s.SSH.Keys, "ssh-keys", []string{}, "launcher ssh: an unencrypted private key file to log in with (repeatable as --ssh-key)")
	f.BoolVar(&s.SSH.Agent, "ssh-agent", false, "launcher ssh: also use the keys of the agent at $SSH_AUTH_SOCK")
	f.StringArrayVar(&s.SSH.KnownHosts, "ssh-known-hosts", []string{}, "launcher ssh: a known_hosts file the host keys must be in (repeatable; default ~/.ssh/known_hosts)")
	f.BoolVar(&s.SSH.ForwardTelemetry, "ssh-forward-telemetry", true, "launcher ssh: forward the telemetry socket to each host over SSH; "+
		"=false when a scavd runs on every host or they share this one's socket")
	f.StringVar(&s.Slurm.JobID, "slurm-job-id", "", "launcher slurm: run every attempt as an srun step of this allocation, so a relaunch waits in no queue (default $SLURM_JOB_ID; when neither is set, every attempt is submitted with sbatch)")
	f.StringVar(&s.Slurm.Partition, "slurm-partition", "", "launcher slurm: submit to this partition and size jobs by its nodes (default the cluster's default partition)")
	f.DurationVar(&s.Slurm.Grace, "slurm-grace", slurm.DefaultGrace, "launcher slurm: how long before the end of its time Slurm warns a submitted job with SIGUSR1 (sbatch --signal=B:USR1@grace; the workers checkpoint then), and how long the peers of a failed rank get between SIGTERM and SIGKILL")
	f.StringArrayVar(&s.Slurm.SbatchArgs, "slurm-sbatch-args", []string{}, "launcher slurm: an extra sbatch argument for submitted jobs, one per flag (repeatable as --slurm-sbatch-arg, e.g. --slurm-sbatch-arg=--account=ml --slurm-sbatch-arg=--time=4:00:00)")
	f.StringArrayVar(&s.Slurm.SrunArgs, "slurm-srun-args", []string{}, "launcher slurm: an extra srun argument for every job step, one per flag (repeatable as --slurm-srun-arg, e.g. --slurm-srun-arg=--gpus-per-task=1)")
	f.StringVar(&s.Slurm.WorkDir, "slurm-work-dir", "", "launcher slurm: where batch scripts and job output files go; must be shared with the compute nodes (default $TMPDIR/scavenger-slurm)")
	f.DurationVar(&s.Slurm.Poll, "slurm-poll", slurm.DefaultPollInterval, "launcher slurm: how often a submitted job's state and output are read")
	bindCloudFlags(f, &s.Cloud)
}

// bindCloudFlags registers the flags of the cloud: group.
func bindCloudFlags(f *pflag.FlagSet, c *cloudSettings) {
	f.StringVar(&c.Provider, "cloud-provider", "local", "launcher cloudvm: where instances come from: local (namespace machines on this host; root) or aws (EC2)")
	f.StringVar(&c.StateDir, "cloud-state-dir", "", "launcher cloudvm: the pools' keys and charges, and the local cloud (default <state-dir>/cloud)")
	f.StringVar(&c.Catalog, "cloud-catalog", "", "launcher cloudvm: provider local: a local cloud catalog (types, prices) instead of the embedded one; aws: a price catalog extending the embedded one (on-demand prices)")
	f.StringSliceVar(&c.Types, "cloud-types", []string{}, "launcher cloudvm: the instance types jobs may use, the first the default (default: every type of a local cloud; required for aws)")
	f.StringSliceVar(&c.Zones, "cloud-zones", []string{}, "launcher cloudvm: the zones to use, in failover order (default: the provider's; required for aws)")
	f.StringVar(&c.Market, "cloud-market", "on-demand", "launcher cloudvm: the market of a job that names none: on-demand or spot")
	f.StringVar(&c.Region, "cloud-region", "", "launcher cloudvm, aws: the region (default: the SDK's, from AWS_REGION or the shared config)")
	f.StringArrayVar(&c.Subnets, "cloud-subnets", []string{}, "launcher cloudvm, aws: the subnet of a zone, zone=subnet-id (repeatable as --cloud-subnet; default: the zone's default subnet)")
	f.StringVar(&c.Image, "cloud-image", "", "launcher cloudvm, aws: the AMI the instances boot (sshd, python and the training stack on it); required for aws")
	f.StringVar(&c.Key, "cloud-key", "", "launcher cloudvm, aws: an EC2 key pair to add to the instances (the launcher logs in with its own key)")
	f.StringVar(&c.InstanceProfile, "cloud-instance-profile", "", "launcher cloudvm, aws: the IAM instance profile of the instances")
	f.StringArrayVar(&c.SecurityGroups, "cloud-security-groups", []string{}, "launcher cloudvm, aws: a security group id of the instances; it must let this node reach their SSH port (repeatable as --cloud-security-group)")
	f.StringVar(&c.Endpoint, "cloud-endpoint", "", "launcher cloudvm, aws: the EC2 endpoint URL (default: the region's)")
	f.StringVar(&c.Metadata, "cloud-metadata", "", "launcher cloudvm, aws: the metadata service as the instances reach it (default http://169.254.169.254)")
	f.StringVar(&c.User, "cloud-user", "root", "launcher cloudvm: the login user on the instances (an AMI's default user, e.g. ubuntu, on aws)")
	f.StringVar(&c.Owner, "cloud-owner", "", "launcher cloudvm: this scavd's name in the instances' owner tag; its instances of no running job are terminated (default: the host name and the state directory's name)")
	f.IntVar(&c.MaxInstances, "cloud-max-instances", cloudvm.DefaultMaxInstances, "launcher cloudvm: the most instances one attempt may have")
	f.IntVar(&c.PoolLimit, "cloud-pool-limit", 0, "launcher cloudvm: the most instances a job holds at once, old and new while it changes type (0: twice --cloud-max-instances); beyond it the old are released before the new are provisioned")
	f.DurationVar(&c.IdleRelease, "cloud-idle-release", cloudvm.DefaultIdleRelease, "launcher cloudvm: a job's instances no attempt used for this long are terminated")
	f.DurationVar(&c.Blocklist, "cloud-blocklist", cloudvm.DefaultBlocklist, "launcher cloudvm: how long a type, zone and market that had no capacity or was reclaimed is avoided")
	f.DurationVar(&c.NoticeInterval, "cloud-notice-interval", notice.DefaultInterval, "launcher cloudvm: how often each spot instance's interruption notices are polled")
	f.DurationVar(&c.OrphanTimeout, "cloud-orphan-timeout", provider.DefaultOrphanTimeout, "launcher cloudvm: an instance ends itself once no SSH connection of this scavd has been open for this long (its watchdog: the instances of a scavd gone for good do not run on)")
	f.BoolVar(&c.Rebalance, "cloud-rebalance", false, "launcher cloudvm: also act on a spot instance's rebalance recommendation (an earlier warning than the interruption notice)")
	f.BoolVar(&c.ForwardTelemetry, "cloud-forward-telemetry", true, "launcher cloudvm: forward the telemetry socket to each instance over SSH; =false when the instances share this node's filesystem")
}

// builtinOptions configure the built-in launchers from the settings.
func (s settings) builtinOptions() builtin.Options {
	return builtin.Options{
		LocalSlots: s.Local.Slots,
		SSH: builtin.SSHOptions{Hosts: s.SSH.Hosts, Inventory: s.SSH.Inventory, User: s.SSH.User,
			KeyFiles: s.SSH.Keys, UseAgent: s.SSH.Agent, KnownHosts: s.SSH.KnownHosts, NoTelemetryForward: !s.SSH.ForwardTelemetry},
		Slurm: slurm.Options{JobID: s.Slurm.JobID, Partition: s.Slurm.Partition, Grace: s.Slurm.Grace, SbatchArgs: s.Slurm.SbatchArgs,
			SrunArgs: s.Slurm.SrunArgs, WorkDir: s.Slurm.WorkDir, PollInterval: s.Slurm.Poll},
		Cloud: s.cloudOptions(),
	}
}

// cloudOptions configure the cloudvm launcher from the settings.
func (s settings) cloudOptions() builtin.CloudOptions {
	c := s.Cloud
	dir := c.StateDir
	if dir == "" {
		dir = filepath.Join(s.StateDir, "cloud")
	}
	return builtin.CloudOptions{Provider: c.Provider, StateDir: dir, Catalog: c.Catalog, Types: c.Types, Zones: c.Zones, Market: c.Market,
		Region: c.Region, Subnets: c.Subnets, Image: c.Image, Key: c.Key, InstanceProfile: c.InstanceProfile, SecurityGroups: c.SecurityGroups,
		Endpoint: c.Endpoint, Metadata: c.Metadata, User: c.User, Owner: c.Owner, MaxInstances: c.MaxInstances, PoolLimit: c.PoolLimit, IdleRelease: c.IdleRelease,
		Blocklist: c.Blocklist, NoticeInterval: c.NoticeInterval, OrphanTimeout: c.OrphanTimeout, Rebalance: c.Rebalance, NoTelemetryForward: !c.ForwardTelemetry}
}

// validateCloud checks the cloud: group.
func (s settings) validateCloud(bad func(key, format string, args ...any)) {
	c := s.Cloud
	if !contains([]string{"local", "aws"}, c.Provider) {
		bad("cloud.provider", "%q: use local or aws", c.Provider)
	}
	if c.Market != "on-demand" && c.Market != "spot" {
		bad("cloud.market", "%q: use on-demand or spot", c.Market)
	}
	if c.MaxInstances < 1 {
		bad("cloud.max_instances", "%d: must be positive", c.MaxInstances)
	}
	if c.PoolLimit < 0 || c.PoolLimit > 0 && c.PoolLimit < c.MaxInstances {
		bad("cloud.pool_limit", "%d: 0, or at least max_instances (%d)", c.PoolLimit, c.MaxInstances)
	}
	for key, d := range map[string]time.Duration{"cloud.idle_release": c.IdleRelease, "cloud.blocklist": c.Blocklist, "cloud.notice_interval": c.NoticeInterval,
		"cloud.orphan_timeout": c.OrphanTimeout} {
		if d <= 0 {
			bad(key, "%s: must be positive", d)
		}
	}
	for _, sn := range c.Subnets {
		if z, id, ok := strings.Cut(sn, "="); !ok || z == "" || id == "" {
			bad("cloud.subnets", "%q: want zone=subnet-id", sn)
		}
	}
	if s.Launcher != "cloudvm" || c.Provider != "aws" {
		return
	}
	for key, v := range map[string]int{"cloud.image": len(c.Image), "cloud.types": len(c.Types), "cloud.zones": len(c.Zones)} {
		if v == 0 {
			bad(key, "required with provider aws")
		}
	}
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

// loader reads scavd's settings: defaults, then the config file, then the
// flags given on the command line. It is kept for SIGHUP, which loads again.
type loader struct {
	// path is the config file; empty: none.
	path string
	// optional: a missing file at path is no file (the default path).
	optional bool
	// flags are the values of the flags set on the command line, by name.
	flags map[string][]string
}

// newLoader records which flags of f the user set and where the config file
// is: config when explicit (it must exist; "" is none), else
// DefaultConfigFile when it exists.
func newLoader(f *pflag.FlagSet, config string, explicit bool) loader {
	l := loader{path: config, flags: map[string][]string{}}
	if !explicit {
		l.path, l.optional = DefaultConfigFile, true
	}
	f.Visit(func(fl *pflag.Flag) {
		if _, ok := keyOfFlag[fl.Name]; !ok {
			return // --config, --check-config: not settings
		}
		if sv, ok := fl.Value.(pflag.SliceValue); ok {
			l.flags[fl.Name] = sv.GetSlice()
		} else {
			l.flags[fl.Name] = []string{fl.Value.String()}
		}
	})
	return l
}

// file is the config file this load reads, if any.
func (l loader) file() string {
	if l.optional {
		if _, err := os.Stat(l.path); err != nil {
			return ""
		}
	}
	return l.path
}

// source says where a setting's value came from.
type source string

const (
	fromDefault source = "default"
	fromFile    source = "file"
	fromFlag    source = "flag"
)

// loaded is a load's result: the settings and where each key's value came
// from (with its line, for the file).
type loaded struct {
	settings
	// path is the file read; empty: none.
	path string
	from map[string]source
	line map[string]int
}

// load reads the settings afresh and validates them. The error lists every
// problem found, each naming its key and, for the file, its line.
func (l loader) load() (loaded, error) {
	res := loaded{from: map[string]source{}, line: map[string]int{}}
	fs := pflag.NewFlagSet("scavd", pflag.ContinueOnError)
	bindFlags(fs, &res.settings)
	var errs []error
	res.path = l.file()
	if res.path != "" {
		errs = append(errs, decodeFile(res.path, &res.settings, res.line)...)
		for k := range res.line {
			res.from[k] = fromFile
		}
	}
	names := make([]string, 0, len(l.flags))
	for name := range l.flags {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		v, fl := l.flags[name], fs.Lookup(name)
		var err error
		if sv, ok := fl.Value.(pflag.SliceValue); ok {
			err = sv.Replace(v)
		} else {
			err = fl.Value.Set(v[0])
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("--%s: %w", name, err))
		}
		res.from[keyOfFlag[name]] = fromFlag
	}
	for _, fe := range res.validate() {
		errs = append(errs, res.locate(fe))
	}
	return res, errors.Join(inLineOrder(res.path, errs)...)
}

// inLineOrder puts the problems found in the config file at path first, in
// the order of their lines, and the others (flags) after them as they came.
func inLineOrder(path string, errs []error) []error {
	line := func(err error) int {
		rest, ok := strings.CutPrefix(err.Error(), path+":")
		if !ok || path == "" {
			return math.MaxInt
		}
		n, _, _ := strings.Cut(rest, ":")
		if v, err := strconv.Atoi(n); err == nil {
			return v
		}
		return 0 // the file as a whole
	}
	sort.SliceStable(errs, func(i, j int) bool { return line(errs[i]) < line(errs[j]) })
	return errs
}

// fieldError is a problem with one key's value.
type fieldError struct {
	key string
	err error
}

// locate names where a bad value came from: the file and line, or the flag.
func (r loaded) locate(fe fieldError) error {
	switch r.from[fe.key] {
	case fromFile:
		return fmt.Errorf("%s:%d: %s: %w", r.path, r.line[fe.key], fe.key, fe.err)
	case fromFlag:
		return fmt.Errorf("--%s: %w", flagOfKey(fe.key), fe.err)
	}
	return fmt.Errorf("%s: %w", fe.key, fe.err)
}

// validate checks every setting and returns every problem.
func (s settings) validate() []fieldError {
	var errs []fieldError
	bad := func(key, format string, args ...any) {
		errs = append(errs, fieldError{key, fmt.Errorf(format, args...)})
	}
	if s.StateDir == "" {
		bad("state_dir", "must not be empty")
	}
	if s.NATS != "" {
		for _, u := range strings.Split(s.NATS, ",") {
			p, err := url.Parse(strings.TrimSpace(u))
			if err != nil || p.Host == "" || !map[string]bool{"nats": true, "tls": true, "ws": true, "wss": true}[p.Scheme] {
				bad("nats", "%q is not a NATS URL (nats://host:port, tls://, ws://, wss://; comma-separated for several)", u)
			}
		}
	}
	if _, port, err := net.SplitHostPort(s.Listen); err != nil {
		bad("listen", "%q is not host:port", s.Listen)
	} else if p, err := strconv.Atoi(port); err != nil || p < 0 || p > 65535 {
		bad("listen", "%q: port %q is not 0-65535", s.Listen, port)
	}
	// A unix socket's path fits in sun_path: 108 bytes with the NUL.
	if sock := s.socketPath(); len(sock) > 107 {
		key := "socket"
		if s.Socket == "" {
			key = "state_dir"
		}
		bad(key, "socket path %s is %d bytes, longer than a unix socket allows (107)", sock, len(sock))
	}
	if s.StepRetention <= 0 {
		bad("step_retention", "%s: must be positive", s.StepRetention)
	}
	switch {
	case s.Plugin != "":
		if s.Launcher != "local" {
			bad("launcher", "%q and plugin %q both given: choose one", s.Launcher, s.Plugin)
		}
		if b, err := hex.DecodeString(s.PluginSHA256); err != nil || len(b) != 32 {
			bad("plugin_sha256", "%q is not a sha256 in hex (sha256sum prints it); the plugin is not run without it", s.PluginSHA256)
		}
	default:
		if s.PluginSHA256 != "" {
			bad("plugin_sha256", "given without plugin")
		}
		names := builtin.Names()
		if !contains(names, s.Launcher) {
			bad("launcher", "%q is not a built-in launcher: %s", s.Launcher, strings.Join(names, ", "))
		}
	}
	if _, err := zapcore.ParseLevel(s.LogLevel); err != nil {
		bad("log_level", "%q: use debug, info, warn or error", s.LogLevel)
	}
	if s.LogFormat != "console" && s.LogFormat != "json" {
		bad("log_format", "%q: use console or json", s.LogFormat)
	}
	if s.Launcher != "ssh" && (len(s.SSH.Hosts) > 0 || s.SSH.Inventory != "") {
		bad("launcher", "%q, but ssh hosts are given: they are for --launcher ssh", s.Launcher)
	}
	if s.Slurm.Grace <= 0 {
		bad("slurm.grace", "%s: must be positive", s.Slurm.Grace)
	}
	if s.Slurm.Poll <= 0 {
		bad("slurm.poll", "%s: must be positive", s.Slurm.Poll)
	}
	s.validateCloud(bad)
	if s.NodeSampleEvery < 0 {
		bad("node_sample_every", "%s: must not be negative (0: never)", s.NodeSampleEvery)
	}
	if !contains([]string{"auto", "nvml", "nvidia-smi", "none"}, s.GPUSource) {
		bad("gpu_source", "%q: use auto, nvml, nvidia-smi or none", s.GPUSource)
	}
	if s.MetricsListen != "" {
		if _, _, err := net.SplitHostPort(s.MetricsListen); err != nil {
			bad("metrics_listen", "%q is not host:port (empty: no /metrics)", s.MetricsListen)
		}
	}
	return append(errs, s.validateExposure()...)
}

// validateExposure checks that nothing is served off loopback without TLS
// and authentication (NATS always authenticates; see daemon/nats.go).
func (s settings) validateExposure() []fieldError {
	var errs []fieldError
	bad := func(key, format string, args ...any) {
		errs = append(errs, fieldError{key, fmt.Errorf(format, args...)})
	}
	pair := func(certKey, cert, keyKey, key string) {
		if (cert == "") != (key == "") {
			bad(certKey, "%s and %s go together", certKey, keyKey)
		}
	}
	pair("nats_tls_cert", s.NATSTLSCert, "nats_tls_key", s.NATSTLSKey)
	pair("api_tls_cert", s.APITLSCert, "api_tls_key", s.APITLSKey)
	if _, _, err := net.SplitHostPort(s.Listen); err == nil && s.NATS == "" && s.NATSTLSCert == "" && !apiserver.Loopback(s.Listen) {
		bad("listen", "%s is off loopback: NATS is served there only with TLS (set nats_tls_cert and nats_tls_key)", s.Listen)
	}
	if err := daemon.CheckMetricsListen(s.MetricsListen, s.MetricsWebConfig); err != nil {
		bad("metrics_listen", "%v", err)
	}
	if s.APIListen != "" {
		switch {
		case s.APITokens == "":
			bad("api_listen", "%s needs api_tokens: no endpoint answers an anonymous client", s.APIListen)
		case s.APITLSCert == "" && !apiserver.Loopback(s.APIListen):
			bad("api_listen", "%s is off loopback: the API is served there only with TLS (set api_tls_cert and api_tls_key)", s.APIListen)
		}
	}
	if s.Local.Slots < 0 {
		bad("local.slots", "%d: use a positive number of workers, or 0 for the CPU count", s.Local.Slots)
	}
	if s.Replicas < 1 || s.Replicas > 5 {
		bad("replicas", "%d: use 1 to 5 (3 survives the loss of a node)", s.Replicas)
	}
	if c := s.Cluster; c.Listen != "" {
		pair("cluster.tls_cert", c.TLSCert, "cluster.tls_key", c.TLSKey)
		if c.TLSCert != "" && c.TLSCA == "" {
			bad("cluster.tls_ca", "needed with cluster.tls_cert: the routes verify each other")
		}
		if c.TLSCert == "" && !apiserver.Loopback(c.Listen) {
			bad("cluster.listen", "%s is off loopback: routes run only over TLS (set cluster.tls_cert, tls_key and tls_ca)", c.Listen)
		}
		if s.NATS != "" {
			bad("cluster.listen", "given with nats: a daemon joining an external server embeds none to cluster")
		}
	} else if s.Replicas > 1 && s.NATS == "" {
		bad("replicas", "%d without a cluster: one embedded server holds one copy (set cluster.listen and cluster.routes)", s.Replicas)
	}
	for key, f := range map[string]string{"nats_key": s.NATSKey, "api_tokens": s.APITokens} {
		if st, err := os.Stat(f); f != "" && err == nil && st.Mode().Perm()&0o077 != 0 {
			bad(key, "%s is mode %s: it holds secrets; chmod 600 it", f, st.Mode().Perm())
		}
	}
	return errs
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if x == y {
			return true
		}
	}
	return false
}

// socketPath is the telemetry socket scavd will listen on.
func (s settings) socketPath() string {
	if s.Socket != "" {
		return s.Socket
	}
	return filepath.Join(s.StateDir, "scavd.sock")
}

// daemonConfig is the daemon's part of the settings.
func (s settings) daemonConfig() daemon.Config {
	return daemon.Config{
		StateDir: s.StateDir, NATSURL: s.NATS, Listen: s.Listen, Socket: s.Socket, Node: s.Node,
		Retention: telemetry.Retention{StepMaxAge: s.StepRetention, Replicas: s.Replicas}, ResumeJobs: s.ResumeJobs,
		NodeSampleEvery: s.nodeSampleEvery(), GPUSource: s.GPUSource, MetricsListen: s.MetricsListen,
		MetricsWebConfig: s.MetricsWebConfig, NATSKey: s.NATSKey, NATSTLSCert: s.NATSTLSCert, NATSTLSKey: s.NATSTLSKey,
		NATSTLSCA: s.NATSTLSCA, APIListen: s.APIListen, APITLSCert: s.APITLSCert, APITLSKey: s.APITLSKey, APITokens: s.APITokens,
		Cluster: daemon.Cluster{Name: s.Cluster.Name, Listen: s.Cluster.Listen, Routes: s.Cluster.Routes,
			TLSCert: s.Cluster.TLSCert, TLSKey: s.Cluster.TLSKey, TLSCA: s.Cluster.TLSCA},
	}
}

// nodeSampleEvery is the daemon's value: 0 in the settings is never (-1).
func (s settings) nodeSampleEvery() time.Duration {
	if s.NodeSampleEvery == 0 {
		return -1
	}
	return s.NodeSampleEvery
}

// decodeFile decodes the yaml file at path over s. It records the line of
// each key it sets in lines and returns every problem: syntax, unknown keys
// (with their line), values of the wrong type.
func decodeFile(path string, s *settings, lines map[string]int) []error {
	b, err := os.ReadFile(path)
	if err != nil {
		return []error{fmt.Errorf("read config: %w", err)}
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return []error{fmt.Errorf("%s:%s", path, lineRE.ReplaceAllString(" "+strings.TrimPrefix(err.Error(), "yaml: "), "$1:"))}
	}
	if len(doc.Content) == 0 {
		return nil // an empty file: all defaults
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return []error{fmt.Errorf("%s:%d: want a mapping of keys to values", path, root.Line)}
	}
	errs := checkKeys(path, "", root, reflect.TypeOf(*s), lines)
	if err := root.Decode(s); err != nil {
		var te *yaml.TypeError
		if !errors.As(err, &te) {
			return append(errs, fmt.Errorf("%s: %w", path, err))
		}
		keyAt := map[string]string{}
		for k, n := range lines {
			keyAt[strconv.Itoa(n)] = k
		}
		for _, e := range te.Errors {
			// "line 5: cannot unmarshal ..." -> "<path>:5: step_retention: cannot unmarshal ..."
			if m := lineRE.FindStringSubmatch(e); m != nil && keyAt[m[1]] != "" {
				e = m[1] + ": " + keyAt[m[1]] + ":" + e[len(m[0]):]
			} else {
				e = lineRE.ReplaceAllString(e, "$1:")
			}
			errs = append(errs, fmt.Errorf("%s:%s", path, e))
		}
	}
	return errs
}

var lineRE = regexp.MustCompile(`^ ?line (\d+):`)

var durationType = reflect.TypeOf(time.Duration(0))

// checkKeys reports the keys of the mapping m that t has no field for, by
// their dotted name and line, and records the line of each known key.
func checkKeys(path, prefix string, m *yaml.Node, t reflect.Type, lines map[string]int) []error {
	fields := map[string]reflect.Type{}
	for i := 0; i < t.NumField(); i++ {
		if tag := strings.Split(t.Field(i).Tag.Get("yaml"), ",")[0]; tag != "" && tag != "-" {
			fields[tag] = t.Field(i).Type
		}
	}
	var errs []error
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		key := prefix + k.Value
		ft, ok := fields[k.Value]
		if !ok {
			errs = append(errs, fmt.Errorf("%s:%d: unknown key %q", path, k.Line, key))
			continue
		}
		if _, dup := lines[key]; dup {
			errs = append(errs, fmt.Errorf("%s:%d: key %q given twice", path, k.Line, key))
		}
		lines[key] = k.Line
		if ft.Kind() == reflect.Struct && ft != durationType && v.Kind == yaml.MappingNode {
			errs = append(errs, checkKeys(path, key+".", v, ft, lines)...)
		}
	}
	return errs
}

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

// yamlText writes the effective settings as a config file, each key with a
// comment saying where its value came from; derived values are filled in.
func (r loaded) yamlText() (string, error) {
	doc := &yaml.Node{Kind: yaml.MappingNode}
	nested := map[string]*yaml.Node{}
	for _, kv := range r.keys() {
		parent, name := doc, kv.key
		if i := strings.LastIndex(kv.key, "."); i >= 0 {
			prefix := kv.key[:i]
			if nested[prefix] == nil {
				nested[prefix] = &yaml.Node{Kind: yaml.MappingNode}
				doc.Content = append(doc.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: prefix}, nested[prefix])
			}
			parent, name = nested[prefix], kv.key[i+1:]
		}
		value := kv.value
		if d, ok := value.(time.Duration); ok {
			value = d.String()
		}
		comment := string(fromDefault)
		switch r.from[kv.key] {
		case fromFile:
			comment = fmt.Sprintf("%s:%d", r.path, r.line[kv.key])
		case fromFlag:
			comment = "--" + flagOfKey(kv.key)
		}
		switch {
		case kv.key == "socket" && r.Socket == "":
			value, comment = r.socketPath(), "derived from state_dir"
		case kv.key == "node" && r.Node == "":
			h, _ := os.Hostname()
			value, comment = h, "the host name"
		}
		v := &yaml.Node{}
		if err := v.Encode(value); err != nil {
			return "", fmt.Errorf("encode %s: %w", kv.key, err)
		}
		v.LineComment = comment
		parent.Content = append(parent.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: name}, v)
	}
	b, err := yaml.Marshal(doc)
	if err != nil {
		return "", fmt.Errorf("encode settings: %w", err)
	}
	return string(b), nil
}
