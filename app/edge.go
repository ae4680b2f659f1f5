package app

import (
	"google.golang.org/grpc"

	"github.com/hermes-agent/hermes/internal/edge"
	memoryv1 "github.com/hermes-agent/hermes/proto/hermes/memory/v1"
	sessionv1 "github.com/hermes-agent/hermes/proto/hermes/session/v1"
)

// initEdge makes the orchestrator's process the front door of its layout (internal/edge): the
// session and memory services that run in other processes are served here too, their
// user-facing RPCs forwarded with this process's service identity after the policy table has
// authorized the caller. Users then reach sessions, turns and memories at the one address they
// reach the orchestrator at, over gRPC and the HTTP API, while session and memory accept only
// Hermes' own services. The forwarded services' health here is the forwarder's own: tying it
// to the services behind would take every edge pod out of its Service's endpoints when one of
// them is down, turning UNAVAILABLE answers into refused connections.
//
// It is the orchestrator's process rather than a target of its own: the orchestrator is already
// the one pod users reach (optional client certificates, API keys, the public NetworkPolicy, the
// egress to session and memory), so the front door needs no new Deployment, certificate or
// policy; turns — the bulk of the traffic, a server stream with elicitation answers — are served
// where they run instead of through one more proxy hop; and a user who may run turns here can
// create the session first. The forwarded calls are small unary ones that scale with the
// orchestrator's pods.
func (a *App) initEdge() error {
	for _, s := range []struct {
		target string
		desc   *grpc.ServiceDesc
	}{
		{TargetSession, &sessionv1.SessionService_ServiceDesc},
		{TargetMemory, &memoryv1.MemoryService_ServiceDesc},
	} {
		if a.targets[s.target] {
			continue // served by this process itself
		}
		conn, err := a.Conn(s.target)
		if err != nil {
			a.log.Warn("edge: not serving "+s.desc.ServiceName, "reason", err)
			continue
		}
		fwd, err := edge.New(s.desc, conn, a.log.With("component", "edge"))
		if err != nil {
			return err
		}
		a.srv.Register(fwd.Desc(), fwd)
		a.edgeOmitted = append(a.edgeOmitted, fwd.Omitted()...)
		a.log.Info("edge: forwarding the user-facing RPCs of "+s.desc.ServiceName, "addr", a.edgeAddr(s.target), "methods", len(fwd.Forwarded()))
	}
	return nil
}

func (a *App) edgeAddr(target string) string {
	if target == TargetSession {
		return a.cfg.SessionAddr
	}
	return a.cfg.MemoryAddr
}
