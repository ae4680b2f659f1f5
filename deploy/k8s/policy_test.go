package k8s_test

import (
	"fmt"
	"math"
	"net"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"

	mcpgatewayv1 "github.com/hermes-agent/hermes/proto/hermes/mcpgateway/v1"
	memoryv1 "github.com/hermes-agent/hermes/proto/hermes/memory/v1"
	orchestratorv1 "github.com/hermes-agent/hermes/proto/hermes/orchestrator/v1"
	sessionv1 "github.com/hermes-agent/hermes/proto/hermes/session/v1"
	toolsv1 "github.com/hermes-agent/hermes/proto/hermes/tools/v1"
)

// grpcServiceOf is the gRPC service each target registers; its health status is what the
// readiness probe must ask for.
var grpcServiceOf = map[string]string{
	"session":      sessionv1.SessionService_ServiceDesc.ServiceName,
	"tools":        toolsv1.ToolService_ServiceDesc.ServiceName,
	"mcpgateway":   mcpgatewayv1.MCPGatewayService_ServiceDesc.ServiceName,
	"memory":       memoryv1.MemoryService_ServiceDesc.ServiceName,
	"orchestrator": orchestratorv1.OrchestratorService_ServiceDesc.ServiceName,
}

// policy says what a render may leave out and what it must know.
type policy struct {
	// settings are the binary's settings (flags and their HERMES_* variables).
	settings *settings
	// external are objects ("Secret/hermes-model") referenced but created outside this render.
	external map[string]bool
	// pinnedImages requires every image to name a tag other than latest (overlays).
	pinnedImages bool
	// whole marks a render of the whole of Hermes, which must also have NetworkPolicies for
	// every pod's ingress and egress, mutual TLS and API keys from mounted Secrets in every
	// Hermes container, and a Service for every in-cluster address a container's env dials.
	whole bool
}

// problems collects policy violations, each prefixed with the object it is about.
type problems []string

func (p *problems) addf(obj, format string, args ...any) {
	*p = append(*p, obj+": "+fmt.Sprintf(format, args...))
}

// check applies the policy to a render and returns every violation, sorted.
func (pol policy) check(r *rendered) []string {
	var p problems
	for _, d := range r.deployments {
		pol.checkDeployment(&p, r, d)
	}
	for _, s := range r.statefulSets {
		pol.checkStatefulSet(&p, r, s)
	}
	for _, h := range r.hpas {
		checkHPA(&p, r, h)
	}
	for _, b := range r.pdbs {
		checkPDB(&p, r, b)
	}
	for _, s := range r.services {
		checkService(&p, r, s)
	}
	checkNames(&p, r)
	checkCertificates(&p, r)
	if pol.whole {
		checkNetworkCoverage(&p, r)
	}
	for _, cm := range r.configMaps {
		if usedAsEnv(r, cm) {
			pol.checkAddresses(&p, r, cm)
		}
		checkNoClearSecrets(&p, cm)
	}
	sort.Strings(p)
	return p
}

func (pol policy) checkDeployment(p *problems, r *rendered, d *appsv1.Deployment) {
	obj := "Deployment/" + d.Name
	pod := &d.Spec.Template
	hpa := hpaFor(r, d.Namespace, "Deployment", d.Name)
	switch {
	case hpa == nil:
		p.addf(obj, "no HorizontalPodAutoscaler targets it")
	case d.Spec.Replicas != nil:
		p.addf(obj, "sets spec.replicas (%d) although HorizontalPodAutoscaler/%s scales it: every apply would reset the count", *d.Spec.Replicas, hpa.Name)
	}
	pdbs := pdbsSelecting(r, d.Namespace, pod.Labels)
	if len(pdbs) == 0 {
		p.addf(obj, "no PodDisruptionBudget selects its pods")
	}
	if hpa != nil && hpa.Spec.MinReplicas != nil {
		for _, b := range pdbs {
			if allowed := disruptionsAllowed(b, int(*hpa.Spec.MinReplicas)); allowed < 1 {
				p.addf(obj, "PodDisruptionBudget/%s allows no voluntary disruption at the HorizontalPodAutoscaler's %d minimum replicas, so node drains would hang", b.Name, *hpa.Spec.MinReplicas)
			}
		}
	}
	if !hasServiceWithGRPCPort(r, d.Namespace, pod) {
		p.addf(obj, "no Service with a port named grpc selects its pods")
	}
	for _, c := range pod.Spec.TopologySpreadConstraints {
		sel, err := metav1.LabelSelectorAsSelector(c.LabelSelector)
		if err != nil || c.LabelSelector == nil || !sel.Matches(labels.Set(pod.Labels)) {
			p.addf(obj, "topologySpreadConstraint on %s does not select its own pods, so it spreads nothing", c.TopologyKey)
		}
	}
	if s := pod.Spec.EnableServiceLinks; s == nil || *s {
		p.addf(obj, "enableServiceLinks is not false: Kubernetes would inject HERMES_<SERVICE>_PORT-style variables for every Service, which the binary reads as settings")
	}
	pol.checkPod(p, r, obj, d.Namespace, pod, true)
}

func (pol policy) checkStatefulSet(p *problems, r *rendered, s *appsv1.StatefulSet) {
	obj := "StatefulSet/" + s.Name
	if len(s.Spec.VolumeClaimTemplates) == 0 {
		p.addf(obj, "no volumeClaimTemplates: its data would not survive a rescheduling")
	}
	for _, vct := range s.Spec.VolumeClaimTemplates {
		if _, ok := vct.Spec.Resources.Requests[corev1.ResourceStorage]; !ok {
			p.addf(obj, "volumeClaimTemplate %s requests no storage", vct.Name)
		}
		if !mounted(&s.Spec.Template.Spec, vct.Name) {
			p.addf(obj, "volumeClaimTemplate %s is not mounted by any container", vct.Name)
		}
	}
	headless := false
	for _, svc := range r.services {
		if svc.Namespace == s.Namespace && svc.Name == s.Spec.ServiceName {
			headless = svc.Spec.ClusterIP == corev1.ClusterIPNone && selects(svc.Spec.Selector, s.Spec.Template.Labels)
		}
	}
	if !headless {
		p.addf(obj, "serviceName %q is not a headless Service (clusterIP: None) selecting its pods", s.Spec.ServiceName)
	}
	pol.checkPod(p, r, obj, s.Namespace, &s.Spec.Template, false)
}

// checkPod checks what every workload shares. hermes marks a Hermes service's pod, whose
// probes must be gRPC health checks and whose settings are the binary's.
func (pol policy) checkPod(p *problems, r *rendered, obj, ns string, pod *corev1.PodTemplateSpec, hermes bool) {
	spec := &pod.Spec
	if spec.ServiceAccountName == "" {
		p.addf(obj, "no serviceAccountName: it would run as the namespace's default ServiceAccount")
	} else {
		pol.requireObject(p, r, obj, ns, "ServiceAccount", spec.ServiceAccountName)
	}
	checkPodSecurity(p, obj, spec)
	if !tokenOff(r, ns, spec) {
		p.addf(obj, "automountServiceAccountToken is not false (on the pod or its ServiceAccount): no Hermes pod calls the Kubernetes API, so none needs a token")
	}
	for _, v := range spec.Volumes {
		switch {
		case v.ConfigMap != nil && (v.ConfigMap.Optional == nil || !*v.ConfigMap.Optional):
			pol.requireObject(p, r, obj, ns, "ConfigMap", v.ConfigMap.Name)
		case v.Secret != nil && (v.Secret.Optional == nil || !*v.Secret.Optional):
			pol.requireObject(p, r, obj, ns, "Secret", v.Secret.SecretName)
			for _, item := range v.Secret.Items {
				if !secretHasKey(r, ns, v.Secret.SecretName, item.Key) {
					p.addf(obj, "volume %s: Secret/%s has no key %q", v.Name, v.Secret.SecretName, item.Key)
				}
			}
		}
	}
	for i, c := range append(slices.Clone(spec.InitContainers), spec.Containers...) {
		cobj := fmt.Sprintf("%s container %s", obj, c.Name)
		checkResources(p, cobj, c.Resources)
		checkContainerSecurity(p, cobj, spec.SecurityContext, c.SecurityContext)
		if pol.pinnedImages {
			checkImage(p, cobj, c.Image)
		}
		env := pol.resolveEnv(p, r, cobj, ns, c)
		checkEnvSecrets(p, cobj, c)
		if i < len(spec.InitContainers) {
			continue
		}
		switch {
		case hermes:
			pol.checkHermesSettings(p, cobj, c, env)
			checkHermesProbes(p, cobj, c, env)
			pol.checkGrace(p, obj, spec, env)
			if pol.whole {
				checkHermesTLS(p, r, cobj, ns, spec, c, env)
				for _, e := range c.Env {
					if e.ValueFrom == nil {
						checkAddress(p, r, cobj, ns, e.Name, e.Value)
					}
				}
			}
		default:
			if c.ReadinessProbe == nil {
				p.addf(cobj, "no readiness probe")
			}
			if c.LivenessProbe == nil {
				p.addf(cobj, "no liveness probe")
			}
		}
	}
}

// checkHermesProbes: the probes must work against the listener as configured and reflect the
// service's state. The kubelet's probes speak plaintext and present no client certificate: a
// process with a health listener (HERMES_HEALTH_LISTEN, plaintext, nothing but /readyz and
// /livez) is probed there by HTTP — readiness and start-up on /readyz, liveness on /livez; a
// process serving TLS (HERMES_TLS_CERT) must have one, since a TCP connect to its gRPC port says
// nothing about its backends. Without TLS the native gRPC health check is also accepted,
// readiness asking for the target's own service (NOT_SERVING while its backends are down).
func checkHermesProbes(p *problems, obj string, c corev1.Container, env map[string]envVar) {
	target := targetOf(c.Args)
	want, known := grpcServiceOf[target]
	switch {
	case target == "":
		p.addf(obj, "args %q do not run one target (serve --target=<service>)", c.Args)
	case !known:
		p.addf(obj, "unknown target %q", target)
	}
	cert, ok := env["HERMES_TLS_CERT"]
	tls := ok && (cert.value != "" || !cert.known)
	healthPort := int32(0)
	if hl, ok := env["HERMES_HEALTH_LISTEN"]; ok && hl.value != "" {
		if _, port, err := net.SplitHostPort(hl.value); err == nil {
			if n, err := strconv.ParseInt(port, 10, 32); err == nil && n > 0 {
				healthPort = int32(n)
			}
		}
		if healthPort == 0 {
			p.addf(obj, "HERMES_HEALTH_LISTEN %q is not host:port with a fixed port", hl.value)
		} else if !hasPort(c, intstr.FromInt32(healthPort)) {
			p.addf(obj, "HERMES_HEALTH_LISTEN port %d is not a container port", healthPort)
		}
	}
	if tls && healthPort == 0 {
		p.addf(obj, "the listener serves TLS (HERMES_TLS_CERT), which the kubelet's probes cannot speak, and there is no plaintext health listener (HERMES_HEALTH_LISTEN) to probe instead")
	}
	for _, probe := range []struct {
		kind     string
		p        *corev1.Probe
		required bool
		path     string
	}{{"startup", c.StartupProbe, false, "/readyz"}, {"readiness", c.ReadinessProbe, true, "/readyz"}, {"liveness", c.LivenessProbe, true, "/livez"}} {
		switch {
		case probe.p == nil:
			if probe.required {
				p.addf(obj, "no %s probe", probe.kind)
			}
		case probe.p.HTTPGet != nil:
			port, ok := resolvePort(c, probe.p.HTTPGet.Port)
			switch {
			case healthPort == 0:
				p.addf(obj, "%s probe is an HTTP GET, but there is no health listener (HERMES_HEALTH_LISTEN)", probe.kind)
			case !ok || port != healthPort:
				p.addf(obj, "%s probe gets port %s, not the health listener's port %d", probe.kind, probe.p.HTTPGet.Port.String(), healthPort)
			case probe.p.HTTPGet.Path != probe.path:
				p.addf(obj, "%s probe gets %q, want %s", probe.kind, probe.p.HTTPGet.Path, probe.path)
			case probe.p.HTTPGet.Scheme != "" && probe.p.HTTPGet.Scheme != corev1.URISchemeHTTP:
				p.addf(obj, "%s probe uses %s; the health listener is plaintext HTTP", probe.kind, probe.p.HTTPGet.Scheme)
			}
		case probe.p.GRPC != nil && tls:
			p.addf(obj, "%s probe is a native gRPC health check, which the kubelet makes in plaintext without a client certificate, but the listener serves TLS (HERMES_TLS_CERT): probe the health listener (httpGet %s)", probe.kind, probe.path)
		case probe.p.GRPC != nil:
			if !hasPort(c, intstr.FromInt32(probe.p.GRPC.Port)) {
				p.addf(obj, "%s probe checks port %d, which the container does not expose", probe.kind, probe.p.GRPC.Port)
			}
		case probe.p.TCPSocket != nil && !tls:
			p.addf(obj, "%s probe is a TCP connect, but the listener is plaintext: use the native gRPC health check (grpc: {port: 7070, ...})", probe.kind)
		case probe.p.TCPSocket != nil:
			p.addf(obj, "%s probe is a TCP connect, which says nothing about the service's state: probe the health listener (httpGet %s)", probe.kind, probe.path)
		default:
			p.addf(obj, "%s probe is neither an HTTP GET of the health listener nor a native gRPC health check", probe.kind)
		}
	}
	if c.ReadinessProbe == nil || c.ReadinessProbe.GRPC == nil || !known || tls {
		return
	}
	got := ""
	if c.ReadinessProbe.GRPC.Service != nil {
		got = *c.ReadinessProbe.GRPC.Service
	}
	if got != want {
		p.addf(obj, "readiness probe asks for health service %q; the %s target reports %q (NOT_SERVING while its backends are down)", got, target, want)
	}
}

// checkGrace requires the termination grace period to outlast the binary's drain: the drain
// delay (serving while NOT_SERVING) plus the shutdown timeout for in-flight calls.
func (pol policy) checkGrace(p *problems, obj string, spec *corev1.PodSpec, env map[string]envVar) {
	drain := pol.settings.duration("drain-delay", env)
	shutdown := pol.settings.duration("shutdown-timeout", env)
	grace := time.Duration(corev1.DefaultTerminationGracePeriodSeconds) * time.Second
	if spec.TerminationGracePeriodSeconds != nil {
		grace = time.Duration(*spec.TerminationGracePeriodSeconds) * time.Second
	}
	if grace <= drain+shutdown {
		p.addf(obj, "terminationGracePeriodSeconds %s is not longer than the drain (drain delay %s + shutdown timeout %s): the kubelet would kill in-flight calls", grace, drain, shutdown)
	}
}

// targetOf returns X from args "serve --target=X" (or "--target X"), or "".
func targetOf(args []string) string {
	for i, a := range args {
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") || name != "target" {
			continue
		}
		if !hasValue && i+1 < len(args) {
			value = args[i+1]
		}
		return value
	}
	return ""
}

func (pol policy) checkHermesSettings(p *problems, obj string, c corev1.Container, env map[string]envVar) {
	if len(c.Args) == 0 || c.Args[0] != "serve" {
		p.addf(obj, "args %q do not start with the serve command", c.Args)
	}
	for i := 1; i < len(c.Args); i++ {
		a := c.Args[i]
		if !strings.HasPrefix(a, "-") {
			p.addf(obj, "unexpected argument %q", a)
			continue
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !hasValue && i+1 < len(c.Args) && !strings.HasPrefix(c.Args[i+1], "-") && !pol.settings.isBool(name) {
			value, hasValue = c.Args[i+1], true
			i++
		}
		if err := pol.settings.validFlag(name, value, hasValue); err != nil {
			p.addf(obj, "argument %q: %v", a, err)
		}
	}
	names := make([]string, 0, len(env))
	for name := range env {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if !strings.HasPrefix(name, "HERMES_") {
			continue
		}
		v := env[name]
		if err := pol.settings.validEnv(name, v.value, v.known); err != nil {
			p.addf(obj, "%s (from %s): %v", name, v.from, err)
		}
	}
}

// envVar is one environment variable of a container as the pod would see it.
type envVar struct {
	value string
	known bool   // the value is in the render (a literal or a ConfigMap key)
	from  string // where it comes from, for messages
}

// resolveEnv computes a container's environment (envFrom first, env overriding it) and reports
// references to ConfigMaps, Secrets and keys missing from the render.
func (pol policy) resolveEnv(p *problems, r *rendered, obj, ns string, c corev1.Container) map[string]envVar {
	env := map[string]envVar{}
	for _, ef := range c.EnvFrom {
		switch {
		case ef.ConfigMapRef != nil:
			from := "ConfigMap/" + ef.ConfigMapRef.Name
			cm := r.configMaps[ns+"/"+ef.ConfigMapRef.Name]
			if cm == nil {
				if ef.ConfigMapRef.Optional == nil || !*ef.ConfigMapRef.Optional {
					pol.requireObject(p, r, obj, ns, "ConfigMap", ef.ConfigMapRef.Name)
				}
				continue
			}
			for k, v := range cm.Data {
				env[ef.Prefix+k] = envVar{value: v, known: true, from: from}
			}
		case ef.SecretRef != nil:
			from := "Secret/" + ef.SecretRef.Name
			s := r.secrets[ns+"/"+ef.SecretRef.Name]
			if s == nil {
				if ef.SecretRef.Optional == nil || !*ef.SecretRef.Optional {
					pol.requireObject(p, r, obj, ns, "Secret", ef.SecretRef.Name)
				}
				continue
			}
			for k := range s.Data {
				env[ef.Prefix+k] = envVar{from: from}
			}
			for k := range s.StringData {
				env[ef.Prefix+k] = envVar{from: from}
			}
		}
	}
	for _, e := range c.Env {
		v := envVar{value: e.Value, known: true, from: "env"}
		if vf := e.ValueFrom; vf != nil {
			v = envVar{from: "valueFrom"}
			switch {
			case vf.ConfigMapKeyRef != nil:
				ref := vf.ConfigMapKeyRef
				v.from = "ConfigMap/" + ref.Name
				optional := ref.Optional != nil && *ref.Optional
				if cm := r.configMaps[ns+"/"+ref.Name]; cm != nil {
					val, ok := cm.Data[ref.Key]
					if !ok && !optional {
						p.addf(obj, "env %s: ConfigMap/%s has no key %q", e.Name, ref.Name, ref.Key)
					}
					v.value, v.known = val, ok
				} else if !optional {
					pol.requireObject(p, r, obj, ns, "ConfigMap", ref.Name)
				}
			case vf.SecretKeyRef != nil:
				ref := vf.SecretKeyRef
				v.from = "Secret/" + ref.Name
				optional := ref.Optional != nil && *ref.Optional
				if s := r.secrets[ns+"/"+ref.Name]; s != nil || r.certificateFor(ns, ref.Name) != nil {
					if !secretHasKey(r, ns, ref.Name, ref.Key) && !optional {
						p.addf(obj, "env %s: Secret/%s has no key %q", e.Name, ref.Name, ref.Key)
					}
				} else if !optional {
					pol.requireObject(p, r, obj, ns, "Secret", ref.Name)
				}
			}
		}
		env[e.Name] = v
	}
	return env
}

// requireObject reports a reference to an object that is neither in the render nor declared
// external.
func (pol policy) requireObject(p *problems, r *rendered, obj, ns, kind, name string) {
	if pol.external[kind+"/"+name] {
		return
	}
	var ok bool
	switch kind {
	case "ConfigMap":
		_, ok = r.configMaps[ns+"/"+name]
	case "Secret":
		_, ok = r.secrets[ns+"/"+name]
		ok = ok || r.certificateFor(ns, name) != nil
	case "ServiceAccount":
		_, ok = r.serviceAccounts[ns+"/"+name]
	}
	if !ok {
		p.addf(obj, "references %s/%s, which is not in the render", kind, name)
	}
}

// checkAddresses requires every in-cluster address an environment ConfigMap gives a Hermes
// setting to be a Service of the render with that port.
func (pol policy) checkAddresses(p *problems, r *rendered, cm *corev1.ConfigMap) {
	for _, k := range keys(cm.Data) {
		checkAddress(p, r, "ConfigMap/"+cm.Name, cm.Namespace, k, cm.Data[k])
	}
}

// checkAddress requires the in-cluster address (a short host name such as hermes-redis) of a
// HERMES_*_ADDR or HERMES_*_URL setting to be a Service of the render with that port.
func checkAddress(p *problems, r *rendered, obj, ns, name, value string) {
	if !strings.HasPrefix(name, "HERMES_") || !(strings.HasSuffix(name, "_ADDR") || strings.HasSuffix(name, "_URL")) {
		return
	}
	host, port, ok := hostPort(value)
	if !ok || strings.Contains(host, ".") || host == "localhost" || net.ParseIP(host) != nil {
		return // not an in-cluster short name
	}
	for _, s := range r.services {
		if s.Namespace != ns || s.Name != host {
			continue
		}
		for _, sp := range s.Spec.Ports {
			if fmt.Sprint(sp.Port) == port {
				return
			}
		}
	}
	p.addf(obj, "%s=%s: no Service %s with port %s in the render", name, value, host, port)
}

// usedAsEnv reports whether some workload takes its environment from the ConfigMap.
func usedAsEnv(r *rendered, cm *corev1.ConfigMap) bool {
	for _, pod := range podTemplates(r, cm.Namespace) {
		for _, c := range pod.Spec.Containers {
			for _, ef := range c.EnvFrom {
				if ef.ConfigMapRef != nil && ef.ConfigMapRef.Name == cm.Name {
					return true
				}
			}
		}
	}
	return false
}

// hostPort extracts host and port from host:port, dns:///host:port or scheme://host:port/….
func hostPort(v string) (host, port string, ok bool) {
	v = strings.TrimPrefix(v, "dns:///")
	if strings.Contains(v, "://") {
		u, err := url.Parse(v)
		if err != nil || u.Port() == "" {
			return "", "", false
		}
		return u.Hostname(), u.Port(), true
	}
	host, port, err := net.SplitHostPort(v)
	return host, port, err == nil
}

// checkNames applies the API server's name rules that strict decoding cannot: object names,
// label keys and values, port names and environment variable names.
func checkNames(p *problems, r *rendered) {
	for _, o := range r.objects {
		m, err := meta.Accessor(o)
		if err != nil {
			continue
		}
		kind := o.GetObjectKind().GroupVersionKind().Kind
		obj := kind + "/" + m.GetName()
		nameRule := validation.IsDNS1123Subdomain
		if kind == "Service" || kind == "Namespace" {
			nameRule = validation.IsDNS1035Label
		}
		for _, msg := range nameRule(m.GetName()) {
			p.addf(obj, "invalid name: %s", msg)
		}
		for k, v := range m.GetLabels() {
			for _, msg := range append(validation.IsQualifiedName(k), validation.IsValidLabelValue(v)...) {
				p.addf(obj, "invalid label %s=%s: %s", k, v, msg)
			}
		}
	}
	for _, d := range r.deployments {
		checkContainerNames(p, "Deployment/"+d.Name, &d.Spec.Template)
	}
	for _, s := range r.statefulSets {
		checkContainerNames(p, "StatefulSet/"+s.Name, &s.Spec.Template)
	}
	for _, s := range r.services {
		for _, sp := range s.Spec.Ports {
			for _, msg := range validation.IsValidPortName(sp.Name) {
				p.addf("Service/"+s.Name, "invalid port name %q: %s", sp.Name, msg)
			}
		}
	}
}

func checkContainerNames(p *problems, workload string, pod *corev1.PodTemplateSpec) {
	for _, c := range append(slices.Clone(pod.Spec.InitContainers), pod.Spec.Containers...) {
		obj := fmt.Sprintf("%s container %s", workload, c.Name)
		for _, cp := range c.Ports {
			for _, msg := range validation.IsValidPortName(cp.Name) {
				p.addf(obj, "invalid port name %q: %s", cp.Name, msg)
			}
		}
		for _, e := range c.Env {
			for _, msg := range validation.IsEnvVarName(e.Name) {
				p.addf(obj, "invalid environment variable name %q: %s", e.Name, msg)
			}
		}
	}
}

func checkPodSecurity(p *problems, obj string, spec *corev1.PodSpec) {
	if spec.HostNetwork || spec.HostPID || spec.HostIPC {
		p.addf(obj, "shares a host namespace")
	}
	for _, v := range spec.Volumes {
		if v.HostPath != nil {
			p.addf(obj, "volume %s mounts the host path %s", v.Name, v.HostPath.Path)
		}
	}
}

// checkContainerSecurity checks the effective security context (the container's settings over
// the pod's).
func checkContainerSecurity(p *problems, obj string, pod *corev1.PodSecurityContext, c *corev1.SecurityContext) {
	if pod == nil {
		pod = &corev1.PodSecurityContext{}
	}
	if c == nil {
		c = &corev1.SecurityContext{}
	}
	if runAsNonRoot := override(c.RunAsNonRoot, pod.RunAsNonRoot); runAsNonRoot == nil || !*runAsNonRoot {
		p.addf(obj, "runAsNonRoot is not true")
	}
	for _, id := range []struct {
		field, name string
		value       *int64
		unset       string
	}{
		{"runAsUser", "user", override(c.RunAsUser, pod.RunAsUser), "the image decides which user runs it"},
		{"runAsGroup", "group", override(c.RunAsGroup, pod.RunAsGroup), "the image decides the group, and with it who may read the mounted Secrets"},
	} {
		switch {
		case id.value == nil:
			p.addf(obj, "no fixed %s: %s", id.field, id.unset)
		case *id.value == 0:
			p.addf(obj, "runs as %s 0", id.name)
		}
	}
	if c.ReadOnlyRootFilesystem == nil || !*c.ReadOnlyRootFilesystem {
		p.addf(obj, "readOnlyRootFilesystem is not true")
	}
	if c.AllowPrivilegeEscalation == nil || *c.AllowPrivilegeEscalation {
		p.addf(obj, "allowPrivilegeEscalation is not false")
	}
	if c.Privileged != nil && *c.Privileged {
		p.addf(obj, "is privileged")
	}
	if c.Capabilities == nil || !slices.Contains(c.Capabilities.Drop, "ALL") {
		p.addf(obj, "does not drop ALL capabilities")
	} else if len(c.Capabilities.Add) > 0 {
		p.addf(obj, "adds capabilities %v", c.Capabilities.Add)
	}
	if seccomp := override(c.SeccompProfile, pod.SeccompProfile); seccomp == nil || (seccomp.Type != corev1.SeccompProfileTypeRuntimeDefault && seccomp.Type != corev1.SeccompProfileTypeLocalhost) {
		p.addf(obj, "seccompProfile is not RuntimeDefault")
	}
}

// override returns the container's setting when it has one, else the pod's.
func override[T any](container, pod *T) *T {
	if container != nil {
		return container
	}
	return pod
}

func checkResources(p *problems, obj string, res corev1.ResourceRequirements) {
	for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		req, hasReq := res.Requests[name]
		lim, hasLim := res.Limits[name]
		if !hasReq {
			p.addf(obj, "no %s request", name)
		}
		if !hasLim {
			p.addf(obj, "no %s limit", name)
		}
		if hasReq && hasLim && req.Cmp(lim) > 0 {
			p.addf(obj, "%s request %s exceeds its limit %s", name, req.String(), lim.String())
		}
	}
}

func checkImage(p *problems, obj, image string) {
	if strings.Contains(image, "@sha256:") {
		return
	}
	name := image[strings.LastIndex(image, "/")+1:]
	_, tag, ok := strings.Cut(name, ":")
	if !ok || tag == "" || tag == "latest" {
		p.addf(obj, "image %q has no pinned tag", image)
	}
}

func checkHPA(p *problems, r *rendered, h *autoscalingv2.HorizontalPodAutoscaler) {
	obj := "HorizontalPodAutoscaler/" + h.Name
	ref := h.Spec.ScaleTargetRef
	found := false
	switch ref.Kind {
	case "Deployment":
		for _, d := range r.deployments {
			found = found || (d.Namespace == h.Namespace && d.Name == ref.Name)
		}
	case "StatefulSet":
		for _, s := range r.statefulSets {
			found = found || (s.Namespace == h.Namespace && s.Name == ref.Name)
		}
	}
	if !found || ref.APIVersion != "apps/v1" {
		p.addf(obj, "scaleTargetRef %s %s/%s is not a workload in the render", ref.APIVersion, ref.Kind, ref.Name)
	}
	if h.Spec.MinReplicas == nil || *h.Spec.MinReplicas < 1 {
		p.addf(obj, "minReplicas is not set to at least 1")
	} else if *h.Spec.MinReplicas > h.Spec.MaxReplicas {
		p.addf(obj, "minReplicas %d exceeds maxReplicas %d", *h.Spec.MinReplicas, h.Spec.MaxReplicas)
	}
	if len(h.Spec.Metrics) == 0 {
		p.addf(obj, "no metrics")
	}
}

func checkPDB(p *problems, r *rendered, b *policyv1.PodDisruptionBudget) {
	obj := "PodDisruptionBudget/" + b.Name
	if (b.Spec.MinAvailable == nil) == (b.Spec.MaxUnavailable == nil) {
		p.addf(obj, "needs exactly one of minAvailable and maxUnavailable")
	}
	sel, err := metav1.LabelSelectorAsSelector(b.Spec.Selector)
	if err != nil || sel.Empty() {
		p.addf(obj, "selector is empty or invalid: %v", err)
		return
	}
	for _, pod := range podTemplates(r, b.Namespace) {
		if sel.Matches(labels.Set(pod.Labels)) {
			return
		}
	}
	p.addf(obj, "selects no workload's pods")
}

func checkService(p *problems, r *rendered, s *corev1.Service) {
	obj := "Service/" + s.Name
	if len(s.Spec.Selector) == 0 {
		p.addf(obj, "has no selector")
		return
	}
	var pods []*corev1.PodTemplateSpec
	for _, pod := range podTemplates(r, s.Namespace) {
		if selects(s.Spec.Selector, pod.Labels) {
			pods = append(pods, pod)
		}
	}
	if len(pods) == 0 {
		p.addf(obj, "selects no workload's pods")
		return
	}
	for _, sp := range s.Spec.Ports {
		target := sp.TargetPort
		if target.IntVal == 0 && target.StrVal == "" {
			target = intstr.FromInt32(sp.Port)
		}
		for _, pod := range pods {
			exposed := false
			for _, c := range pod.Spec.Containers {
				exposed = exposed || hasPort(c, target)
			}
			if !exposed {
				p.addf(obj, "port %s targets %s, which its pods do not expose", sp.Name, target.String())
			}
		}
	}
}

func hpaFor(r *rendered, ns, kind, name string) *autoscalingv2.HorizontalPodAutoscaler {
	for _, h := range r.hpas {
		ref := h.Spec.ScaleTargetRef
		if h.Namespace == ns && ref.Kind == kind && ref.Name == name {
			return h
		}
	}
	return nil
}

func pdbsSelecting(r *rendered, ns string, podLabels map[string]string) []*policyv1.PodDisruptionBudget {
	var out []*policyv1.PodDisruptionBudget
	for _, b := range r.pdbs {
		sel, err := metav1.LabelSelectorAsSelector(b.Spec.Selector)
		if err == nil && !sel.Empty() && b.Namespace == ns && sel.Matches(labels.Set(podLabels)) {
			out = append(out, b)
		}
	}
	return out
}

// disruptionsAllowed is how many of n healthy pods the budget lets be evicted, as the
// disruption controller computes it (percentages of minAvailable round up, of maxUnavailable
// round up too).
func disruptionsAllowed(b *policyv1.PodDisruptionBudget, n int) int {
	scaled := func(v *intstr.IntOrString) int {
		if v.Type == intstr.Int {
			return v.IntValue()
		}
		pct, err := intstr.GetScaledValueFromIntOrPercent(v, n, true)
		if err != nil {
			return math.MaxInt
		}
		return pct
	}
	switch {
	case b.Spec.MinAvailable != nil:
		return n - scaled(b.Spec.MinAvailable)
	case b.Spec.MaxUnavailable != nil:
		return scaled(b.Spec.MaxUnavailable)
	}
	return n
}

func hasServiceWithGRPCPort(r *rendered, ns string, pod *corev1.PodTemplateSpec) bool {
	for _, s := range r.services {
		if s.Namespace != ns || !selects(s.Spec.Selector, pod.Labels) {
			continue
		}
		for _, sp := range s.Spec.Ports {
			if sp.Name == "grpc" {
				return true
			}
		}
	}
	return false
}

func podTemplates(r *rendered, ns string) []*corev1.PodTemplateSpec {
	var out []*corev1.PodTemplateSpec
	for _, d := range r.deployments {
		if d.Namespace == ns {
			out = append(out, &d.Spec.Template)
		}
	}
	for _, s := range r.statefulSets {
		if s.Namespace == ns {
			out = append(out, &s.Spec.Template)
		}
	}
	return out
}

// selects reports whether a Service-style equality selector matches the labels.
func selects(selector, podLabels map[string]string) bool {
	return len(selector) > 0 && labels.SelectorFromSet(selector).Matches(labels.Set(podLabels))
}

func hasPort(c corev1.Container, port intstr.IntOrString) bool {
	for _, cp := range c.Ports {
		if (port.Type == intstr.Int && cp.ContainerPort == port.IntVal) || (port.Type == intstr.String && cp.Name == port.StrVal) {
			return true
		}
	}
	return false
}

func mounted(spec *corev1.PodSpec, volume string) bool {
	for _, c := range spec.Containers {
		for _, m := range c.VolumeMounts {
			if m.Name == volume {
				return true
			}
		}
	}
	return false
}
