package mcpgateway

import (
	"os"
	"strings"
	"testing"
)

// conformanceNextScenarios are the client scenarios of the suite's next release
// (0.2.0-alpha.12, the 2026-07-28 specification) the gateway passes with neither FAILURE nor
// WARNING. CONFORMANCE.md lists the ones left out and why.
var conformanceNextScenarios = []string{
	"initialize", "tools_call", "sse-retry", "elicitation-sep1034-client-defaults", "json-schema-ref-no-deref",
	"auth/client-credentials-basic", "auth/client-credentials-jwt",
	"auth/metadata-default", "auth/metadata-var1", "auth/metadata-var2", "auth/metadata-var3", "auth/basic-cimd",
	"auth/scope-from-www-authenticate", "auth/scope-from-scopes-supported", "auth/scope-omitted-when-undefined",
	"auth/scope-step-up", "auth/scope-retry-limit",
	"auth/token-endpoint-auth-basic", "auth/token-endpoint-auth-post", "auth/token-endpoint-auth-none", "auth/pre-registration",
	"auth/2025-03-26-oauth-metadata-backcompat", "auth/2025-03-26-oauth-endpoint-fallback",
	"auth/resource-mismatch", "auth/metadata-issuer-mismatch", "auth/offline-access-scope", "auth/offline-access-not-supported",
	// SEP-837 (application_type), SEP-2352 (a new authorization server), SEP-2468 (iss).
	"auth/authorization-server-migration",
	"auth/iss-supported", "auth/iss-not-advertised", "auth/iss-supported-missing", "auth/iss-wrong-issuer",
	"auth/iss-unexpected", "auth/iss-normalized",
	// SEP-1932 (DPoP), an extension: used where the metadata advertises ES256.
	"auth/dpop", "auth/dpop-nonce",
	// Enterprise-managed authorization (SEP-990, enterprise_oauth) and workload identity
	// federation (http.oauth.assertion_env).
	"auth/enterprise-managed-authorization", "auth/wif-jwt-bearer",
}

// TestConformanceClientNext runs conformanceNextScenarios with the suite's next release
// (installed as conformance-next), the client command being TestConformanceClientHelper as
// in TestConformanceClient. HERMES_CONFORMANCE_NEXT_SCENARIOS=a,b runs a subset.
func TestConformanceClientNext(t *testing.T) {
	if testing.Short() {
		t.Skip("the conformance suite takes a few seconds; skipped with -short")
	}
	scenarios := conformanceNextScenarios
	if s := os.Getenv("HERMES_CONFORMANCE_NEXT_SCENARIOS"); s != "" {
		scenarios = strings.Split(s, ",")
	}
	runConformanceClient(t, "conformance-next", scenarios)
}
