package goplugin

import (
	"github.com/scavenger-ml/scavenger/plugins"
	pb "github.com/scavenger-ml/scavenger/plugins/proto"
)

// Conversions between the contract's types and their proto messages.

func specToProto(s plugins.AttemptSpec) *pb.AttemptSpec {
	return &pb.AttemptSpec{
		JobId:   s.JobID,
		Attempt: int64(s.Attempt),
		Command: s.Command,
		Dir:     s.Dir,
		Env:     s.Env,
		Config: &pb.Config{
			Workers:     int64(s.Config.Workers),
			GlobalBatch: int64(s.Config.GlobalBatch),
			MachineType: s.Config.MachineType,
			Nodes:       int64(s.Config.Nodes),
			LrScale:     s.Config.LRScale,
			Market:      s.Config.Market,
		},
		Mode:          string(s.Mode),
		Socket:        s.Socket,
		CheckpointDir: s.CheckpointDir,
		Restore:       s.Restore,
		StartStep:     s.StartStep,
		WantOutput:    s.Output != nil,
		User:          runAsToProto(s.User),
		Token:         s.Token,
	}
}

func runAsToProto(u *plugins.RunAs) *pb.RunAs {
	if u == nil {
		return nil
	}
	return &pb.RunAs{Uid: u.UID, Gid: u.GID, Groups: u.Groups, Name: u.Name, Home: u.Home}
}

func runAsFromProto(p *pb.RunAs) *plugins.RunAs {
	if p == nil {
		return nil
	}
	return &plugins.RunAs{UID: p.GetUid(), GID: p.GetGid(), Groups: p.GetGroups(), Name: p.GetName(), Home: p.GetHome()}
}

// specFromProto returns the spec, without Output, and whether output is wanted.
func specFromProto(p *pb.AttemptSpec) (plugins.AttemptSpec, bool) {
	c := p.GetConfig()
	return plugins.AttemptSpec{
		JobID:   p.GetJobId(),
		Attempt: int(p.GetAttempt()),
		Command: p.GetCommand(),
		Dir:     p.GetDir(),
		Env:     p.GetEnv(),
		Config: plugins.Config{
			Workers:     int(c.GetWorkers()),
			GlobalBatch: int(c.GetGlobalBatch()),
			MachineType: c.GetMachineType(),
			Nodes:       int(c.GetNodes()),
			LRScale:     c.GetLrScale(),
			Market:      c.GetMarket(),
		},
		Mode:          plugins.LaunchMode(p.GetMode()),
		Socket:        p.GetSocket(),
		CheckpointDir: p.GetCheckpointDir(),
		Restore:       p.GetRestore(),
		StartStep:     p.GetStartStep(),
		User:          runAsFromProto(p.GetUser()),
		Token:         p.GetToken(),
	}, p.GetWantOutput()
}

func resultToProto(r plugins.Result) *pb.WaitResponse {
	out := &pb.WaitResponse{ExitCode: int64(r.ExitCode), FailedRank: int64(r.FailedRank), Stopped: r.Stopped, LostHosts: r.LostHosts}
	for _, rr := range r.Ranks {
		out.Ranks = append(out.Ranks, &pb.RankResult{
			Rank: int64(rr.Rank), Pid: int64(rr.PID), ExitCode: int64(rr.ExitCode), Signal: rr.Signal, Stopped: rr.Stopped,
		})
	}
	return out
}

func resultFromProto(p *pb.WaitResponse) plugins.Result {
	r := plugins.Result{ExitCode: int(p.GetExitCode()), FailedRank: int(p.GetFailedRank()), Stopped: p.GetStopped(), LostHosts: p.GetLostHosts()}
	for _, rr := range p.GetRanks() {
		r.Ranks = append(r.Ranks, plugins.RankResult{
			Rank: int(rr.GetRank()), PID: int(rr.GetPid()), ExitCode: int(rr.GetExitCode()), Signal: rr.GetSignal(), Stopped: rr.GetStopped(),
		})
	}
	return r
}

func offersToProto(os []plugins.Offer) []*pb.Offer {
	var out []*pb.Offer
	for _, o := range os {
		out = append(out, &pb.Offer{Type: o.Type, Slots: int64(o.Slots), OnDemandUsd: o.OnDemandUSD, SpotUsd: o.SpotUSD, MinimumBillS: o.MinimumBillS})
	}
	return out
}

func offersFromProto(ps []*pb.Offer) []plugins.Offer {
	var out []plugins.Offer
	for _, p := range ps {
		out = append(out, plugins.Offer{Type: p.GetType(), Slots: int(p.GetSlots()), OnDemandUSD: p.GetOnDemandUsd(), SpotUSD: p.GetSpotUsd(), MinimumBillS: p.GetMinimumBillS()})
	}
	return out
}
