package orchestrator

import (
	"context"
	"slices"

	"github.com/hermes-agent/hermes/internal/auth"
	"github.com/hermes-agent/hermes/internal/errclass"
	orchestratorv1 "github.com/hermes-agent/hermes/proto/hermes/orchestrator/v1"
)

// authorize returns the user a request runs for. The shared interceptor (internal/auth) has
// authenticated the caller and scoped a user principal to its own user — the request's user_id
// is then that user, filled in when the request left it empty — so the request's user is the
// one to act for; operators and services name any user.
func (s *Service) authorize(_ context.Context, requested string) (string, error) {
	return requested, nil
}

// callerName names who made a request, for records such as Turn.cancelled_by: the
// authenticated principal ("user:alice", "operator:ops"), or, when authentication is off or the
// call came without a principal, the user the request names.
func callerName(ctx context.Context, user string) string {
	if p, ok := auth.FromContext(ctx); ok && !p.Anonymous && p.Name != "" {
		return p.Name
	}
	return "user:" + user
}

// checkOptions applies the operator's rules to a turn's options: the model only from the
// operator's list, and the configured system prompt replaced only by an operator or a service.
func (s *Service) checkOptions(ctx context.Context, o *orchestratorv1.TurnOptions) error {
	if m := o.GetModel(); m != "" && !s.modelAllowed(m) {
		return errclass.Errorf(errclass.Denied, "options.model %q is not offered; the operator allows the configured model and --orchestrator.models", clip(m, 128))
	}
	if o.GetReplaceSystemPrompt() && !auth.IsPrivileged(ctx) {
		return errclass.New(errclass.Denied, "options.replace_system_prompt is for operators; a user's system_prompt is added after the configured one", nil)
	}
	return nil
}

func (s *Service) modelAllowed(m string) bool {
	if s.deps.Model != nil && m == s.deps.Model.Model() {
		return true
	}
	return slices.Contains(s.cfg.Models, m) || m == s.cfg.SummaryModel && m != ""
}
