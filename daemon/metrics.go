package daemon

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/daemon/apiserver"
	"github.com/scavenger-ml/scavenger/daemon/ingest"
	"github.com/scavenger-ml/scavenger/daemon/jobs"
	"github.com/scavenger-ml/scavenger/internal/connlimit"
	"github.com/scavenger-ml/scavenger/telemetry"
)

// DefaultMetricsListen is where scavd serves /metrics unless told otherwise.
const DefaultMetricsListen = "127.0.0.1:9433"

// startNode starts the node sampler and the /metrics endpoint, as
// configured, and the release of free heap memory.
func (d *Daemon) startNode(ctx context.Context) error {
	d.stopRelease = startMemoryRelease(d.root)
	every := d.cfg.NodeSampleEvery
	if every == 0 {
		every = DefaultNodeSampleEvery
	}
	if every > 0 {
		var err error
		if d.node, d.closeGPUs, err = startNodeSampler(d.root, d.cfg.Node, every, d.cfg.GPUSource, d.nc, d.jobs.Active, d.jobOwner, d.log.Named("node")); err != nil {
			return err
		}
	}
	if d.cfg.MetricsListen != "" {
		var err error
		if d.metrics, err = serveMetrics(d.cfg.MetricsListen, d.cfg.MetricsWebConfig, d.Registry(), d.log.Named("metrics")); err != nil {
			return err
		}
	}
	return nil
}

// stopNode stops the endpoint and the sampler, and releases the GPU collector.
func (d *Daemon) stopNode() error {
	var errs []error
	if d.stopRelease != nil {
		d.stopRelease()
	}
	if d.metrics != nil {
		errs = append(errs, d.metrics.close(d.root))
	}
	if d.node != nil {
		d.node.stop()
	}
	if d.closeGPUs != nil {
		errs = append(errs, d.closeGPUs())
	}
	return errors.Join(errs...)
}

// MetricsAddr is the address /metrics is served on ("" when it is not).
func (d *Daemon) MetricsAddr() string {
	if d.metrics == nil {
		return ""
	}
	return d.metrics.ln.Addr().String()
}

// Registry returns a new Prometheus registry holding the daemon's metrics
// (read from its state at each scrape) and the Go runtime's and process's.
func (d *Daemon) Registry() *prometheus.Registry {
	c := &daemonCollector{node: d.cfg.Node, running: d.jobs.Running, latest: d.node.latest, ingest: d.ingest.Stats, disk: d.disk.gauges,
		store: d.health.gauges, perJob: d.metricsPerJob()}
	if d.api != nil {
		c.api = d.api.Counts
	}
	return newRegistry(c)
}

func newRegistry(c *daemonCollector) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), c)
	return reg
}

// metricsServer serves /metrics over HTTP; its goroutine is joined by close.
type metricsServer struct {
	srv  *http.Server
	ln   net.Listener
	done chan struct{}
}

func serveMetrics(listen, webConfig string, reg *prometheus.Registry, log *zap.Logger) (*metricsServer, error) {
	if err := CheckMetricsListen(listen, webConfig); err != nil {
		return nil, err
	}
	if err := checkPort("metrics listen", listen); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, fmt.Errorf("listen for /metrics on %s: %w", listen, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg, ErrorLog: zap.NewStdLog(log)}))
	m := &metricsServer{
		// A scrape is short: every stage of it is bounded, and so are the
		// connections one address may hold.
		srv: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 10 * time.Second,
			WriteTimeout: 30 * time.Second, IdleTimeout: 30 * time.Second},
		ln: connlimit.New(ln, connlimit.Options{Max: 256, PerKey: 16, Key: func(c net.Conn) string {
			host, _, _ := net.SplitHostPort(c.RemoteAddr().String())
			return host
		}}),
		done: make(chan struct{}),
	}
	go func() {
		defer close(m.done)
		if err := serveWeb(m.ln, m.srv, webConfig); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Warn("serve /metrics", zap.Error(err))
		}
	}()
	log.Info("serving /metrics", zap.String("addr", ln.Addr().String()))
	return m, nil
}

// close shuts the endpoint down, giving scrapes in flight 5s (and ctx).
func (m *metricsServer) close(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	err := m.srv.Shutdown(ctx)
	<-m.done
	if err != nil {
		return fmt.Errorf("shut /metrics down: %w", err)
	}
	return nil
}

var (
	// job_id, not job: Prometheus sets job to the scrape job's name.
	jobLabels = []string{"job_id", "name", "node"}
	gpuLabels = []string{"node", "gpu", "uuid"}

	descJobInfo   = prometheus.NewDesc("scavenger_job_info", "A job running on this node (value 1), with its state, launcher, policy, phase and machine type (empty: not chosen by the launcher).", append(jobLabels, "state", "launcher", "policy", "phase", "machine_type"), nil)
	descSteps     = prometheus.NewDesc("scavenger_job_last_step", "The job's last optimizer step (rank 0); it goes back when an attempt restarts from an older checkpoint.", jobLabels, nil)
	descStepRate  = prometheus.NewDesc("scavenger_job_steps_per_second", "The job's step rate (smoothed, current attempt).", jobLabels, nil)
	descStepTime  = prometheus.NewDesc("scavenger_job_step_duration_seconds", "The job's smoothed time per step (current attempt).", jobLabels, nil)
	descSamples   = prometheus.NewDesc("scavenger_job_samples_per_second", "Training samples the job processes per second (global batch times step rate).", jobLabels, nil)
	descWorkers   = prometheus.NewDesc("scavenger_job_workers", "Workers in the job's current configuration.", jobLabels, nil)
	descBatch     = prometheus.NewDesc("scavenger_job_global_batch_size", "Global batch size of the job's current configuration, in samples.", jobLabels, nil)
	descAttempt   = prometheus.NewDesc("scavenger_job_attempt", "The job's current attempt (launch) number.", jobLabels, nil)
	descLoss      = prometheus.NewDesc("scavenger_job_loss", "The training loss of the job's newest step that reported one (rank 0, current attempt).", jobLabels, nil)
	descNoise     = prometheus.NewDesc("scavenger_job_gradient_noise_scale", "The job's gradient noise scale B_simple, in samples (jobs under a policy).", jobLabels, nil)
	descRemaining = prometheus.NewDesc("scavenger_job_predicted_remaining_seconds", "Time to finish the job: the steps its policy last predicted to the finish, less those made since, at the speed it runs now.", jobLabels, nil)
	descLeftBound = prometheus.NewDesc("scavenger_job_predicted_remaining_seconds_bound", "The 90 % interval of scavenger_job_predicted_remaining_seconds: its low and high end (bound; +Inf above when the job has run past its forecast).", append(jobLabels[:len(jobLabels):len(jobLabels)], "bound"), nil)
	descCostBound = prometheus.NewDesc("scavenger_job_predicted_remaining_cost_dollars_bound", "The 90 % interval of scavenger_job_predicted_remaining_cost_dollars: its low and high end (bound).", append(jobLabels[:len(jobLabels):len(jobLabels)], "bound"), nil)
	descFinish    = prometheus.NewDesc("scavenger_job_predicted_finish_timestamp_seconds", "When the job's policy last predicted it to finish, in Unix seconds.", jobLabels, nil)
	descCost      = prometheus.NewDesc("scavenger_job_predicted_cost_dollars", "Cost to finish the job, in US dollars, as its policy last predicted it.", jobLabels, nil)
	descJobCost   = prometheus.NewDesc("scavenger_job_cost_dollars", "What the job cost so far, in US dollars, as every view of it says (basis: billed, the bill of the machines its launcher bought; priced, its time at the price set); jobs without either have no series.", append(jobLabels, "basis"), nil)
	descCostLeft  = prometheus.NewDesc("scavenger_job_predicted_remaining_cost_dollars", "Cost still to pay to finish the job, in US dollars: its policy's last prediction, less the share of the predicted time gone since.", jobLabels, nil)
	descJobCPU    = prometheus.NewDesc("scavenger_job_cpu_seconds", "CPU time (user+system) of the job's live processes on this node (it drops when a process ends).", jobLabels, nil)
	descJobCores  = prometheus.NewDesc("scavenger_job_cpu_cores", "CPUs the job's processes kept busy over the last node sample.", jobLabels, nil)
	descJobRSS    = prometheus.NewDesc("scavenger_job_resident_memory_bytes", "Resident memory of the job's processes on this node.", jobLabels, nil)
	descStalled   = prometheus.NewDesc("scavenger_job_stalled", "1 while the job's ranks have reported no step for its stall timeout (its speed is then not shown), else 0.", jobLabels, nil)
	descSinceStep = prometheus.NewDesc("scavenger_job_seconds_since_step", "Seconds since the job's newest step record arrived (current attempt).", jobLabels, nil)
	descBadLoss   = prometheus.NewDesc("scavenger_job_loss_not_finite", "1 once the job's loss turned NaN or infinite (current attempt), else 0.", jobLabels, nil)
	descJobProcs  = prometheus.NewDesc("scavenger_job_processes", "Processes of the job on this node (workers and their descendants).", jobLabels, nil)

	descGPUs       = prometheus.NewDesc("scavenger_node_gpus", "GPUs on the node, by where they are read from (nvml, nvidia-smi, none).", []string{"node", "source"}, nil)
	descGPUUtil    = prometheus.NewDesc("scavenger_gpu_utilization_ratio", "Fraction of the last sample period a kernel ran on the GPU.", gpuLabels, nil)
	descGPUJob     = prometheus.NewDesc("scavenger_gpu_job_info", "A job with processes on the GPU (value 1): join on node and gpu for utilisation per job.", append(gpuLabels, "job_id", "name"), nil)
	descGPUMemUtil = prometheus.NewDesc("scavenger_gpu_memory_utilization_ratio", "Fraction of the last sample period the GPU's memory was read or written.", gpuLabels, nil)
	descGPUMemUsed = prometheus.NewDesc("scavenger_gpu_memory_used_bytes", "GPU memory in use.", gpuLabels, nil)
	descGPUMemTot  = prometheus.NewDesc("scavenger_gpu_memory_total_bytes", "GPU memory installed.", gpuLabels, nil)
	descGPUJobMem  = prometheus.NewDesc("scavenger_gpu_job_memory_used_bytes", "GPU memory held by a job's processes (job_id empty: processes of no job).", append(gpuLabels, "job_id"), nil)
	descGPUPower   = prometheus.NewDesc("scavenger_gpu_power_watts", "GPU power draw.", gpuLabels, nil)
	descGPULimit   = prometheus.NewDesc("scavenger_gpu_power_limit_watts", "GPU enforced power limit.", gpuLabels, nil)
	descGPUTemp    = prometheus.NewDesc("scavenger_gpu_temperature_celsius", "GPU core temperature.", gpuLabels, nil)
	descGPUClock   = prometheus.NewDesc("scavenger_gpu_sm_clock_hertz", "GPU streaming-multiprocessor clock.", gpuLabels, nil)
	descGPUECC     = prometheus.NewDesc("scavenger_gpu_ecc_errors_total", "Volatile ECC errors since the driver loaded, by type (corrected, uncorrected).", append(gpuLabels, "type"), nil)
	descGPUXID     = prometheus.NewDesc("scavenger_gpu_xid_errors_total", "Critical XID events seen since scavd started (NVML only).", gpuLabels, nil)

	descCPUs     = prometheus.NewDesc("scavenger_node_cpus", "Logical CPUs of the node.", []string{"node"}, nil)
	descCPUUtil  = prometheus.NewDesc("scavenger_node_cpu_utilization_ratio", "Fraction of the node's CPU time spent busy over the last sample period.", []string{"node"}, nil)
	descLoad1    = prometheus.NewDesc("scavenger_node_load1", "The node's one-minute load average.", []string{"node"}, nil)
	descMemTotal = prometheus.NewDesc("scavenger_node_memory_total_bytes", "The node's memory.", []string{"node"}, nil)
	descMemUsed  = prometheus.NewDesc("scavenger_node_memory_used_bytes", "The node's memory in use.", []string{"node"}, nil)
	descMemAvail = prometheus.NewDesc("scavenger_node_memory_available_bytes", "The node's memory available to new processes.", []string{"node"}, nil)
	descNetRx    = prometheus.NewDesc("scavenger_node_network_received_bytes_total", "Bytes received on a network interface (loopback left out).", []string{"node", "device"}, nil)
	descNetTx    = prometheus.NewDesc("scavenger_node_network_transmitted_bytes_total", "Bytes sent on a network interface (loopback left out).", []string{"node", "device"}, nil)
	descSampleAt = prometheus.NewDesc("scavenger_node_sample_timestamp_seconds", "When the node was last sampled, by kind (gpu, host), in Unix seconds.", []string{"node", "kind"}, nil)

	descIngested = prometheus.NewDesc("scavenger_ingest_records_total", "Step records accepted on the telemetry socket and published.", []string{"node"}, nil)
	descDropped  = prometheus.NewDesc("scavenger_ingest_dropped_records_total", "Telemetry lines dropped, by reason.", []string{"node", "reason"}, nil)
	descConns    = prometheus.NewDesc("scavenger_ingest_connections", "Open worker connections on the telemetry socket.", []string{"node"}, nil)
	descRefused  = prometheus.NewDesc("scavenger_ingest_refused_total", "Telemetry connections refused, ended or held back by a bound (per user, per job, deadlines, ended attempts, step bytes), by reason.", []string{"node", "reason"}, nil)

	descAPIConns   = prometheus.NewDesc("scavenger_api_connections", "Open connections on the API's listeners.", []string{"node"}, nil)
	descAPIStreams = prometheus.NewDesc("scavenger_api_streams", "Open API streams (logs -f, top, attach, steps).", []string{"node"}, nil)
	descAPIRefused = prometheus.NewDesc("scavenger_api_refused_total", "API connections and requests refused past a bound (api_limits), by bound.", []string{"node", "reason"}, nil)

	descDiskFull     = prometheus.NewDesc("scavenger_state_disk_full", "1 while the state disk is (almost) full and the store cannot write, else 0.", []string{"node"}, nil)
	descDiskFree     = prometheus.NewDesc("scavenger_state_disk_free_bytes", "Space left on the state disk (-1: unknown).", []string{"node"}, nil)
	descDiskRestarts = prometheus.NewDesc("scavenger_state_store_restarts_total", "Times the store was restarted in place after the state disk had room again.", []string{"node"}, nil)

	descStoreLost       = prometheus.NewDesc("scavenger_store_lost_records", "Records of a stream found unreadable (damaged) when scavd started.", []string{"node", "stream"}, nil)
	descStoreRestored   = prometheus.NewDesc("scavenger_store_restored_jobs", "Job records restored from their journal when scavd started (the job store lost them, or held older ones).", []string{"node"}, nil)
	descStoreUnreadable = prometheus.NewDesc("scavenger_store_unreadable_jobs", "Job records in the job store that cannot be read, nor restored from the journal.", []string{"node"}, nil)
	descStoreOrphans    = prometheus.NewDesc("scavenger_store_orphan_step_records", "Step records of jobs whose record is lost (counted when scavd started on a damaged store).", []string{"node"}, nil)
)

// daemonCollector reads the daemon's jobs, node samples and ingest counters
// at each scrape.
type daemonCollector struct {
	node    string
	running func() []jobs.Status
	latest  func() (gpus, hosts *telemetry.NodeSample)
	ingest  func() api.IngestStats
	disk    func() (full, free, restarts float64)
	api     func() apiserver.Counts
	// perJob writes the series that name jobs (job ids, names, loss,
	// steps): off on a daemon that serves every user (MetricsPerJob).
	perJob bool
	store  func() (lost []storeGauge, restored, unreadable, orphans float64)
}

// Describe implements prometheus.Collector.
func (c *daemonCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{
		descJobInfo, descSteps, descStepRate, descStepTime, descSamples, descWorkers, descBatch, descAttempt, descNoise,
		descLoss, descRemaining, descLeftBound, descFinish, descCost, descJobCost, descCostLeft, descCostBound, descJobCPU, descJobCores, descJobRSS, descJobProcs,
		descStalled, descSinceStep, descBadLoss,
		descGPUs, descGPUUtil, descGPUJob, descGPUMemUtil, descGPUMemUsed, descGPUMemTot, descGPUJobMem, descGPUPower, descGPULimit,
		descGPUTemp, descGPUClock, descGPUECC, descGPUXID,
		descCPUs, descCPUUtil, descLoad1, descMemTotal, descMemUsed, descMemAvail, descNetRx, descNetTx, descSampleAt,
		descIngested, descDropped, descConns, descRefused, descDiskFull, descDiskFree, descDiskRestarts,
		descAPIConns, descAPIStreams, descAPIRefused,
		descStoreLost, descStoreRestored, descStoreUnreadable, descStoreOrphans,
	} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *daemonCollector) Collect(ch chan<- prometheus.Metric) {
	m := metricSink{ch: ch, node: c.node, perJob: c.perJob}
	names := map[string]string{}
	if c.perJob {
		names = m.jobs(c.running())
	}
	gs, hs := c.latest()
	m.host(hs, names)
	m.gpus(gs, names)
	st := c.ingest()
	m.counter(descIngested, float64(st.Accepted), m.node)
	m.gauge(descConns, float64(st.Connections), m.node)
	for _, reason := range ingest.DropReasons {
		m.counter(descDropped, float64(st.Dropped[reason]), m.node, reason)
	}
	for _, reason := range ingest.RefusedReasons {
		m.counter(descRefused, float64(st.Refused[reason]), m.node, reason)
	}
	if c.disk != nil {
		full, free, restarts := c.disk()
		m.gauge(descDiskFull, full, m.node)
		m.gauge(descDiskFree, free, m.node)
		m.counter(descDiskRestarts, restarts, m.node)
	}
	if c.api != nil {
		a := c.api()
		m.gauge(descAPIConns, float64(a.Conns), m.node)
		m.gauge(descAPIStreams, float64(a.Streams), m.node)
		for reason, n := range a.Refused {
			m.counter(descAPIRefused, float64(n), m.node, reason)
		}
	}
	if c.store != nil {
		lost, restored, unreadable, orphans := c.store()
		for _, g := range lost {
			m.gauge(descStoreLost, g.value, m.node, g.stream)
		}
		m.gauge(descStoreRestored, restored, m.node)
		m.gauge(descStoreUnreadable, unreadable, m.node)
		m.gauge(descStoreOrphans, orphans, m.node)
	}
}

// metricSink writes one scrape's metrics of a node.
type metricSink struct {
	ch     chan<- prometheus.Metric
	node   string
	perJob bool
}

func (m metricSink) gauge(desc *prometheus.Desc, v float64, labels ...string) {
	m.ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, v, labels...)
}

func (m metricSink) counter(desc *prometheus.Desc, v float64, labels ...string) {
	m.ch <- prometheus.MustNewConstMetric(desc, prometheus.CounterValue, v, labels...)
}

// flag is 1 for true, else 0.
func flag(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// opt writes a gauge whose value may be unknown (nil: none).
func (m metricSink) opt(desc *prometheus.Desc, v *float64, labels ...string) {
	if v != nil {
		m.gauge(desc, *v, labels...)
	}
}

// jobs writes the running jobs' series and returns their names by id, for
// the node samples' job labels.
func (m metricSink) jobs(running []jobs.Status) map[string]string {
	names := map[string]string{}
	for _, st := range running {
		j, p := st.Job, st.Progress
		names[j.ID] = j.Name
		l := []string{j.ID, j.Name, m.node}
		m.gauge(descJobInfo, 1, append(l, string(j.State), j.Launcher, j.Optimize.Policy, string(j.Phase), j.Config.MachineType)...)
		m.gauge(descSteps, float64(p.LastStep), l...)
		m.gauge(descStalled, flag(j.Stalled != nil), l...)
		m.gauge(descBadLoss, flag(j.BadLoss != nil && j.BadLoss.Attempt == j.Attempt), l...)
		if !p.LastAt.IsZero() {
			m.gauge(descSinceStep, time.Since(p.LastAt).Seconds(), l...)
		}
		if p.StepTime > 0 && j.Stalled == nil { // a stalled job's last speed is not its speed now
			m.gauge(descStepRate, 1/p.StepTime, l...)
			m.gauge(descStepTime, p.StepTime, l...)
			if j.Config.GlobalBatch > 0 {
				m.gauge(descSamples, float64(j.Config.GlobalBatch)/p.StepTime, l...)
			}
		}
		m.gauge(descWorkers, float64(j.Config.Workers), l...)
		m.gauge(descBatch, float64(j.Config.GlobalBatch), l...)
		m.gauge(descAttempt, float64(j.Attempt), l...)
		if p.Noise > 0 {
			m.gauge(descNoise, p.Noise, l...)
		}
		m.opt(descLoss, p.Loss, l...)
		m.predicted(j, p, l)
	}
	return names
}

// predicted writes what the job cost so far (api.Job.CostAt) and what is
// left of it by the newest decision that predicted its finish
// (api.Forecast): the time and, for a job with a cost, the money, with
// their 90 % intervals; a placeholder price is never shown.
func (m metricSink) predicted(j api.Job, p jobs.Progress, l []string) {
	now := time.Now()
	cost := j.CostAt(now)
	if cost.Basis != api.CostNone {
		m.gauge(descJobCost, cost.USD, append(l, string(cost.Basis))...)
	}
	left, ok := api.Forecast(j.Decisions, p.LastStep, p.StepTime, now)
	if !ok {
		return
	}
	m.gauge(descRemaining, left.S, l...)
	m.gauge(descLeftBound, left.LoS, append(l, "low")...)
	m.gauge(descLeftBound, left.HiS, append(l, "high")...)
	m.gauge(descFinish, float64(now.UnixNano())/1e9+left.S, l...)
	if cost.Basis == api.CostNone {
		return
	}
	for i := len(j.Decisions) - 1; i >= 0; i-- {
		if dec := j.Decisions[i]; dec.PredictedS > 0 {
			if dec.PredictedUSD > 0 {
				m.gauge(descCost, dec.PredictedUSD, l...)
				m.gauge(descCostLeft, left.USD, l...)
				m.gauge(descCostBound, left.LoUSD, append(l, "low")...)
				m.gauge(descCostBound, left.HiUSD, append(l, "high")...)
			}
			return
		}
	}
}

func unixSeconds(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }
