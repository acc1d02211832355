package daemon

import (
	"context"
	"os"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/scavenger-ml/scavenger/daemon/ingest"
	"github.com/scavenger-ml/scavenger/telemetry"
	"github.com/scavenger-ml/scavenger/telemetry/gpu"
	"github.com/scavenger-ml/scavenger/telemetry/host"
)

// DefaultNodeSampleEvery is how often a daemon samples its node unless told otherwise.
const DefaultNodeSampleEvery = 5 * time.Second

// GPUReader is what the node sampler needs of a GPU collector.
type GPUReader interface {
	Source() string
	Sample(ctx context.Context) ([]telemetry.GPUStat, error)
}

// HostReader is what the node sampler needs of a host collector.
type HostReader interface {
	Sample(ctx context.Context, jobs host.Jobs) (telemetry.HostStat, map[int]string, error)
}

// nodeSampler reads the node's GPUs and host every period, publishes each
// reading on its node subject and keeps the latest for /metrics. Its one
// goroutine is started by start and joined by stop.
type nodeSampler struct {
	log   *zap.Logger
	pub   ingest.Publisher
	node  string // as it appears in subjects
	every time.Duration
	gpus  GPUReader
	host  HostReader
	jobs  func() []string // the jobs running here

	mu       sync.Mutex
	lastGPU  *telemetry.NodeSample
	lastHost *telemetry.NodeSample
	failing  map[string]string // kind -> the error last logged, so that a lasting failure is logged once

	cancel context.CancelFunc
	done   chan struct{}
}

// start samples at once, then every period, until stop or the end of ctx.
func (n *nodeSampler) start(ctx context.Context) {
	ctx, cancel := context.WithCancel(ctx)
	n.cancel, n.done = cancel, make(chan struct{})
	go func() {
		defer close(n.done)
		everyTick(ctx, n.every, n.sample)
	}()
}

// stop ends the sampling goroutine and waits for it. It is idempotent.
func (n *nodeSampler) stop() {
	if n.cancel == nil {
		return
	}
	n.cancel()
	<-n.done
}

// sample takes, publishes and keeps one reading of each kind.
func (n *nodeSampler) sample(parent context.Context) {
	ctx, cancel := context.WithTimeout(parent, max(n.every, time.Second))
	defer cancel()
	jobs := host.Jobs{}
	for _, id := range n.jobs() {
		jobs[id] = nil // found by SCAV_JOB_ID in the workers' environment, and their descendants
	}
	now := time.Now().UTC()
	hs := telemetry.NodeSample{Kind: telemetry.NodeHost, Node: n.node, Time: now}
	h, owners, err := n.host.Sample(ctx, jobs)
	hs.Host = &h
	n.failed(telemetry.NodeHost, err, &hs)
	gs := telemetry.NodeSample{Kind: telemetry.NodeGPU, Node: n.node, Time: now, Source: n.gpus.Source()}
	gs.GPUs, err = n.gpus.Sample(ctx)
	for i := range gs.GPUs {
		for k := range gs.GPUs[i].Processes {
			p := &gs.GPUs[i].Processes[k]
			p.Job = owners[p.PID]
		}
	}
	n.failed(telemetry.NodeGPU, err, &gs)
	if parent.Err() != nil {
		return // stopping: the reading may be cut short
	}
	for _, s := range []*telemetry.NodeSample{&hs, &gs} {
		if err := n.pub.Publish(telemetry.NodeSubject(n.node, s.Kind), s.Encode()); err != nil {
			n.log.Debug("publish node sample", zap.String("kind", s.Kind), zap.Error(err))
		}
	}
	n.mu.Lock()
	n.lastHost, n.lastGPU = &hs, &gs
	n.mu.Unlock()
}

// failed records err in the sample and logs it when it differs from the
// last one logged for kind (and once when the failure clears): a reading
// that fails every period logs once, not every period.
func (n *nodeSampler) failed(kind string, err error, s *telemetry.NodeSample) {
	msg := ""
	if err != nil {
		msg = err.Error()
		s.Error = msg
	}
	n.mu.Lock()
	last := n.failing[kind]
	n.failing[kind] = msg
	n.mu.Unlock()
	switch {
	case msg == last:
	case msg == "":
		n.log.Info("node sample readable again", zap.String("kind", kind))
	default:
		n.log.Warn("node sample incomplete", zap.String("kind", kind), zap.Error(err))
	}
}

// latest returns the last readings (nil before the first).
func (n *nodeSampler) latest() (gpus, hosts *telemetry.NodeSample) {
	if n == nil {
		return nil, nil
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.lastGPU, n.lastHost
}

// startNodeSampler opens the collectors and starts sampling every period.
// owner names the uid whose processes may claim a job by its environment
// (host.Collector.Owner).
func startNodeSampler(ctx context.Context, node string, every time.Duration, gpuSource string, pub ingest.Publisher, jobs func() []string,
	owner func(job string) (uint32, bool), log *zap.Logger) (*nodeSampler, func() error, error) {
	g, err := gpu.Open(ctx, gpuSource, log)
	if err != nil {
		return nil, nil, err
	}
	hc := host.New()
	hc.Owner = owner
	n := &nodeSampler{
		log: log, pub: pub, node: telemetry.SubjectNode(node), every: every, gpus: g, host: hc, jobs: jobs,
		failing: map[string]string{},
	}
	n.start(ctx)
	return n, g.Close, nil
}

// jobOwner is the uid of the owner of job id, running here (the daemon's
// own for a job of no owner).
func (d *Daemon) jobOwner(id string) (uint32, bool) {
	o, ok := d.jobs.RunningOwner(id)
	switch {
	case !ok:
		return 0, false
	case o != nil:
		return o.UID, true
	}
	return uint32(os.Geteuid()), true
}
