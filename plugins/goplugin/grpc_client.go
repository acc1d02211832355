package goplugin

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/scavenger-ml/scavenger/plugins"
	pb "github.com/scavenger-ml/scavenger/plugins/proto"
)

// nameTimeout bounds the Name call made when a plugin is dispensed.
const nameTimeout = 10 * time.Second

// grpcLauncher is a Launcher served by a plugin: the host side of the
// transport. Every call goes to the plugin; errors come back through
// fromStatus, so they wrap the contract's sentinels.
type grpcLauncher struct {
	client pb.LauncherClient
	name   string
	logger *zap.Logger

	// ctx is the client's lifetime: it ends when the plugin exits or close
	// is called, and with it every attempt's streams and waiters.
	ctx    context.Context
	cancel context.CancelFunc
	// mu guards closed and the adding of goroutines to wg, which joins
	// the goroutines of every handle.
	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup
}

var (
	_ plugins.Launcher  = (*grpcLauncher)(nil)
	_ plugins.Recoverer = (*grpcLauncher)(nil)
)

// newGRPCLauncher asks the plugin its name and returns the launcher. ctx is
// the lifetime of the connection (go-plugin ends it when the plugin exits).
func newGRPCLauncher(ctx context.Context, conn grpc.ClientConnInterface, logger *zap.Logger) (*grpcLauncher, error) {
	c := pb.NewLauncherClient(conn)
	nctx, cancel := context.WithTimeout(ctx, nameTimeout)
	defer cancel()
	resp, err := c.Name(nctx, &pb.NameRequest{})
	if err != nil {
		return nil, fmt.Errorf("launcher plugin name: %w", fromStatus(err))
	}
	lctx, lcancel := context.WithCancel(ctx)
	return &grpcLauncher{
		client: c, name: resp.GetName(), logger: logger.Named(resp.GetName()),
		ctx: lctx, cancel: lcancel,
	}, nil
}

// close ends every attempt's streams and waiters (not the attempts: they
// belong to the plugin) and joins their goroutines.
func (c *grpcLauncher) close() {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	c.cancel()
	c.wg.Wait()
}

// Name returns the plugin's launcher name.
func (c *grpcLauncher) Name() string { return c.name }

// Capabilities asks the plugin.
func (c *grpcLauncher) Capabilities(ctx context.Context) (plugins.Capabilities, error) {
	resp, err := c.client.Capabilities(ctx, &pb.CapabilitiesRequest{})
	if err != nil {
		return plugins.Capabilities{}, fmt.Errorf("launcher plugin %s: capabilities: %w", c.name, fromStatus(err))
	}
	return plugins.Capabilities{MaxWorkers: int(resp.GetMaxWorkers()), Hosts: resp.GetHosts(), MachineTypes: resp.GetMachineTypes(),
		RunAs: resp.GetRunAs(), Offers: offersFromProto(resp.GetOffers())}, nil
}

// Start starts the attempt in the plugin and returns once the plugin has
// reported it started; ctx bounds only that. The output stream and the wait
// for the result then run until the attempt ends or the launcher is closed.
func (c *grpcLauncher) Start(ctx context.Context, spec plugins.AttemptSpec) (plugins.Handle, error) {
	h, err := c.attach(ctx, spec.JobID, spec.Attempt, spec.Output, func(sctx context.Context) (pb.Launcher_StartClient, error) {
		return c.client.Start(sctx, &pb.StartRequest{Spec: specToProto(spec)})
	})
	if err != nil {
		return nil, fmt.Errorf("launcher plugin %s: start job %s attempt %d: %w", c.name, spec.JobID, spec.Attempt, err)
	}
	return h, nil
}

// Recover asks the plugin to reattach to an attempt it started before a
// daemon restart; a plugin whose launcher cannot answers ErrUnsupported.
func (c *grpcLauncher) Recover(ctx context.Context, spec plugins.RecoverSpec) (plugins.Handle, error) {
	h, err := c.attach(ctx, spec.JobID, spec.Attempt, spec.Output, func(sctx context.Context) (pb.Launcher_StartClient, error) {
		return c.client.Recover(sctx, &pb.RecoverRequest{HandleId: spec.HandleID, JobId: spec.JobID, Attempt: int64(spec.Attempt), WantOutput: spec.Output != nil})
	})
	if err != nil {
		return nil, fmt.Errorf("launcher plugin %s: recover job %s attempt %d (%s): %w", c.name, spec.JobID, spec.Attempt, spec.HandleID, err)
	}
	return h, nil
}

// attach opens an attempt's event stream, waits for its Started message and
// returns the handle whose goroutines deliver the output and the result.
func (c *grpcLauncher) attach(ctx context.Context, jobID string, attempt int, output plugins.OutputFunc, open func(context.Context) (pb.Launcher_StartClient, error)) (plugins.Handle, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if c.ctx.Err() != nil {
		return nil, plugins.ErrPluginUnavailable
	}
	sctx, cancel := context.WithCancel(c.ctx)
	stream, err := open(sctx)
	if err != nil {
		cancel()
		return nil, fromStatus(err)
	}
	type first struct {
		ev  *pb.StartEvent
		err error
	}
	ch := make(chan first, 1)
	go func() {
		ev, err := stream.Recv()
		ch <- first{ev, err}
	}()
	var f first
	select {
	case f = <-ch:
	case <-ctx.Done():
		cancel() // the plugin stops an attempt it could not report
		<-ch
		return nil, ctx.Err()
	}
	if f.err != nil {
		cancel()
		return nil, c.transportErr(f.err)
	}
	started := f.ev.GetStarted()
	if started == nil {
		cancel()
		return nil, errors.New("protocol error: first message is not Started")
	}
	h := &grpcHandle{
		c: c, id: started.GetHandleId(), jobID: jobID, attempt: attempt,
		done: make(chan struct{}),
	}
	outputDone := make(chan struct{})
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		cancel()
		return nil, plugins.ErrPluginUnavailable
	}
	c.wg.Go(func() {
		defer close(outputDone)
		h.handleOutput(stream, output)
	})
	c.wg.Go(func() {
		defer cancel()
		h.handleWait(outputDone)
	})
	return h, nil
}

// transportErr is fromStatus, except that an error caused by the end of the
// launcher's lifetime is ErrPluginUnavailable.
func (c *grpcLauncher) transportErr(err error) error {
	if err == nil {
		return nil
	}
	if c.ctx.Err() != nil {
		return fmt.Errorf("%w: %w", plugins.ErrPluginUnavailable, fromStatus(err))
	}
	return fromStatus(err)
}

// grpcHandle is an attempt started by a plugin. One goroutine delivers its
// output, another waits for its result; done is closed when both are over.
type grpcHandle struct {
	c       *grpcLauncher
	id      string
	jobID   string
	attempt int

	done   chan struct{}
	result plugins.Result // final once done is closed
	err    error          // set instead of result when the wait failed
}

var _ plugins.Handle = (*grpcHandle)(nil)

// handleOutput delivers the output lines of the Start stream until it ends.
func (h *grpcHandle) handleOutput(stream pb.Launcher_StartClient, out plugins.OutputFunc) {
	for {
		ev, err := stream.Recv()
		if err != nil {
			return // io.EOF once the attempt has finished; else the wait reports it
		}
		if o := ev.GetOutput(); o != nil && out != nil {
			out(int(o.GetRank()), plugins.Stream(o.GetStream()), o.GetLine())
		}
	}
}

// handleWait waits for the attempt's result and, once all its output has
// been delivered, publishes it.
func (h *grpcHandle) handleWait(outputDone <-chan struct{}) {
	defer close(h.done)
	resp, err := h.c.client.Wait(h.c.ctx, &pb.WaitRequest{HandleId: h.id})
	<-outputDone
	if err != nil {
		h.err = fmt.Errorf("launcher plugin %s: wait for job %s attempt %d: %w", h.c.name, h.jobID, h.attempt, h.c.transportErr(err))
		return
	}
	h.result = resultFromProto(resp)
}

// ID returns the plugin's id of the attempt.
func (h *grpcHandle) ID() string { return h.id }

// Wait returns the attempt's result once it has finished and all its
// output has been delivered; every call gets the same result.
func (h *grpcHandle) Wait(ctx context.Context) (plugins.Result, error) {
	select {
	case <-h.done:
		if h.err != nil {
			return plugins.Result{}, h.err
		}
		r := h.result
		r.Ranks = slices.Clone(r.Ranks)
		return r, nil
	case <-ctx.Done():
		return plugins.Result{}, fmt.Errorf("wait for job %s attempt %d: %w", h.jobID, h.attempt, ctx.Err())
	}
}

func (h *grpcHandle) finished() bool {
	select {
	case <-h.done:
		return true
	default:
		return false
	}
}

// Signal asks the plugin to signal the attempt's workers.
func (h *grpcHandle) Signal(ctx context.Context, sig syscall.Signal) error {
	op := func(err error) error {
		return fmt.Errorf("launcher plugin %s: signal %d to job %s attempt %d: %w", h.c.name, sig, h.jobID, h.attempt, err)
	}
	if h.finished() {
		return op(plugins.ErrFinished)
	}
	_, err := h.c.client.Signal(ctx, &pb.SignalRequest{HandleId: h.id, Signal: int64(sig)})
	err = h.c.transportErr(err)
	if errors.Is(err, plugins.ErrUnknownHandle) {
		// The plugin forgot the attempt because its result was taken.
		if err := h.awaitDone(ctx); err != nil {
			return op(err)
		}
		return op(plugins.ErrFinished)
	}
	if err != nil {
		return op(err)
	}
	return nil
}

// Stop asks the plugin to stop the attempt and returns when the attempt has
// finished here too (its result and output delivered).
func (h *grpcHandle) Stop(ctx context.Context, grace time.Duration) error {
	op := func(err error) error {
		return fmt.Errorf("launcher plugin %s: stop job %s attempt %d: %w", h.c.name, h.jobID, h.attempt, err)
	}
	if h.finished() {
		return nil
	}
	_, err := h.c.client.Stop(ctx, &pb.StopRequest{HandleId: h.id, GraceNs: int64(grace)})
	if err = h.c.transportErr(err); err != nil && !errors.Is(err, plugins.ErrUnknownHandle) {
		return op(err)
	}
	if err := h.awaitDone(ctx); err != nil {
		return op(err)
	}
	return nil
}

func (h *grpcHandle) awaitDone(ctx context.Context) error {
	select {
	case <-h.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
