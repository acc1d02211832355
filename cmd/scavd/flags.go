package main

import (
	"strings"

	"github.com/spf13/pflag"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/daemon"
	"github.com/scavenger-ml/scavenger/daemon/apiserver"
	"github.com/scavenger-ml/scavenger/daemon/ingest"
	"github.com/scavenger-ml/scavenger/daemon/jobs"
	"github.com/scavenger-ml/scavenger/launchers/builtin"
	"github.com/scavenger-ml/scavenger/launchers/cloudvm"
	"github.com/scavenger-ml/scavenger/launchers/cloudvm/notice"
	"github.com/scavenger-ml/scavenger/launchers/cloudvm/provider"
	"github.com/scavenger-ml/scavenger/launchers/slurm"
	"github.com/scavenger-ml/scavenger/telemetry/history"
)

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
	f.DurationVar(&s.StepRetention, "step-retention", history.DefaultRetention.StepMaxAge, "how long step records are kept (reloadable)")
	f.IntVar(&s.OutputReadKiBPerUser, "output-read-kib-per-user", jobs.DefaultOutputReadRate>>10, "KiB a second of one user's jobs' output scavd reads (a line counts 1 KiB more than its text); past it their writes wait, as on a slow terminal (0: no bound)")
	f.IntVar(&s.OutputMiBPerUser, "output-mib-per-user", jobs.DefaultOutputPerUser>>20, "MiB of one user's jobs' output the history keeps: past it, their oldest finished jobs' output goes first (0: no bound)")
	f.DurationVar(&s.StopGrace, "stop-grace", daemon.DefaultStopGrace, "how long a stopping scavd (SIGTERM) gives its jobs to checkpoint and exit, each at most its own --grace, before it kills them; keep it under systemd's TimeoutStopSec")
	f.Int64Var(&s.StoreMaxBytes, "store-max-bytes", 0, "the streams' total size limit in bytes (steps, output, node samples, the job journal); 0: half the state disk's space at start, at most their defaults (1.6 GiB)")
	f.DurationVar(&s.JobRetention, "job-retention", jobs.DefaultRetention.MaxAge, "how long a job that ended is kept, with its step records and output (unless scavctl keep marked it)")
	f.IntVar(&s.JobHistory, "job-history", jobs.DefaultRetention.MaxJobs, "the most jobs this node keeps: past it the oldest that ended go, with their step records and output (unless kept)")
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
	f.StringVar(&s.MetricsPerJob, "metrics-per-job", "auto", "the /metrics series that name jobs (ids, names, loss, steps): on, off, or auto (only on a scavd that serves its own user alone: anyone who reaches /metrics reads them)")
	f.StringVar(&s.NATSKey, "nats-key", "", "nkey seed file (mode 0600) scavd authenticates to NATS with; the daemons of a cluster or of an external server share one (default <state-dir>/nats.nk, made on the first start)")
	f.StringVar(&s.NATSTLSCert, "nats-tls-cert", "", "TLS certificate of the embedded NATS server's client port; required with a listen address off loopback")
	f.StringVar(&s.NATSTLSKey, "nats-tls-key", "", "TLS key of the embedded NATS server's client port")
	f.StringVar(&s.NATSTLSCA, "nats-tls-ca", "", "CA certificate that verifies an external (--nats) NATS server")
	f.StringVar(&s.APIListen, "api-listen", "", "also serve the API on TCP at host:port, for scavctl on other machines (needs --api-tokens; TLS off loopback)")
	f.StringVar(&s.APITLSCert, "api-tls-cert", "", "TLS certificate of the TCP API")
	f.StringVar(&s.APITLSKey, "api-tls-key", "", "TLS key of the TCP API")
	f.StringVar(&s.APITokens, "api-tokens", "", `file of "TOKEN USER" lines (mode 0600): the bearer tokens of the TCP API and the users they stand for`)
	lim := apiserver.DefaultLimits()
	f.IntVar(&s.APILimits.MaxConns, "api-limits-max-conns", lim.MaxConns, "API connections open at once on each listener, in all")
	f.IntVar(&s.APILimits.ConnsPerUser, "api-limits-conns-per-user", lim.ConnsPerUser, "API connections one user (one address, on TCP) may hold open; past it they are refused, and counted")
	f.IntVar(&s.APILimits.StreamsPerUser, "api-limits-streams-per-user", lim.StreamsPerUser, "API streams (logs -f, top, attach, steps) one user may hold open")
	f.DurationVar(&s.APILimits.BodyTimeout, "api-limits-body-timeout", lim.BodyTimeout, "how long a request's body may take to arrive")
	f.DurationVar(&s.APILimits.IdleTimeout, "api-limits-idle-timeout", lim.IdleTimeout, "how long a keep-alive API connection may wait for its next request")
	f.DurationVar(&s.APILimits.WriteTimeout, "api-limits-write-timeout", lim.WriteTimeout, "how long a client may take to take a reply or a stream's frame before its connection ends")
	f.StringVar(&s.DashboardListen, "dashboard-listen", "127.0.0.1:0", "address of the web dashboard that scavctl dashboard's one-time login links open, opened at the first link (port 0: any free one; empty: no links; TLS with api_tls_cert off loopback)")
	f.IntVar(&s.Replicas, "replicas", 1, "copies of each stream and bucket in a NATS cluster (3 keeps them through the loss of any one node)")
	f.StringVar(&s.Cluster.Name, "cluster-name", "scavenger", "the NATS cluster's name, the same on every node")
	f.StringVar(&s.Cluster.Listen, "cluster-listen", "", "join the other nodes' NATS servers: this node's route address, host:port (empty: no cluster)")
	f.StringArrayVar(&s.Cluster.Routes, "cluster-routes", []string{}, "another node's route, nats-route://host:port (repeatable as --cluster-route)")
	f.StringVar(&s.Cluster.TLSCert, "cluster-tls-cert", "", "TLS certificate of the routes (required off loopback)")
	f.StringVar(&s.Cluster.TLSKey, "cluster-tls-key", "", "TLS key of the routes")
	f.StringVar(&s.Cluster.TLSCA, "cluster-tls-ca", "", "CA that verifies the other nodes' route certificates")
	f.IntVar(&s.Local.Slots, "local-slots", 0, "launcher local: the most workers one job may have on this node; larger requests are refused at submit (0: the number of CPUs)")
	bindTelemetryFlags(f, &s.Telemetry)
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

// bindTelemetryFlags registers the flags of the telemetry: group.
func bindTelemetryFlags(f *pflag.FlagSet, t *telemetrySettings) {
	d := ingest.DefaultLimits
	f.IntVar(&t.Conns, "telemetry-conns", d.Conns, "telemetry socket: the most worker connections open at once, in all")
	f.IntVar(&t.ConnsPerUser, "telemetry-conns-per-user", d.ConnsPerUser, "telemetry socket: the most connections one user (uid) may hold open; root's are bound by the totals only")
	f.IntVar(&t.ConnsPerJob, "telemetry-conns-per-job", d.ConnsPerJob, "telemetry socket: the most connections bound to one job")
	f.Int64Var(&t.StepBytesPerSecond, "telemetry-step-bytes-per-second", int64(d.StepBytesPerSecond), "telemetry socket: the step-record bytes a second one user's workers may hand to the store (past it they wait; nothing is lost)")
	f.Int64Var(&t.StepBurst, "telemetry-step-burst", int64(d.StepBurst), "telemetry socket: the step-record bytes one user may hand at once above that rate")
	f.Float64Var(&t.BadTokensPerSecond, "telemetry-bad-tokens-per-second", d.BadTokens, "telemetry socket: the hellos with a wrong token a second one user may make (each is logged)")
	f.Float64Var(&t.BadTokenBurst, "telemetry-bad-token-burst", d.BadTokenBurst, "telemetry socket: the wrong tokens one user may make at once; past it their connections are refused until the rate allows")
	f.DurationVar(&t.HelloTimeout, "telemetry-hello-timeout", d.HelloTimeout, "telemetry socket: how long a connection may go without a hello with its attempt's token")
	f.DurationVar(&t.IdleTimeout, "telemetry-idle-timeout", d.IdleTimeout, "telemetry socket: how long a bound connection may be silent (the python client writes an empty line every 30s)")
}

// bindCloudFlags registers the flags of the cloud: group.
func bindCloudFlags(f *pflag.FlagSet, c *cloudSettings) {
	f.StringVar(&c.Provider, "cloud-provider", "local", "launcher cloudvm: where instances come from: local (the local test and development cloud: namespace machines on this host; root), aws (EC2) or gce (Compute Engine)")
	f.StringVar(&c.StateDir, "cloud-state-dir", "", "launcher cloudvm: the pools' keys and charges, and the local cloud (default <state-dir>/cloud)")
	f.StringVar(&c.Catalog, "cloud-catalog", "", "launcher cloudvm: provider local: a local cloud catalog (types, prices) instead of the embedded one; aws: a price catalog extending the embedded one (on-demand prices)")
	f.StringSliceVar(&c.Types, "cloud-types", []string{}, "launcher cloudvm: the instance types jobs may use, the first the default (default: every type of a local cloud; required for aws and gce)")
	f.StringSliceVar(&c.Zones, "cloud-zones", []string{}, "launcher cloudvm: the zones to use, in failover order (default: the provider's; required for aws and gce)")
	f.StringVar(&c.Market, "cloud-market", "on-demand", "launcher cloudvm: the market of a job that names none: on-demand or spot")
	f.StringVar(&c.Region, "cloud-region", "", "launcher cloudvm, aws: the region (default: the SDK's, from AWS_REGION or the shared config)")
	f.StringVar(&c.Project, "cloud-project", "", "launcher cloudvm, gce: the Google Cloud project; required for gce")
	f.BoolVar(&c.PublicIP, "cloud-public-ip", false, "launcher cloudvm, gce: give each instance an external address and reach it there (this scavd outside the instances' network)")
	f.StringArrayVar(&c.Subnets, "cloud-subnets", []string{}, "launcher cloudvm, aws: the subnet of a zone, zone=subnet-id (repeatable as --cloud-subnet; default: the zone's default subnet)")
	f.StringVar(&c.Image, "cloud-image", "", "launcher cloudvm, aws and gce: the image the instances boot (an AMI; a GCE source image), with cloud-init, sshd, python and the training stack; required for aws and gce")
	f.StringVar(&c.Key, "cloud-key", "", "launcher cloudvm, aws: an EC2 key pair to add to the instances (the launcher logs in with its own key)")
	f.StringVar(&c.InstanceProfile, "cloud-instance-profile", "", "launcher cloudvm, aws: the IAM instance profile of the instances")
	f.StringArrayVar(&c.SecurityGroups, "cloud-security-groups", []string{}, "launcher cloudvm, aws: a security group id of the instances; it must let this node reach their SSH port (repeatable as --cloud-security-group)")
	f.StringVar(&c.Endpoint, "cloud-endpoint", "", "launcher cloudvm, aws and gce: the API's endpoint URL (default: the region's EC2 endpoint; compute.googleapis.com)")
	f.StringVar(&c.Metadata, "cloud-metadata", "", "launcher cloudvm, aws and gce: the metadata service as the instances reach it (default http://169.254.169.254; http://metadata.google.internal)")
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
