package daemon

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/daemon/jobs"
	"github.com/scavenger-ml/scavenger/daemon/storecheck"
	"github.com/scavenger-ml/scavenger/telemetry/history"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	zapobs "go.uber.org/zap/zaptest/observer"

	"github.com/scavenger-ml/scavenger/plugins"
	"github.com/scavenger-ml/scavenger/telemetry"
	"github.com/scavenger-ml/scavenger/telemetry/host"
)

type fakeGPUs struct{ gpus []telemetry.GPUStat }

func (f fakeGPUs) Source() string { return "nvml" }
func (f fakeGPUs) Sample(context.Context) ([]telemetry.GPUStat, error) {
	out := make([]telemetry.GPUStat, len(f.gpus))
	for i, g := range f.gpus {
		g.Processes = append([]telemetry.GPUProcess(nil), g.Processes...)
		out[i] = g
	}
	return out, nil
}

type fakeHost struct {
	owners map[int]string
	err    error
}

func (f fakeHost) Sample(_ context.Context, jobs host.Jobs) (telemetry.HostStat, map[int]string, error) {
	return telemetry.HostStat{CPUs: 8, Net: []telemetry.NetDevice{{Name: "eth0", RxBytes: 1000, TxBytes: 2000}, {Name: "ib0", RxBytes: 5, TxBytes: 6}}}, f.owners, f.err
}

type nopPublisher struct{ n int }

func (p *nopPublisher) Publish(string, []byte) error { p.n++; return nil }

func f64(v float64) *float64 { return &v }
func u64(v uint64) *uint64   { return &v }

// api.Job metrics come from the supervisor's state at scrape time, the
// predictions from the last decision that made one. GPU metrics carry the job whose processes use the device, from the host
// collector's process tree; a free device has an empty job label.
func TestGPUMetricsByDeviceAndJob(t *testing.T) {
	gpus := fakeGPUs{[]telemetry.GPUStat{
		{Index: 0, UUID: "GPU-a", Utilization: f64(0.97), MemoryUsedBytes: u64(60 << 30), MemoryTotalBytes: u64(80 << 30), PowerWatts: f64(612.5),
			TemperatureCelsius: f64(63), SMClockHertz: f64(1.98e9), ECCCorrected: u64(2), ECCUncorrected: u64(0), XIDErrors: u64(1),
			Processes: []telemetry.GPUProcess{{PID: 100, MemoryUsedBytes: u64(30 << 30)}, {PID: 101, MemoryUsedBytes: u64(20 << 30)}, {PID: 999}}},
		{Index: 1, UUID: "GPU-b", Utilization: f64(0)},
	}}
	pub := &nopPublisher{}
	n := &nodeSampler{log: zap.NewNop(), pub: pub, node: "gpu01", every: time.Second, gpus: gpus,
		host: fakeHost{owners: map[int]string{100: "cnn-000001", 101: "cnn-000001"}}, jobs: func() []string { return []string{"cnn-000001"} },
		failing: map[string]string{}}
	n.sample(context.Background())
	if pub.n != 2 {
		t.Errorf("%d messages published, want a gpu and a host sample", pub.n)
	}
	g, _ := n.latest()
	if p := g.GPUs[0].Processes; p[0].Job != "cnn-000001" || p[1].Job != "cnn-000001" || p[2].Job != "" {
		t.Errorf("processes %+v: want 100 and 101 in cnn-000001, 999 in no job", p)
	}
	decided := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	loss := 0.75
	st := jobs.Status{Job: api.Job{ID: "cnn-000001", Name: "cnn", State: api.StateRunning, Launcher: "local", Attempt: 2, Phase: api.PhaseOptimised,
		Config: plugins.Config{Workers: 2, GlobalBatch: 64, MachineType: "g5.xlarge"}, Optimize: api.Optimize{Policy: "scavenger"},
		Decisions: []api.Decision{{Time: decided, PredictedS: 3600, PredictedUSD: 2.5}, {Time: decided.Add(time.Minute), Phase: api.PhaseOptimised}}},
		Progress: jobs.Progress{LastStep: 42, StepTime: 0.5, Noise: 1234, Loss: &loss}}
	c := &daemonCollector{node: "gpu01.cluster", perJob: true, running: func() []jobs.Status { return []jobs.Status{st} }, latest: n.latest,
		ingest: func() api.IngestStats { return api.IngestStats{} }}
	want := `
# HELP scavenger_gpu_utilization_ratio Fraction of the last sample period a kernel ran on the GPU.
# TYPE scavenger_gpu_utilization_ratio gauge
scavenger_gpu_utilization_ratio{gpu="0",node="gpu01.cluster",uuid="GPU-a"} 0.97
scavenger_gpu_utilization_ratio{gpu="1",node="gpu01.cluster",uuid="GPU-b"} 0
# HELP scavenger_gpu_job_info A job with processes on the GPU (value 1): join on node and gpu for utilisation per job.
# TYPE scavenger_gpu_job_info gauge
scavenger_gpu_job_info{gpu="0",job_id="cnn-000001",name="cnn",node="gpu01.cluster",uuid="GPU-a"} 1
# HELP scavenger_gpu_job_memory_used_bytes GPU memory held by a job's processes (job_id empty: processes of no job).
# TYPE scavenger_gpu_job_memory_used_bytes gauge
scavenger_gpu_job_memory_used_bytes{gpu="0",job_id="",node="gpu01.cluster",uuid="GPU-a"} 0
scavenger_gpu_job_memory_used_bytes{gpu="0",job_id="cnn-000001",node="gpu01.cluster",uuid="GPU-a"} 5.36870912e+10
# HELP scavenger_gpu_ecc_errors_total Volatile ECC errors since the driver loaded, by type (corrected, uncorrected).
# TYPE scavenger_gpu_ecc_errors_total counter
scavenger_gpu_ecc_errors_total{gpu="0",node="gpu01.cluster",type="corrected",uuid="GPU-a"} 2
scavenger_gpu_ecc_errors_total{gpu="0",node="gpu01.cluster",type="uncorrected",uuid="GPU-a"} 0
# HELP scavenger_gpu_xid_errors_total Critical XID events seen since scavd started (NVML only).
# TYPE scavenger_gpu_xid_errors_total counter
scavenger_gpu_xid_errors_total{gpu="0",node="gpu01.cluster",uuid="GPU-a"} 1
# HELP scavenger_gpu_sm_clock_hertz GPU streaming-multiprocessor clock.
# TYPE scavenger_gpu_sm_clock_hertz gauge
scavenger_gpu_sm_clock_hertz{gpu="0",node="gpu01.cluster",uuid="GPU-a"} 1.98e+09
# HELP scavenger_job_last_step The job's last optimizer step (rank 0); it goes back when an attempt restarts from an older checkpoint.
# TYPE scavenger_job_last_step gauge
scavenger_job_last_step{job_id="cnn-000001",name="cnn",node="gpu01.cluster"} 42
# HELP scavenger_job_steps_per_second The job's step rate (smoothed, current attempt).
# TYPE scavenger_job_steps_per_second gauge
scavenger_job_steps_per_second{job_id="cnn-000001",name="cnn",node="gpu01.cluster"} 2
# HELP scavenger_job_samples_per_second Training samples the job processes per second (global batch times step rate).
# TYPE scavenger_job_samples_per_second gauge
scavenger_job_samples_per_second{job_id="cnn-000001",name="cnn",node="gpu01.cluster"} 128
# HELP scavenger_job_gradient_noise_scale The job's gradient noise scale B_simple, in samples (jobs under a policy).
# TYPE scavenger_job_gradient_noise_scale gauge
scavenger_job_gradient_noise_scale{job_id="cnn-000001",name="cnn",node="gpu01.cluster"} 1234
# HELP scavenger_job_predicted_cost_dollars Cost to finish the job, in US dollars, as its policy last predicted it.
# TYPE scavenger_job_predicted_cost_dollars gauge
scavenger_job_predicted_cost_dollars{job_id="cnn-000001",name="cnn",node="gpu01.cluster"} 2.5
# HELP scavenger_job_info A job running on this node (value 1), with its state, launcher, policy, phase and machine type (empty: not chosen by the launcher).
# TYPE scavenger_job_info gauge
scavenger_job_info{job_id="cnn-000001",launcher="local",machine_type="g5.xlarge",name="cnn",node="gpu01.cluster",phase="optimised",policy="scavenger",state="running"} 1
# HELP scavenger_job_loss The training loss of the job's newest step that reported one (rank 0, current attempt).
# TYPE scavenger_job_loss gauge
scavenger_job_loss{job_id="cnn-000001",name="cnn",node="gpu01.cluster"} 0.75
# HELP scavenger_node_network_received_bytes_total Bytes received on a network interface (loopback left out).
# TYPE scavenger_node_network_received_bytes_total counter
scavenger_node_network_received_bytes_total{device="eth0",node="gpu01.cluster"} 1000
scavenger_node_network_received_bytes_total{device="ib0",node="gpu01.cluster"} 5
# HELP scavenger_node_gpus GPUs on the node, by where they are read from (nvml, nvidia-smi, none).
# TYPE scavenger_node_gpus gauge
scavenger_node_gpus{node="gpu01.cluster",source="nvml"} 2
`
	if err := testutil.GatherAndCompare(newRegistry(c), strings.NewReader(want),
		"scavenger_gpu_utilization_ratio", "scavenger_gpu_job_info", "scavenger_gpu_job_memory_used_bytes", "scavenger_gpu_ecc_errors_total",
		"scavenger_gpu_xid_errors_total", "scavenger_gpu_sm_clock_hertz", "scavenger_node_gpus", "scavenger_node_network_received_bytes_total",
		"scavenger_job_last_step", "scavenger_job_steps_per_second", "scavenger_job_samples_per_second", "scavenger_job_gradient_noise_scale",
		"scavenger_job_predicted_cost_dollars", "scavenger_job_info", "scavenger_job_loss"); err != nil {
		t.Error(err)
	}
	// The decision's hour has long passed: the forecast says the job is
	// past it, and its finish is now (api.Forecast), not in the past.
	families, err := newRegistry(c).Gather()
	if err != nil {
		t.Fatal(err)
	}
	finish := math.NaN()
	for _, mf := range families {
		if mf.GetName() == "scavenger_job_predicted_finish_timestamp_seconds" {
			finish = mf.Metric[0].GetGauge().GetValue()
		}
	}
	if now := float64(time.Now().UnixNano()) / 1e9; !(math.Abs(finish-now) < 60) {
		t.Errorf("predicted finish %v, want about now (%v)", finish, now)
	}
	if problems, err := testutil.GatherAndLint(newRegistry(c)); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", problems, err)
	}
}

// A reading that keeps failing is logged once, and once more when it recovers.
func TestLastingSampleFailureLogsOnce(t *testing.T) {
	core, logs := zapobs.New(zapcore.InfoLevel)
	h := &fakeHost{err: errors.New("read memory: boom")}
	n := &nodeSampler{log: zap.New(core), pub: &nopPublisher{}, node: "n", every: time.Second, gpus: fakeGPUs{}, host: *h,
		jobs: func() []string { return nil }, failing: map[string]string{}}
	for i := 0; i < 5; i++ {
		n.sample(context.Background())
	}
	_, hs := n.latest()
	if hs.Error != "read memory: boom" {
		t.Errorf("sample error %q", hs.Error)
	}
	h.err = nil
	n.host = *h
	n.sample(context.Background())
	n.sample(context.Background())
	if logs.Len() != 2 || logs.All()[0].Level != zapcore.WarnLevel || logs.All()[1].Level != zapcore.InfoLevel {
		t.Errorf("log %v, want one warning and one recovery", logs.All())
	}
}

// TestStallAndStoreMetrics (issue 21): a stalled job's speed is not
// exported as current, its stall and a loss that turned NaN are; so is
// what the daemon found damaged in its store.
func TestStallAndStoreMetrics(t *testing.T) {
	st := jobs.Status{Job: api.Job{ID: "cnn-000001", Name: "cnn", State: api.StateRunning, Attempt: 1, Config: plugins.Config{Workers: 1, GlobalBatch: 64},
		Stalled: &api.Stall{Step: 42}, BadLoss: &api.BadLoss{Attempt: 1, Step: 40, Value: "NaN"}},
		Progress: jobs.Progress{LastStep: 42, StepTime: 0.5}}
	h := &storeHealth{check: storecheck.Report{Streams: []storecheck.Stream{{Name: "SCAV_STEPS", Lost: 31, BadBytes: 4096}}},
		restored: history.Restored{Restored: []string{"a", "b"}}}
	c := &daemonCollector{node: "n1", perJob: true, running: func() []jobs.Status { return []jobs.Status{st} },
		latest: func() (gpus, hosts *telemetry.NodeSample) { return nil, nil }, ingest: func() api.IngestStats { return api.IngestStats{} }, store: h.gauges}
	want := `
# HELP scavenger_job_stalled 1 while the job's ranks have reported no step for its stall timeout (its speed is then not shown), else 0.
# TYPE scavenger_job_stalled gauge
scavenger_job_stalled{job_id="cnn-000001",name="cnn",node="n1"} 1
# HELP scavenger_job_loss_not_finite 1 once the job's loss turned NaN or infinite (current attempt), else 0.
# TYPE scavenger_job_loss_not_finite gauge
scavenger_job_loss_not_finite{job_id="cnn-000001",name="cnn",node="n1"} 1
# HELP scavenger_store_lost_records Records of a stream found unreadable (damaged) when scavd started.
# TYPE scavenger_store_lost_records gauge
scavenger_store_lost_records{node="n1",stream="SCAV_STEPS"} 31
# HELP scavenger_store_restored_jobs Job records restored from their journal when scavd started (the job store lost them, or held older ones).
# TYPE scavenger_store_restored_jobs gauge
scavenger_store_restored_jobs{node="n1"} 2
`
	if err := testutil.GatherAndCompare(newRegistry(c), strings.NewReader(want), "scavenger_job_stalled", "scavenger_job_loss_not_finite",
		"scavenger_job_steps_per_second", "scavenger_store_lost_records", "scavenger_store_restored_jobs"); err != nil {
		t.Error(err)
	}
}

// TestJobCostMetricsTellOneStory: the job's cost series is what every view
// shows (api.Job.CostAt): the bill of a cloud job whatever price is set,
// and for a job without a bill or a price no cost at all, not even its
// decisions' predictions at a placeholder price.
func TestJobCostMetricsTellOneStory(t *testing.T) {
	started := time.Now().Add(-time.Hour)
	decided := time.Now()
	job := func(id string, cost *api.Cost, price float64) jobs.Status {
		return jobs.Status{Job: api.Job{ID: id, Name: "j", State: api.StateRunning, Started: &started, Cost: cost,
			Config: plugins.Config{Workers: 1, GlobalBatch: 32}, Optimize: api.Optimize{Policy: "adaptive", PriceUSDPerHour: price},
			Decisions: []api.Decision{{Time: decided, PredictedS: 600, PredictedUSD: 0.03}}}}
	}
	running := []jobs.Status{job("none-000001", nil, 0), job("priced-000001", nil, 2), job("billed-000001", &api.Cost{USD: 0.00067}, 5)}
	c := &daemonCollector{node: "n", perJob: true, running: func() []jobs.Status { return running },
		latest: func() (*telemetry.NodeSample, *telemetry.NodeSample) { return nil, nil },
		ingest: func() api.IngestStats { return api.IngestStats{} }}
	want := `
# HELP scavenger_job_cost_dollars What the job cost so far, in US dollars, as every view of it says (basis: billed, the bill of the machines its launcher bought; priced, its time at the price set); jobs without either have no series.
# TYPE scavenger_job_cost_dollars gauge
scavenger_job_cost_dollars{basis="billed",job_id="billed-000001",name="j",node="n"} 0.00067
# HELP scavenger_job_predicted_cost_dollars Cost to finish the job, in US dollars, as its policy last predicted it.
# TYPE scavenger_job_predicted_cost_dollars gauge
scavenger_job_predicted_cost_dollars{job_id="billed-000001",name="j",node="n"} 0.03
scavenger_job_predicted_cost_dollars{job_id="priced-000001",name="j",node="n"} 0.03
`
	if err := testutil.GatherAndCompare(newRegistry(c), strings.NewReader(want), "scavenger_job_predicted_cost_dollars"); err != nil {
		t.Error(err)
	}
	g, err := newRegistry(c).Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range g {
		if mf.GetName() != "scavenger_job_cost_dollars" {
			continue
		}
		got := map[string]float64{}
		for _, m := range mf.Metric {
			for _, lp := range m.Label {
				if lp.GetName() == "job_id" {
					got[lp.GetValue()] = m.GetGauge().GetValue()
				}
			}
		}
		if len(got) != 2 || got["billed-000001"] != 0.00067 || math.Abs(got["priced-000001"]-2) > 0.01 {
			t.Errorf("scavenger_job_cost_dollars = %v; want the bill, the hour at $2/h, and nothing for the job without either", got)
		}
		return
	}
	t.Error("no scavenger_job_cost_dollars")
}
