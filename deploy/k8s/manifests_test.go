// Package k8s_test validates offline what `kustomize build` renders for deploy/k8s: every
// overlay and every base is decoded strictly into the Kubernetes API types and checked against
// the deployment policy (probes, resources, autoscaling, disruption budgets, security,
// graceful termination, references, and the binary's own settings).
package k8s_test

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

var (
	hermesDeployments = []string{"hermes-mcpgateway", "hermes-memory", "hermes-orchestrator", "hermes-session", "hermes-tools"}
	backends          = []string{"hermes-nats", "hermes-qdrant", "hermes-redis"}
)

// TestRenderedManifests renders every overlay and base from disk and applies the policy.
func TestRenderedManifests(t *testing.T) {
	// Secrets are never in git outside the dev placeholders: prod expects them created first.
	secrets := map[string]bool{"Secret/hermes-model": true, "Secret/hermes-secrets": true}
	// The base leaves the certificates to components/cert-manager or the operator's PKI.
	certificates := map[string]bool{}
	for _, d := range hermesDeployments {
		certificates["Secret/"+d+"-tls"] = true
	}
	baseExternal := union(secrets, certificates)
	// A single service's base leaves the shared configuration to the aggregate base.
	shared := union(baseExternal, map[string]bool{"ConfigMap/hermes-config": true})

	tests := []struct {
		dir          string
		external     map[string]bool
		pinnedImages bool
		whole        bool // the whole of Hermes: NetworkPolicies and mutual TLS required
		deployments  []string
		statefulSets []string
		extra        func(t *testing.T, r *rendered)
	}{
		{dir: "overlays/dev", pinnedImages: true, whole: true, deployments: hermesDeployments, statefulSets: backends, extra: checkDev},
		{dir: "overlays/prod", external: secrets, pinnedImages: true, whole: true, deployments: hermesDeployments, statefulSets: backends, extra: checkProd},
		{dir: "base", external: baseExternal, whole: true, deployments: hermesDeployments, statefulSets: backends},
		{dir: "base/config"},
		{dir: "base/secrets"},
		{dir: "base/network"},
		{dir: "base/session", external: shared, deployments: []string{"hermes-session"}},
		{dir: "base/tools", external: shared, deployments: []string{"hermes-tools"}},
		{dir: "base/mcpgateway", external: shared, deployments: []string{"hermes-mcpgateway"}},
		{dir: "base/memory", external: shared, deployments: []string{"hermes-memory"}},
		{dir: "base/orchestrator", external: shared, deployments: []string{"hermes-orchestrator"}},
		{dir: "base/nats", external: secrets, statefulSets: []string{"hermes-nats"}},
		{dir: "base/redis", external: secrets, statefulSets: []string{"hermes-redis"}},
		{dir: "base/qdrant", external: secrets, statefulSets: []string{"hermes-qdrant"}},
	}
	for _, tt := range tests {
		t.Run(tt.dir, func(t *testing.T) {
			r, err := renderDisk(tt.dir)
			if err != nil {
				t.Fatalf("%s does not decode strictly into the Kubernetes API types:\n%v", tt.dir, err)
			}
			if diff := cmp.Diff(tt.deployments, r.deploymentNames()); diff != "" {
				t.Errorf("%s: Deployments (-want +got):\n%s", tt.dir, diff)
			}
			if diff := cmp.Diff(tt.statefulSets, r.statefulSetNames()); diff != "" {
				t.Errorf("%s: StatefulSets (-want +got):\n%s", tt.dir, diff)
			}
			pol := policy{settings: newSettings(), external: tt.external, pinnedImages: tt.pinnedImages, whole: tt.whole}
			for _, problem := range pol.check(r) {
				t.Errorf("%s: %s", tt.dir, problem)
			}
			for _, d := range r.deployments {
				if got, want := targetOf(d.Spec.Template.Spec.Containers[0].Args), strings.TrimPrefix(d.Name, "hermes-"); got != want {
					t.Errorf("%s: Deployment/%s runs target %q, want %q", tt.dir, d.Name, got, want)
				}
			}
			if tt.extra != nil {
				tt.extra(t, r)
			}
		})
	}
}

// checkDev: a small cluster starts one pod per service and holds no real secret.
func checkDev(t *testing.T, r *rendered) {
	for _, h := range r.hpas {
		if h.Spec.MinReplicas == nil || *h.Spec.MinReplicas != 1 {
			t.Errorf("overlays/dev: HorizontalPodAutoscaler/%s minReplicas = %v, want 1", h.Name, h.Spec.MinReplicas)
		}
	}
	if !r.namespaces["hermes-dev"] {
		t.Errorf("overlays/dev: Namespace hermes-dev is not in the render")
	}
	if _, ok := r.secrets["hermes-dev/hermes-model"]; !ok {
		t.Errorf("overlays/dev: the placeholder Secret hermes-dev/hermes-model is missing")
	}
}

// checkProd: at least two pods per service, disruption budgets as minAvailable, pods spread
// over nodes, no Secret in the render, and a three-node NATS cluster.
func checkProd(t *testing.T, r *rendered) {
	for _, h := range r.hpas {
		if h.Spec.MinReplicas == nil || *h.Spec.MinReplicas < 2 {
			t.Errorf("overlays/prod: HorizontalPodAutoscaler/%s minReplicas = %v, want at least 2", h.Name, h.Spec.MinReplicas)
		}
	}
	for _, b := range r.pdbs {
		if b.Spec.MinAvailable == nil {
			t.Errorf("overlays/prod: PodDisruptionBudget/%s has no minAvailable", b.Name)
		}
	}
	for _, d := range r.deployments {
		spread := map[string]bool{}
		for _, c := range d.Spec.Template.Spec.TopologySpreadConstraints {
			spread[c.TopologyKey] = true
		}
		if !spread["kubernetes.io/hostname"] || !spread["topology.kubernetes.io/zone"] {
			t.Errorf("overlays/prod: Deployment/%s is not spread over nodes and zones (topologySpreadConstraints %v)", d.Name, spread)
		}
	}
	if len(r.secrets) != 0 {
		t.Errorf("overlays/prod: the render holds Secrets %v; production secrets stay out of git", keys(r.secrets))
	}
	if !r.namespaces["hermes"] {
		t.Errorf("overlays/prod: Namespace hermes is not in the render")
	}
	for _, s := range r.statefulSets {
		if s.Name == "hermes-nats" && (s.Spec.Replicas == nil || *s.Spec.Replicas != 3) {
			t.Errorf("overlays/prod: StatefulSet/hermes-nats replicas = %v, want 3", s.Spec.Replicas)
		}
	}
}

func union(sets ...map[string]bool) map[string]bool {
	out := map[string]bool{}
	for _, s := range sets {
		for k := range s {
			out[k] = true
		}
	}
	return out
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// minimal is a small valid kustomization of one Hermes service; each rejection case changes one
// thing in it.
var minimal = map[string]string{
	"kustomization.yaml": `apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources: [sa.yaml, deploy.yaml, svc.yaml, hpa.yaml, pdb.yaml]
configMapGenerator:
  - name: hermes-config
    literals: [HERMES_LISTEN=0.0.0.0:7070, HERMES_SESSION_ADDR=dns:///hermes-session:7070]
`,
	"sa.yaml": `apiVersion: v1
kind: ServiceAccount
metadata: {name: hermes-session}
`,
	"deploy.yaml": `apiVersion: apps/v1
kind: Deployment
metadata: {name: hermes-session}
spec:
  selector: {matchLabels: {app: s}}
  template:
    metadata: {labels: {app: s}}
    spec:
      serviceAccountName: hermes-session
      enableServiceLinks: false
      terminationGracePeriodSeconds: 40
      automountServiceAccountToken: false
      securityContext: {runAsNonRoot: true, runAsUser: 65532, runAsGroup: 65532, seccompProfile: {type: RuntimeDefault}}
      containers:
        - name: hermes
          image: hermes:v1
          args: [serve, --target=session]
          ports: [{name: grpc, containerPort: 7070}]
          envFrom: [{configMapRef: {name: hermes-config}}]
          env:
            - {name: HERMES_DRAIN_DELAY, value: 5s}
            - {name: HERMES_SHUTDOWN_TIMEOUT, value: 20s}
          readinessProbe: {grpc: {port: 7070, service: hermes.session.v1.SessionService}}
          livenessProbe: {grpc: {port: 7070}}
          resources:
            requests: {cpu: 10m, memory: 16Mi}
            limits: {cpu: 100m, memory: 64Mi}
          securityContext:
            readOnlyRootFilesystem: true
            allowPrivilegeEscalation: false
            capabilities: {drop: [ALL]}
`,
	"svc.yaml": `apiVersion: v1
kind: Service
metadata: {name: hermes-session}
spec:
  selector: {app: s}
  ports: [{name: grpc, port: 7070, targetPort: grpc}]
`,
	"hpa.yaml": `apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata: {name: hermes-session}
spec:
  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: hermes-session}
  minReplicas: 1
  maxReplicas: 3
  metrics: [{type: Resource, resource: {name: cpu, target: {type: Utilization, averageUtilization: 70}}}]
`,
	"pdb.yaml": `apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: hermes-session}
spec:
  maxUnavailable: 1
  selector: {matchLabels: {app: s}}
`,
}

// inMemory writes minimal, with the given files replaced and patches added to the
// kustomization, to an in-memory file system under /app.
func inMemory(t *testing.T, replace map[string]string, patches ...string) filesys.FileSystem {
	t.Helper()
	fSys := filesys.MakeFsInMemory()
	files := map[string]string{}
	for name, content := range minimal {
		files[name] = content
	}
	for name, content := range replace {
		files[name] = content
	}
	if len(patches) > 0 {
		files["kustomization.yaml"] += "patches:\n"
		for _, p := range patches {
			files["kustomization.yaml"] += p
		}
	}
	for name, content := range files {
		if err := fSys.WriteFile("/app/"+name, []byte(content)); err != nil {
			t.Fatal(err)
		}
	}
	return fSys
}

// jsonPatch is a patches entry applying JSON patch operations to Deployment/hermes-session.
func jsonPatch(kind, ops string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "  - target: {kind: %s, name: hermes-session}\n    patch: |-\n", kind)
	for _, line := range strings.Split(strings.TrimSpace(ops), "\n") {
		b.WriteString("      " + line + "\n")
	}
	return b.String()
}

// TestPolicyRejects: each case breaks one rule in an otherwise valid kustomization, and the
// policy must name the object and the problem.
// rejectCase breaks one rule in a valid kustomization.
type rejectCase struct {
	name    string
	replace map[string]string
	patches []string
	want    string // a substring of exactly one problem; "" means valid
}

// checkRejects renders each case (files replaced over minimal, patches added) and requires the
// policy to report exactly one problem containing its want, or none for a valid case.
func checkRejects(t *testing.T, pol policy, files map[string]string, tests []rejectCase) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			replace := map[string]string{}
			maps.Copy(replace, files)
			maps.Copy(replace, tt.replace)
			r, err := render(inMemory(t, replace, tt.patches...), "/app")
			if err != nil {
				t.Fatal(err)
			}
			got := pol.check(r)
			if tt.want == "" {
				if len(got) != 0 {
					t.Fatalf("the valid kustomization has problems:\n%s", strings.Join(got, "\n"))
				}
				return
			}
			var matched []string
			for _, p := range got {
				if strings.Contains(p, tt.want) {
					matched = append(matched, p)
				}
			}
			if len(matched) != 1 {
				t.Errorf("want exactly one problem containing %q, got:\n%s", tt.want, strings.Join(got, "\n"))
			}
		})
	}
}

func TestPolicyRejects(t *testing.T) {
	const container = "/spec/template/spec/containers/0"
	checkRejects(t, policy{settings: newSettings(), pinnedImages: true}, nil, []rejectCase{
		{name: "valid"},
		{
			name:    "no readiness probe",
			patches: []string{jsonPatch("Deployment", `- {op: remove, path: `+container+`/readinessProbe}`)},
			want:    "Deployment/hermes-session container hermes: no readiness probe",
		},
		{
			name:    "no liveness probe",
			patches: []string{jsonPatch("Deployment", `- {op: remove, path: `+container+`/livenessProbe}`)},
			want:    "Deployment/hermes-session container hermes: no liveness probe",
		},
		{
			name:    "liveness probe over HTTP",
			patches: []string{jsonPatch("Deployment", `- {op: replace, path: `+container+`/livenessProbe, value: {httpGet: {port: 7070, path: /}}}`)},
			want:    "liveness probe is an HTTP GET, but there is no health listener (HERMES_HEALTH_LISTEN)",
		},
		{
			name:    "readiness probe asks for another service",
			patches: []string{jsonPatch("Deployment", `- {op: replace, path: `+container+`/readinessProbe/grpc/service, value: hermes.tools.v1.ToolService}`)},
			want:    `readiness probe asks for health service "hermes.tools.v1.ToolService"; the session target reports "hermes.session.v1.SessionService"`,
		},
		{
			name:    "probe on a port the container does not expose",
			patches: []string{jsonPatch("Deployment", `- {op: replace, path: `+container+`/livenessProbe/grpc/port, value: 7071}`)},
			want:    "liveness probe checks port 7071",
		},
		{
			name:    "no memory limit",
			patches: []string{jsonPatch("Deployment", `- {op: remove, path: `+container+`/resources/limits/memory}`)},
			want:    "Deployment/hermes-session container hermes: no memory limit",
		},
		{
			name:    "no requests",
			patches: []string{jsonPatch("Deployment", `- {op: remove, path: `+container+`/resources/requests}`)},
			want:    "no cpu request",
		},
		{
			name:    "replicas on an autoscaled Deployment",
			patches: []string{jsonPatch("Deployment", `- {op: add, path: /spec/replicas, value: 2}`)},
			want:    "Deployment/hermes-session: sets spec.replicas (2) although HorizontalPodAutoscaler/hermes-session scales it",
		},
		{
			name:    "no HPA",
			replace: map[string]string{"hpa.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: unrelated}\n"},
			want:    "Deployment/hermes-session: no HorizontalPodAutoscaler targets it",
		},
		{
			name:    "HPA targets a missing Deployment",
			patches: []string{jsonPatch("HorizontalPodAutoscaler", `- {op: replace, path: /spec/scaleTargetRef/name, value: hermes-sesion}`)},
			want:    "HorizontalPodAutoscaler/hermes-session: scaleTargetRef apps/v1 Deployment/hermes-sesion is not a workload in the render",
		},
		{
			name:    "no PDB",
			replace: map[string]string{"pdb.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: unrelated}\n"},
			want:    "Deployment/hermes-session: no PodDisruptionBudget selects its pods",
		},
		{
			name:    "PDB that blocks every drain",
			patches: []string{jsonPatch("PodDisruptionBudget", "- {op: remove, path: /spec/maxUnavailable}\n- {op: add, path: /spec/minAvailable, value: 1}")},
			want:    "PodDisruptionBudget/hermes-session allows no voluntary disruption at the HorizontalPodAutoscaler's 1 minimum replicas",
		},
		{
			name:    "Service port not named grpc",
			patches: []string{jsonPatch("Service", `- {op: replace, path: /spec/ports/0/name, value: rpc}`)},
			want:    "Deployment/hermes-session: no Service with a port named grpc selects its pods",
		},
		{
			name:    "Service targets a port the pods do not expose",
			patches: []string{jsonPatch("Service", `- {op: replace, path: /spec/ports/0/targetPort, value: 8080}`)},
			want:    "Service/hermes-session: port grpc targets 8080",
		},
		{
			name:    "may run as root",
			patches: []string{jsonPatch("Deployment", `- {op: remove, path: /spec/template/spec/securityContext/runAsNonRoot}`)},
			want:    "runAsNonRoot is not true",
		},
		{
			name:    "runs as user 0",
			patches: []string{jsonPatch("Deployment", `- {op: replace, path: /spec/template/spec/securityContext/runAsUser, value: 0}`)},
			want:    "runs as user 0",
		},
		{
			name:    "writable root file system",
			patches: []string{jsonPatch("Deployment", `- {op: replace, path: `+container+`/securityContext/readOnlyRootFilesystem, value: false}`)},
			want:    "readOnlyRootFilesystem is not true",
		},
		{
			name:    "privilege escalation",
			patches: []string{jsonPatch("Deployment", `- {op: remove, path: `+container+`/securityContext/allowPrivilegeEscalation}`)},
			want:    "allowPrivilegeEscalation is not false",
		},
		{
			name:    "capabilities kept",
			patches: []string{jsonPatch("Deployment", `- {op: remove, path: `+container+`/securityContext/capabilities}`)},
			want:    "does not drop ALL capabilities",
		},
		{
			name:    "no seccomp profile",
			patches: []string{jsonPatch("Deployment", `- {op: remove, path: /spec/template/spec/securityContext/seccompProfile}`)},
			want:    "seccompProfile is not RuntimeDefault",
		},
		{
			name:    "grace shorter than the drain",
			patches: []string{jsonPatch("Deployment", `- {op: replace, path: /spec/template/spec/terminationGracePeriodSeconds, value: 25}`)},
			want:    "Deployment/hermes-session: terminationGracePeriodSeconds 25s is not longer than the drain (drain delay 5s + shutdown timeout 20s)",
		},
		{
			name:    "Kubernetes' default grace",
			patches: []string{jsonPatch("Deployment", "- {op: remove, path: /spec/template/spec/terminationGracePeriodSeconds}\n- {op: replace, path: "+container+"/env/0/value, value: 15s}")},
			want:    "terminationGracePeriodSeconds 30s is not longer than the drain (drain delay 15s + shutdown timeout 20s)",
		},
		{
			name:    "the binary's default drain",
			patches: []string{jsonPatch("Deployment", "- {op: replace, path: /spec/template/spec/terminationGracePeriodSeconds, value: 20}\n- {op: remove, path: "+container+"/env}")},
			want:    "terminationGracePeriodSeconds 20s is not longer than the drain (drain delay 0s + shutdown timeout 20s)",
		},
		{
			name:    "topology spread over other pods",
			patches: []string{jsonPatch("Deployment", `- {op: add, path: /spec/template/spec/topologySpreadConstraints, value: [{maxSkew: 1, topologyKey: kubernetes.io/hostname, whenUnsatisfiable: DoNotSchedule, labelSelector: {matchLabels: {app: other}}}]}`)},
			want:    "topologySpreadConstraint on kubernetes.io/hostname does not select its own pods",
		},
		{
			name:    "port name too long",
			patches: []string{jsonPatch("Deployment", `- {op: add, path: `+container+`/ports/-, value: {name: prometheus-metrics, containerPort: 9090}}`)},
			want:    `Deployment/hermes-session container hermes: invalid port name "prometheus-metrics"`,
		},
		{
			name:    "Service name that is not a DNS label",
			patches: []string{jsonPatch("Service", `- {op: replace, path: /metadata/name, value: hermes.session}`)},
			want:    "Service/hermes.session: invalid name",
		},
		{
			name:    "service links on",
			patches: []string{jsonPatch("Deployment", `- {op: replace, path: /spec/template/spec/enableServiceLinks, value: true}`)},
			want:    "enableServiceLinks is not false",
		},
		{
			name:    "unknown setting in env",
			patches: []string{jsonPatch("Deployment", `- {op: add, path: `+container+`/env/-, value: {name: HERMES_SESION_ADDR, value: x}}`)},
			want:    "Deployment/hermes-session container hermes: HERMES_SESION_ADDR (from env): not a setting of hermes serve",
		},
		{
			name:    "unknown setting in the ConfigMap",
			replace: map[string]string{"kustomization.yaml": strings.Replace(minimal["kustomization.yaml"], "HERMES_LISTEN=", "HERMES_LISTEN_ADDR=", 1)},
			want:    "HERMES_LISTEN_ADDR (from ConfigMap/hermes-config-",
		},
		{
			name:    "setting with a value the binary refuses",
			patches: []string{jsonPatch("Deployment", `- {op: replace, path: `+container+`/env/1/value, value: "20"}`)},
			want:    `HERMES_SHUTDOWN_TIMEOUT (from env): invalid value "20"`,
		},
		{
			name:    "unknown flag",
			patches: []string{jsonPatch("Deployment", `- {op: add, path: `+container+`/args/-, value: --no-such-flag=1}`)},
			want:    `argument "--no-such-flag=1": no such flag`,
		},
		{
			name:    "unknown target",
			patches: []string{jsonPatch("Deployment", `- {op: replace, path: `+container+`/args/1, value: --target=sessions}`)},
			want:    `unknown target "sessions"`,
		},
		{
			name:    "address of a Service that is not there",
			replace: map[string]string{"kustomization.yaml": strings.Replace(minimal["kustomization.yaml"], "dns:///hermes-session:7070", "dns:///hermes-sessions:7070", 1)},
			want:    "HERMES_SESSION_ADDR=dns:///hermes-sessions:7070: no Service hermes-sessions with port 7070 in the render",
		},
		{
			name:    "missing ConfigMap",
			patches: []string{jsonPatch("Deployment", `- {op: add, path: `+container+`/envFrom/-, value: {configMapRef: {name: other}}}`)},
			want:    "Deployment/hermes-session container hermes: references ConfigMap/other, which is not in the render",
		},
		{
			name:    "missing Secret",
			patches: []string{jsonPatch("Deployment", `- {op: add, path: `+container+`/env/-, value: {name: HERMES_MODEL_API_KEY, valueFrom: {secretKeyRef: {name: hermes-model, key: HERMES_MODEL_API_KEY}}}}`)},
			want:    "references Secret/hermes-model, which is not in the render",
		},
		{
			name:    "missing ConfigMap key",
			patches: []string{jsonPatch("Deployment", `- {op: add, path: `+container+`/env/-, value: {name: HERMES_MODEL, valueFrom: {configMapKeyRef: {name: hermes-config, key: HERMES_MODEL}}}}`)},
			want:    `env HERMES_MODEL: ConfigMap/hermes-config-`,
		},
		{
			name:    "missing ServiceAccount",
			replace: map[string]string{"sa.yaml": "apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: other}\n"},
			want:    "references ServiceAccount/hermes-session, which is not in the render",
		},
		{
			name:    "no fixed group",
			patches: []string{jsonPatch("Deployment", `- {op: remove, path: /spec/template/spec/securityContext/runAsGroup}`)},
			want:    "no fixed runAsGroup",
		},
		{
			name:    "no fixed user",
			patches: []string{jsonPatch("Deployment", `- {op: remove, path: /spec/template/spec/securityContext/runAsUser}`)},
			want:    "no fixed runAsUser",
		},
		{
			name:    "ServiceAccount token mounted",
			patches: []string{jsonPatch("Deployment", `- {op: replace, path: /spec/template/spec/automountServiceAccountToken, value: true}`)},
			want:    "Deployment/hermes-session: automountServiceAccountToken is not false",
		},
		{
			name:    "TCP probe on a plaintext listener",
			patches: []string{jsonPatch("Deployment", `- {op: replace, path: `+container+`/readinessProbe, value: {tcpSocket: {port: grpc}}}`)},
			want:    "readiness probe is a TCP connect, but the listener is plaintext",
		},
		{
			name:    "listener without keys",
			patches: []string{jsonPatch("Deployment", `- {op: add, path: `+container+`/env/-, value: {name: HERMES_INSECURE_NO_AUTH, value: "true"}}`)},
			want:    "sets HERMES_INSECURE_NO_AUTH",
		},
		{
			name:    "password in clear in a URL",
			patches: []string{jsonPatch("Deployment", `- {op: add, path: `+container+`/env/-, value: {name: HERMES_REDIS_URL, value: "redis://:hunter2@hermes-redis:6379/0"}}`)},
			want:    "env HERMES_REDIS_URL: the URL carries its password in clear",
		},
		{
			name:    "reference to an undefined variable",
			patches: []string{jsonPatch("Deployment", `- {op: add, path: `+container+`/env/-, value: {name: HERMES_REDIS_URL, value: "redis://:$(REDIS_PASSWORD)@hermes-redis:6379/0"}}`)},
			want:    "env HERMES_REDIS_URL uses $(REDIS_PASSWORD), which is not defined before it in env",
		},
		{
			name: "reference to a variable defined after it",
			patches: []string{jsonPatch("Deployment", "- {op: add, path: "+container+"/env/-, value: {name: HERMES_REDIS_URL, value: \"redis://:$(REDIS_PASSWORD)@hermes-redis:6379/0\"}}\n"+
				"- {op: add, path: "+container+"/env/-, value: {name: REDIS_PASSWORD, valueFrom: {secretKeyRef: {name: s, key: k, optional: true}}}}")},
			want: "env HERMES_REDIS_URL uses $(REDIS_PASSWORD), which is not defined before it in env",
		},
		{
			name:    "credential as a literal",
			patches: []string{jsonPatch("Deployment", `- {op: add, path: `+container+`/env/-, value: {name: HERMES_MODEL_API_KEY, value: sk-live-1234}}`)},
			want:    "env HERMES_MODEL_API_KEY holds a literal value",
		},
		{
			name:    "password in a ConfigMap",
			replace: map[string]string{"kustomization.yaml": minimal["kustomization.yaml"] + "  - name: backend\n    literals: [REDIS_PASSWORD=hunter2]\n"},
			want:    "key REDIS_PASSWORD holds a credential",
		},
		{
			name:    "password in a configuration file",
			replace: map[string]string{"kustomization.yaml": minimal["kustomization.yaml"] + "  - name: redis\n    literals: [\"redis.conf=port 6379\\nrequirepass hunter2\"]\n"},
			want:    "requirepass is written in clear",
		},
		{
			name:    "image without a tag",
			patches: []string{jsonPatch("Deployment", `- {op: replace, path: `+container+`/image, value: "ghcr.io/hermes-agent/hermes"}`)},
			want:    `image "ghcr.io/hermes-agent/hermes" has no pinned tag`,
		},
	})
}

// TestStrictDecodingRejects: a field the API does not have (a typo, wrong case, a duplicate) or
// a kind outside the scheme fails to decode, naming the object and the field.
func TestStrictDecodingRejects(t *testing.T) {
	tests := []struct {
		name    string
		replace map[string]string
		want    []string // substrings of the error
	}{
		{
			name:    "misspelt container field",
			replace: map[string]string{"deploy.yaml": strings.Replace(minimal["deploy.yaml"], "readinessProbe:", "readinesProbe:", 1)},
			want:    []string{"Deployment/hermes-session", `unknown field "spec.template.spec.containers[0].readinesProbe"`},
		},
		{
			name:    "field in the wrong case",
			replace: map[string]string{"deploy.yaml": strings.Replace(minimal["deploy.yaml"], "terminationGracePeriodSeconds:", "TerminationGracePeriodSeconds:", 1)},
			want:    []string{"Deployment/hermes-session", `unknown field "spec.template.spec.TerminationGracePeriodSeconds"`},
		},
		{
			name:    "field at the wrong level",
			replace: map[string]string{"svc.yaml": minimal["svc.yaml"] + "  replicas: 2\n"},
			want:    []string{"Service/hermes-session", `unknown field "spec.replicas"`},
		},
		{
			name: "duplicate field",
			replace: map[string]string{"pdb.yaml": `apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: hermes-session}
spec:
  maxUnavailable: 1
  selector: {matchLabels: {app: s}}
  unhealthyPodEvictionPolicy: AlwaysAllow
  unhealthyPodEvictionPolicy: IfHealthyBudget
`},
			want: []string{"hermes-session", "unhealthyPodEvictionPolicy"},
		},
		{
			name:    "unknown kind",
			replace: map[string]string{"deploy.yaml": strings.Replace(minimal["deploy.yaml"], "kind: Deployment", "kind: Deploymnet", 1)},
			want:    []string{"Deploymnet/hermes-session", `no kind "Deploymnet" is registered`},
		},
		{
			name:    "old API version",
			replace: map[string]string{"hpa.yaml": strings.Replace(minimal["hpa.yaml"], "autoscaling/v2", "autoscaling/v1", 1)},
			want:    []string{"HorizontalPodAutoscaler/hermes-session", `no kind "HorizontalPodAutoscaler" is registered for version "autoscaling/v1"`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := render(inMemory(t, tt.replace), "/app")
			if err == nil {
				t.Fatal("rendered and decoded without error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

// TestDisruptionsAllowed pins the budget arithmetic the policy relies on.
func TestDisruptionsAllowed(t *testing.T) {
	tests := []struct {
		budget string
		pods   int
		want   int
	}{
		{"maxUnavailable: 1", 1, 1},
		{"maxUnavailable: 0", 3, 0},
		{"minAvailable: 1", 1, 0},
		{"minAvailable: 1", 2, 1},
		{"minAvailable: 50%", 2, 1},
		{"minAvailable: 50%", 3, 1},
		{"minAvailable: 100%", 4, 0},
		{"maxUnavailable: 25%", 2, 1},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s of %d", tt.budget, tt.pods), func(t *testing.T) {
			obj, err := decode([]byte("apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {name: b}\nspec:\n  " + tt.budget + "\n"))
			if err != nil {
				t.Fatal(err)
			}
			if got := disruptionsAllowed(obj.(*policyv1.PodDisruptionBudget), tt.pods); got != tt.want {
				t.Errorf("disruptionsAllowed = %d, want %d", got, tt.want)
			}
		})
	}
}
