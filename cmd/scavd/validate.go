package main

import (
	"encoding/hex"
	"fmt"
	"net"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap/zapcore"

	"github.com/scavenger-ml/scavenger/daemon"
	"github.com/scavenger-ml/scavenger/daemon/apiserver"
	"github.com/scavenger-ml/scavenger/daemon/dashboard"
	"github.com/scavenger-ml/scavenger/daemon/ingest"
	"github.com/scavenger-ml/scavenger/launchers/builtin"
)

// validate checks the telemetry socket's bounds.
func (t telemetrySettings) validate(bad func(key, format string, args ...any)) {
	for key, v := range map[string]float64{"telemetry.conns": float64(t.Conns), "telemetry.conns_per_user": float64(t.ConnsPerUser),
		"telemetry.conns_per_job": float64(t.ConnsPerJob), "telemetry.step_bytes_per_second": float64(t.StepBytesPerSecond),
		"telemetry.step_burst": float64(t.StepBurst), "telemetry.bad_tokens_per_second": t.BadTokensPerSecond,
		"telemetry.bad_token_burst": t.BadTokenBurst, "telemetry.hello_timeout": t.HelloTimeout.Seconds()} {
		if !(v > 0) {
			bad(key, "%v: must be positive", v)
		}
	}
	if t.IdleTimeout < 2*ingest.KeepaliveEvery {
		bad("telemetry.idle_timeout", "%s: must be at least %s (the python client writes an empty line every %s)", t.IdleTimeout, 2*ingest.KeepaliveEvery, ingest.KeepaliveEvery)
	}
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
	s.Telemetry.validate(bad)
	if s.StopGrace < time.Second || s.StopGrace > time.Hour {
		bad("stop_grace", "%s: use 1s to 1h (a stopping scavd waits that long for its jobs, then kills them)", s.StopGrace)
	}
	if s.StoreMaxBytes < 0 || s.StoreMaxBytes > 0 && s.StoreMaxBytes < 16<<20 {
		bad("store_max_bytes", "%d: use 0 (sized to the state disk) or at least 16777216 (16 MiB)", s.StoreMaxBytes)
	}
	if s.JobRetention <= 0 {
		bad("job_retention", "%s: must be positive (2160h is 90 days)", s.JobRetention)
	}
	if s.JobHistory < 1 {
		bad("job_history", "%d: must be 1 or more", s.JobHistory)
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
		if !slices.Contains(names, s.Launcher) {
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
	if !slices.Contains([]string{"auto", "nvml", "nvidia-smi", "none"}, s.GPUSource) {
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
	for key, v := range map[string]int{"api_limits.max_conns": s.APILimits.MaxConns, "api_limits.conns_per_user": s.APILimits.ConnsPerUser,
		"api_limits.streams_per_user": s.APILimits.StreamsPerUser} {
		if v <= 0 {
			bad(key, "%d: must be positive", v)
		}
	}
	for key, v := range map[string]time.Duration{"api_limits.body_timeout": s.APILimits.BodyTimeout, "api_limits.idle_timeout": s.APILimits.IdleTimeout,
		"api_limits.write_timeout": s.APILimits.WriteTimeout} {
		if v <= 0 {
			bad(key, "%s: must be positive", v)
		}
	}
	if s.OutputReadKiBPerUser < 0 {
		bad("output_read_kib_per_user", "%d: use a positive number of KiB a second, or 0 for no bound", s.OutputReadKiBPerUser)
	}
	if s.OutputMiBPerUser < 0 {
		bad("output_mib_per_user", "%d: use a positive number of MiB, or 0 for no bound", s.OutputMiBPerUser)
	}
	if s.MetricsPerJob != "auto" && s.MetricsPerJob != "on" && s.MetricsPerJob != "off" {
		bad("metrics_per_job", "%q: use auto, on or off", s.MetricsPerJob)
	}
	if err := dashboard.CheckListen(s.DashboardListen, s.APITLSCert, s.APITLSKey); err != nil {
		bad("dashboard_listen", "%v", err)
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

// validateCloud checks the cloud: group.
func (s settings) validateCloud(bad func(key, format string, args ...any)) {
	c := s.Cloud
	if !slices.Contains([]string{"local", "aws", "gce"}, c.Provider) {
		bad("cloud.provider", "%q: use local, aws or gce", c.Provider)
	}
	if c.Provider == "gce" && c.Project == "" {
		bad("cloud.project", "provider gce needs the Google Cloud project")
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
