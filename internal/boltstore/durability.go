package boltstore

import (
	"context"

	"google.golang.org/grpc/metadata"
)

// DeferHeader is the gRPC metadata key by which a caller asks that its write to an embedded
// store be made durable by the file's next commit (Group.Defer) rather than by a commit of its
// own. The monolith's orchestrator sends it for a turn's session writes when the session store
// shares its file: the turn's own next write (its RUNNING record, its final record) commits
// them, so a turn with a tool call costs two commits instead of five. Any caller may send it; it
// changes nothing but when that caller's own write reaches the disk (at most the group's delay
// later), and stores on Redis ignore it.
const DeferHeader = "hermes-durability"

const deferValue = "next-commit"

// DeferOutgoing returns ctx with DeferHeader set on the outgoing call.
func DeferOutgoing(ctx context.Context) context.Context {
	return metadata.AppendToOutgoingContext(ctx, DeferHeader, deferValue)
}

// DeferRequested reports whether the incoming call asked for DeferHeader.
func DeferRequested(ctx context.Context) bool {
	md, _ := metadata.FromIncomingContext(ctx)
	for _, v := range md.Get(DeferHeader) {
		if v == deferValue {
			return true
		}
	}
	return false
}
