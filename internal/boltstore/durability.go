package boltstore

import (
	"context"

	"google.golang.org/grpc/metadata"
)

// DeferHeader is the gRPC metadata key by which a caller asks that its write to an embedded
// store be made durable by the file's next commit (Group.Defer) rather than by a commit of its
// own. The monolith's orchestrator sends it for a turn's session writes when the session store
// shares its file: the file's next commit (at the latest the turn's final record) commits them,
// so a turn with a tool call costs one or two commits instead of five. Only a privileged caller
// (a Hermes service, an operator) is heard: the session service drops it from users' calls
// (DropDefer), since an acknowledged write of theirs must be on disk. Stores on Redis ignore it.
const DeferHeader = "hermes-durability"

const deferValue = "next-commit"

// DeferOutgoing returns ctx with DeferHeader set on the outgoing call.
func DeferOutgoing(ctx context.Context) context.Context {
	return metadata.AppendToOutgoingContext(ctx, DeferHeader, deferValue)
}

// DeferRequested reports whether the incoming call asked for DeferHeader.
func DeferRequested(ctx context.Context) bool {
	// Only the one key: FromIncomingContext copies the whole metadata, on every write.
	for _, v := range metadata.ValueFromIncomingContext(ctx, DeferHeader) {
		if v == deferValue {
			return true
		}
	}
	return false
}

// DropDefer returns ctx without DeferHeader in its incoming metadata.
func DropDefer(ctx context.Context) context.Context {
	if len(metadata.ValueFromIncomingContext(ctx, DeferHeader)) == 0 {
		return ctx
	}
	md, _ := metadata.FromIncomingContext(ctx) // a copy
	md.Delete(DeferHeader)
	return metadata.NewIncomingContext(ctx, md)
}
