package main

import (
	"path/filepath"
	"time"

	"github.com/scavenger-ml/scavenger/daemon"
	"github.com/scavenger-ml/scavenger/daemon/apiserver"
	"github.com/scavenger-ml/scavenger/daemon/ingest"
	"github.com/scavenger-ml/scavenger/daemon/jobs"
	"github.com/scavenger-ml/scavenger/launchers/builtin"
	"github.com/scavenger-ml/scavenger/launchers/slurm"
	"github.com/scavenger-ml/scavenger/telemetry/history"
)

// socketPath is the telemetry socket scavd will listen on.
func (s settings) socketPath() string {
	if s.Socket != "" {
		return s.Socket
	}
	return filepath.Join(s.StateDir, "scavd.sock")
}

// daemonConfig is the daemon's part of the settings.
func (s settings) daemonConfig() daemon.Config {
	t := s.Telemetry
	return daemon.Config{
		StateDir: s.StateDir, NATSURL: s.NATS, Listen: s.Listen, Socket: s.Socket, Node: s.Node,
		Retention: history.Retention{StepMaxAge: s.StepRetention, Replicas: s.Replicas}, StoreMaxBytes: s.StoreMaxBytes, StopGrace: s.StopGrace, ResumeJobs: s.ResumeJobs,
		OutputPerUser: bound(s.OutputMiBPerUser, 20), OutputReadPerUser: bound(s.OutputReadKiBPerUser, 10),
		JobRetention:    jobs.Retention{MaxAge: s.JobRetention, MaxJobs: s.JobHistory},
		NodeSampleEvery: s.nodeSampleEvery(), GPUSource: s.GPUSource, MetricsListen: s.MetricsListen,
		MetricsWebConfig: s.MetricsWebConfig, MetricsPerJob: s.MetricsPerJob, NATSKey: s.NATSKey, NATSTLSCert: s.NATSTLSCert, NATSTLSKey: s.NATSTLSKey,
		NATSTLSCA: s.NATSTLSCA, APIListen: s.APIListen, APITLSCert: s.APITLSCert, APITLSKey: s.APITLSKey, APITokens: s.APITokens,
		APILimits: apiserver.Limits{MaxConns: s.APILimits.MaxConns, ConnsPerUser: s.APILimits.ConnsPerUser, StreamsPerUser: s.APILimits.StreamsPerUser,
			BodyTimeout: s.APILimits.BodyTimeout, IdleTimeout: s.APILimits.IdleTimeout, WriteTimeout: s.APILimits.WriteTimeout},
		DashboardListen: s.DashboardListen,
		Cluster: daemon.Cluster{Name: s.Cluster.Name, Listen: s.Cluster.Listen, Routes: s.Cluster.Routes,
			TLSCert: s.Cluster.TLSCert, TLSKey: s.Cluster.TLSKey, TLSCA: s.Cluster.TLSCA},
		Telemetry: ingest.Limits{Conns: t.Conns, ConnsPerUser: t.ConnsPerUser, ConnsPerJob: t.ConnsPerJob,
			StepBytesPerSecond: float64(t.StepBytesPerSecond), StepBurst: float64(t.StepBurst), BadTokens: t.BadTokensPerSecond,
			BadTokenBurst: t.BadTokenBurst, HelloTimeout: t.HelloTimeout, IdleTimeout: t.IdleTimeout},
	}
}

// nodeSampleEvery is the daemon's value: 0 in the settings is never (-1).
func (s settings) nodeSampleEvery() time.Duration {
	if s.NodeSampleEvery == 0 {
		return -1
	}
	return s.NodeSampleEvery
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
		Region: c.Region, Project: c.Project, PublicIP: c.PublicIP, Subnets: c.Subnets, Image: c.Image, Key: c.Key, InstanceProfile: c.InstanceProfile, SecurityGroups: c.SecurityGroups,
		Endpoint: c.Endpoint, Metadata: c.Metadata, User: c.User, Owner: c.Owner, MaxInstances: c.MaxInstances, PoolLimit: c.PoolLimit, IdleRelease: c.IdleRelease,
		Blocklist: c.Blocklist, NoticeInterval: c.NoticeInterval, OrphanTimeout: c.OrphanTimeout, Rebalance: c.Rebalance, NoTelemetryForward: !c.ForwardTelemetry}
}

// bound is a setting in units of 1<<shift bytes, in bytes (0: no bound,
// -1 to the jobs' options).
func bound(n int, shift uint) int64 {
	if n == 0 {
		return -1
	}
	return int64(n) << shift
}
