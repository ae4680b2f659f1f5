package mcpgateway

import (
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/hermes-agent/hermes/internal/backoff"
	pb "github.com/hermes-agent/hermes/proto/hermes/mcpgateway/v1"
)

// rejectedBackoff spaces the retries (and warnings) of a stored server this replica refused: an
// allowlist or a spec does not change by itself, so trying every sync interval only repeated
// the same warning every two seconds.
var rejectedBackoff = backoff.Policy{Initial: 10 * time.Second, Max: 10 * time.Minute, Jitter: 0.1}

// rejection is a stored spec that did not connect: when to try it again, and how often it failed.
type rejection struct {
	spec     *pb.ServerSpec
	failures int
	next     time.Time
}

// rejections remembers the stored specs that failed to connect, by name. Only syncStore uses it,
// under the Gateway's addMu.
type rejections map[string]*rejection

// due reports whether spec should be tried now: never tried, changed since, or its back-off over.
func (r rejections) due(spec *pb.ServerSpec, now time.Time) bool {
	rj, ok := r[spec.GetName()]
	return !ok || !proto.Equal(rj.spec, spec) || !now.Before(rj.next)
}

// failed records a failure of spec and returns how many in a row and the pause before the next try.
func (r rejections) failed(spec *pb.ServerSpec, now time.Time) (int, time.Duration) {
	rj, ok := r[spec.GetName()]
	if !ok || !proto.Equal(rj.spec, spec) {
		rj = &rejection{spec: spec}
		r[spec.GetName()] = rj
	}
	wait := rejectedBackoff.Delay(rj.failures)
	rj.failures++
	rj.next = now.Add(wait)
	return rj.failures, wait
}

// keep forgets every rejection but those of the names in want (removed from the store).
func (r rejections) keep(want map[string]*pb.ServerSpec) {
	for name := range r {
		if _, ok := want[name]; !ok {
			delete(r, name)
		}
	}
}
