package goplugin

import (
	"context"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/scavenger-ml/scavenger/plugins"
	pb "github.com/scavenger-ml/scavenger/plugins/proto"
)

// grpcServer serves a Launcher over gRPC: the plugin side of the transport.
// It keeps the handles it started by id until a Wait has returned their
// result (the client keeps the result from then on).
type grpcServer struct {
	pb.UnimplementedLauncherServer
	impl   plugins.Launcher
	logger *zap.Logger

	mu      sync.Mutex
	handles map[string]plugins.Handle
}

func newGRPCServer(impl plugins.Launcher, logger *zap.Logger) *grpcServer {
	return &grpcServer{impl: impl, logger: logger, handles: map[string]plugins.Handle{}}
}

func (s *grpcServer) Name(context.Context, *pb.NameRequest) (*pb.NameResponse, error) {
	return &pb.NameResponse{Name: s.impl.Name()}, nil
}

func (s *grpcServer) Capabilities(ctx context.Context, _ *pb.CapabilitiesRequest) (*pb.CapabilitiesResponse, error) {
	c, err := s.impl.Capabilities(ctx)
	if err != nil {
		return nil, toStatus(err)
	}
	return &pb.CapabilitiesResponse{MaxWorkers: int64(c.MaxWorkers), Hosts: c.Hosts, MachineTypes: c.MachineTypes,
		RunAs: c.RunAs, Offers: offersToProto(c.Offers)}, nil
}

// outputSender sends output lines on a Start stream. Lines that come before
// the Started message are held until it is sent; lines after the stream
// ended are dropped.
type outputSender struct {
	stream pb.Launcher_StartServer

	mu      sync.Mutex
	started bool
	closed  bool
	pending []*pb.StartEvent
}

func (o *outputSender) output(rank int, st plugins.Stream, line string) {
	ev := &pb.StartEvent{Event: &pb.StartEvent_Output{Output: &pb.OutputLine{Rank: int64(rank), Stream: string(st), Line: line}}}
	o.mu.Lock()
	defer o.mu.Unlock()
	switch {
	case o.closed:
	case !o.started:
		o.pending = append(o.pending, ev)
	default:
		if err := o.stream.Send(ev); err != nil {
			o.closed = true // the client went away; the attempt goes on
		}
	}
}

// begin sends Started and the held lines.
func (o *outputSender) begin(id string) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.started = true
	if err := o.stream.Send(&pb.StartEvent{Event: &pb.StartEvent_Started{Started: &pb.Started{HandleId: id}}}); err != nil {
		o.closed = true
		return err
	}
	for _, ev := range o.pending {
		if err := o.stream.Send(ev); err != nil {
			o.closed = true
			return err
		}
	}
	o.pending = nil
	return nil
}

// end stops sending: the stream may not be used once the handler returned.
func (o *outputSender) end() {
	o.mu.Lock()
	o.closed = true
	o.pending = nil
	o.mu.Unlock()
}

// Start starts the attempt and streams its output until it has finished.
// If Started cannot be delivered, the attempt is stopped at once, since no
// client knows of it.
func (s *grpcServer) Start(req *pb.StartRequest, stream pb.Launcher_StartServer) error {
	spec, wantOutput := specFromProto(req.GetSpec())
	return s.serveAttempt(stream, wantOutput, true, func(out plugins.OutputFunc) (plugins.Handle, error) {
		spec.Output = out
		return s.impl.Start(stream.Context(), spec)
	})
}

// Recover reattaches to an attempt the launcher started before a restart
// and streams its output from then on, like Start. A launcher that is not a
// Recoverer answers Unimplemented (ErrUnsupported on the client).
func (s *grpcServer) Recover(req *pb.RecoverRequest, stream pb.Launcher_RecoverServer) error {
	rec, ok := s.impl.(plugins.Recoverer)
	if !ok {
		return status.Errorf(codes.Unimplemented, "launcher %s cannot reattach to attempts: %v", s.impl.Name(), plugins.ErrUnsupported)
	}
	spec := plugins.RecoverSpec{JobID: req.GetJobId(), Attempt: int(req.GetAttempt()), HandleID: req.GetHandleId()}
	return s.serveAttempt(stream, req.GetWantOutput(), false, func(out plugins.OutputFunc) (plugins.Handle, error) {
		spec.Output = out
		return rec.Recover(stream.Context(), spec)
	})
}

// serveAttempt gets a handle from open, reports it with Started, streams the
// attempt's output and returns once the attempt has finished. When the
// client cannot be told, a started attempt (stopUnreported) is stopped at
// once, since no client knows of it; a recovered one is left as it was.
func (s *grpcServer) serveAttempt(stream pb.Launcher_StartServer, wantOutput, stopUnreported bool, open func(plugins.OutputFunc) (plugins.Handle, error)) error {
	ctx := stream.Context()
	send := &outputSender{stream: stream}
	defer send.end()
	var out plugins.OutputFunc
	if wantOutput {
		out = send.output
	}
	h, err := open(out)
	if err != nil {
		return toStatus(err)
	}
	id := h.ID()
	s.mu.Lock()
	s.handles[id] = h
	s.mu.Unlock()
	if err := send.begin(id); err != nil {
		s.forget(id)
		if !stopUnreported {
			return toStatus(err)
		}
		s.logger.Warn("client left before the attempt was reported; stopping it", zap.String("handle", id), zap.Error(err))
		stopCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := h.Stop(stopCtx, 0); err != nil {
			s.logger.Warn("stop unreported attempt", zap.String("handle", id), zap.Error(err))
		}
		return toStatus(err)
	}
	// Every output line has been delivered when Wait returns; if the client
	// went away, the attempt goes on and can still be waited for.
	_, _ = h.Wait(ctx)
	return nil
}

func (s *grpcServer) handle(id string) (plugins.Handle, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h, ok := s.handles[id]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "handle %q: %v", id, plugins.ErrUnknownHandle)
	}
	return h, nil
}

func (s *grpcServer) forget(id string) {
	s.mu.Lock()
	delete(s.handles, id)
	s.mu.Unlock()
}

func (s *grpcServer) Wait(ctx context.Context, req *pb.WaitRequest) (*pb.WaitResponse, error) {
	h, err := s.handle(req.GetHandleId())
	if err != nil {
		return nil, err
	}
	res, err := h.Wait(ctx)
	if err != nil {
		return nil, toStatus(err)
	}
	s.forget(req.GetHandleId())
	return resultToProto(res), nil
}

func (s *grpcServer) Signal(ctx context.Context, req *pb.SignalRequest) (*pb.SignalResponse, error) {
	h, err := s.handle(req.GetHandleId())
	if err != nil {
		return nil, err
	}
	if err := h.Signal(ctx, syscall.Signal(req.GetSignal())); err != nil {
		return nil, toStatus(err)
	}
	return &pb.SignalResponse{}, nil
}

func (s *grpcServer) Stop(ctx context.Context, req *pb.StopRequest) (*pb.StopResponse, error) {
	h, err := s.handle(req.GetHandleId())
	if err != nil {
		return nil, err
	}
	if err := h.Stop(ctx, time.Duration(req.GetGraceNs())); err != nil {
		return nil, toStatus(err)
	}
	return &pb.StopResponse{}, nil
}
