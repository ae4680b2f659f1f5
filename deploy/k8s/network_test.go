package k8s_test

import (
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// endpoint is one end of a connection: a pod (a namespace, its labels, the ports its containers
// declare) or a host outside the cluster. Every endpoint has an address, so ipBlock rules are
// evaluated against pods too: whether an implementation applies them to pod traffic is
// implementation-defined, and the reachability computed here assumes it may.
type endpoint struct {
	name      string
	host      bool   // outside the cluster: no namespace, no labels
	namespace string // a pod's namespace ("" for the pods of a base, which sets none)
	labels    map[string]string
	addr      netip.Addr
	ports     []corev1.ContainerPort
}

// namespaceLabels are the labels the API server sets on every namespace.
func (e endpoint) namespaceLabels() labels.Set {
	return labels.Set{"kubernetes.io/metadata.name": e.namespace}
}

// connection is traffic to one port of an endpoint.
type connection struct {
	port     int32
	protocol corev1.Protocol
}

func (c connection) String() string {
	if c.protocol == corev1.ProtocolTCP {
		return fmt.Sprint(c.port)
	}
	return fmt.Sprintf("%d/%s", c.port, c.protocol)
}

// policyTypes returns the directions a NetworkPolicy restricts, as the API server defaults them.
func policyTypes(np *networkingv1.NetworkPolicy) []networkingv1.PolicyType {
	if len(np.Spec.PolicyTypes) > 0 {
		return np.Spec.PolicyTypes
	}
	types := []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}
	if len(np.Spec.Egress) > 0 {
		types = append(types, networkingv1.PolicyTypeEgress)
	}
	return types
}

// selecting returns the policies that select the pod for the direction; a host outside the
// cluster is selected by none.
func (r *rendered) selecting(e endpoint, dir networkingv1.PolicyType) []*networkingv1.NetworkPolicy {
	if e.host {
		return nil
	}
	var out []*networkingv1.NetworkPolicy
	for _, np := range r.netpols {
		if np.Namespace != e.namespace || !slices.Contains(policyTypes(np), dir) {
			continue
		}
		if sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector); err == nil && sel.Matches(labels.Set(e.labels)) {
			out = append(out, np)
		}
	}
	return out
}

// allows reports whether the policies let src open conn to dst: src's egress policies (if any
// select it) and dst's ingress policies (if any select it) must both allow it.
func (r *rendered) allows(src, dst endpoint, conn connection) bool {
	if egress := r.selecting(src, networkingv1.PolicyTypeEgress); egress != nil {
		ok := false
		for _, np := range egress {
			for _, rule := range np.Spec.Egress {
				ok = ok || (peersMatch(np.Namespace, rule.To, dst) && portsMatch(rule.Ports, dst, conn))
			}
		}
		if !ok {
			return false
		}
	}
	if ingress := r.selecting(dst, networkingv1.PolicyTypeIngress); ingress != nil {
		for _, np := range ingress {
			for _, rule := range np.Spec.Ingress {
				if peersMatch(np.Namespace, rule.From, src) && portsMatch(rule.Ports, dst, conn) {
					return true
				}
			}
		}
		return false
	}
	return true
}

// peersMatch reports whether a rule's peers include e; no peers means everyone.
func peersMatch(policyNS string, peers []networkingv1.NetworkPolicyPeer, e endpoint) bool {
	if len(peers) == 0 {
		return true
	}
	for _, peer := range peers {
		if peerMatches(policyNS, peer, e) {
			return true
		}
	}
	return false
}

func peerMatches(policyNS string, peer networkingv1.NetworkPolicyPeer, e endpoint) bool {
	if b := peer.IPBlock; b != nil {
		cidr, err := netip.ParsePrefix(b.CIDR)
		if err != nil || !cidr.Contains(e.addr) {
			return false
		}
		for _, ex := range b.Except {
			if p, err := netip.ParsePrefix(ex); err != nil || p.Contains(e.addr) {
				return false
			}
		}
		return true
	}
	if e.host {
		return false // pod and namespace selectors select pods only
	}
	matches := func(ls *metav1.LabelSelector, set labels.Set) bool {
		sel, err := metav1.LabelSelectorAsSelector(ls)
		return err == nil && sel.Matches(set)
	}
	switch {
	case peer.NamespaceSelector != nil:
		return matches(peer.NamespaceSelector, e.namespaceLabels()) &&
			(peer.PodSelector == nil || matches(peer.PodSelector, labels.Set(e.labels)))
	case peer.PodSelector != nil:
		return e.namespace == policyNS && matches(peer.PodSelector, labels.Set(e.labels))
	}
	return false
}

// portsMatch reports whether a rule's ports include conn to dst; no ports means every port.
// A named port means the destination container's port of that name.
func portsMatch(ports []networkingv1.NetworkPolicyPort, dst endpoint, conn connection) bool {
	if len(ports) == 0 {
		return true
	}
	for _, p := range ports {
		protocol := corev1.ProtocolTCP
		if p.Protocol != nil {
			protocol = *p.Protocol
		}
		if protocol != conn.protocol {
			continue
		}
		switch {
		case p.Port == nil:
			return true
		case p.Port.Type == intstr.Int:
			end := p.Port.IntVal
			if p.EndPort != nil {
				end = *p.EndPort
			}
			if conn.port >= p.Port.IntVal && conn.port <= end {
				return true
			}
		default:
			for _, cp := range dst.ports {
				cpProtocol := cp.Protocol
				if cpProtocol == "" {
					cpProtocol = corev1.ProtocolTCP
				}
				if cp.Name == p.Port.StrVal && cp.ContainerPort == conn.port && cpProtocol == conn.protocol {
					return true
				}
			}
		}
	}
	return false
}

// candidateConnections are the connections whose outcome can differ: every port a policy or a
// container names, and port 1 standing for every other port (a rule without ports). Checking
// these is checking every port.
func (r *rendered) candidateConnections(endpoints []endpoint) []connection {
	set := map[connection]bool{}
	add := func(port int32) {
		for _, proto := range []corev1.Protocol{corev1.ProtocolTCP, corev1.ProtocolUDP} {
			set[connection{port, proto}] = true
		}
	}
	add(1)
	for _, e := range endpoints {
		for _, cp := range e.ports {
			add(cp.ContainerPort)
		}
	}
	for _, np := range r.netpols {
		_, ports := rules(np)
		for _, p := range ports {
			if p.Port != nil && p.Port.Type == intstr.Int {
				add(p.Port.IntVal)
				if p.EndPort != nil {
					add(*p.EndPort)
				}
			}
		}
	}
	out := make([]connection, 0, len(set))
	for c := range set {
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].port != out[j].port {
			return out[i].port < out[j].port
		}
		return out[i].protocol < out[j].protocol
	})
	return out
}

// workloadEndpoints are the render's pods, one per workload, with addresses from a pod network.
func (r *rendered) workloadEndpoints() []endpoint {
	var out []endpoint
	add := func(name, ns string, pod *corev1.PodTemplateSpec) {
		e := endpoint{name: name, namespace: ns, labels: pod.Labels, addr: netip.AddrFrom4([4]byte{10, 244, 1, byte(len(out) + 10)})}
		for _, c := range pod.Spec.Containers {
			e.ports = append(e.ports, c.Ports...)
		}
		out = append(out, e)
	}
	for _, d := range r.deployments {
		add(d.Name, d.Namespace, &d.Spec.Template)
	}
	for _, s := range r.statefulSets {
		add(s.Name, s.Namespace, &s.Spec.Template)
	}
	return out
}

// outsiders are the endpoints that are not the render's: pods in other namespaces (one labelled
// like the orchestrator, to show that labels alone do not let it in), the cluster's DNS, and
// hosts outside the cluster, among them the cloud metadata services.
func outsiders() []endpoint {
	ip := netip.MustParseAddr
	dns := []corev1.ContainerPort{{Name: "dns", ContainerPort: 53, Protocol: corev1.ProtocolUDP}, {Name: "dns-tcp", ContainerPort: 53, Protocol: corev1.ProtocolTCP}}
	return []endpoint{
		{name: "impostor", namespace: "elsewhere", labels: map[string]string{"app.kubernetes.io/name": "hermes-orchestrator", "app.kubernetes.io/part-of": "hermes"}, addr: ip("10.244.7.7")},
		{name: "prometheus", namespace: "monitoring", labels: map[string]string{"app.kubernetes.io/name": "prometheus"}, addr: ip("10.244.8.8")},
		{name: "kube-dns", namespace: "kube-system", labels: map[string]string{"k8s-app": "kube-dns"}, addr: ip("10.244.0.2"), ports: dns},
		{name: "nodelocaldns", host: true, addr: ip("169.254.20.10"), ports: dns},
		{name: "internet", host: true, addr: ip("203.0.113.10")},
		{name: "internet6", host: true, addr: ip("2001:db8::10")},
		{name: "node", host: true, addr: ip("10.0.0.5")},
		{name: "metadata", host: true, addr: ip("169.254.169.254")},
		{name: "metadata6", host: true, addr: ip("fd00:ec2::254")},
		{name: "azure-wireserver", host: true, addr: ip("168.63.129.16")},
		{name: "alibaba-metadata", host: true, addr: ip("100.100.100.200")},
		{name: "metadata-v4mapped", host: true, addr: ip("::ffff:169.254.169.254")},
	}
}

// metadataServices are the outsiders no pod may reach on any port.
var metadataServices = []string{"metadata", "metadata6", "azure-wireserver", "alibaba-metadata", "metadata-v4mapped"}

// reachability computes, for each source, the destinations and ports it may open connections
// to ("hermes-redis:6379", "kube-dns:53/UDP"), over every candidate connection. A source is also
// a destination: another pod of the same workload (NATS' cluster routes).
func (r *rendered) reachability(sources, destinations []endpoint) map[string][]string {
	conns := r.candidateConnections(append(slices.Clone(sources), destinations...))
	out := map[string][]string{}
	for _, src := range sources {
		reached := []string{}
		for _, dst := range destinations {
			for _, c := range conns {
				if r.allows(src, dst, c) {
					reached = append(reached, dst.name+":"+c.String())
				}
			}
		}
		sort.Strings(reached)
		out[src.name] = reached
	}
	return out
}

// checkNetworkCoverage: every pod's ingress and egress are restricted by some NetworkPolicy, and
// every policy or peer that names workloads (app.kubernetes.io/name) names some of the render.
func checkNetworkCoverage(p *problems, r *rendered) {
	pods := r.workloadEndpoints()
	for _, e := range pods {
		for _, dir := range []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress} {
			if len(r.selecting(e, dir)) == 0 {
				p.addf(e.name, "no NetworkPolicy restricts its %s", dir)
			}
		}
	}
	for _, np := range r.netpols {
		obj := "NetworkPolicy/" + np.Name
		sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
		if err != nil {
			p.addf(obj, "invalid podSelector: %v", err)
			continue
		}
		if namesWorkload(&np.Spec.PodSelector) && !slices.ContainsFunc(pods, func(e endpoint) bool { return sel.Matches(labels.Set(e.labels)) }) {
			p.addf(obj, "selects no workload's pods")
		}
		peers, _ := rules(np)
		for _, peer := range peers {
			if peer.PodSelector == nil || peer.NamespaceSelector != nil || !namesWorkload(peer.PodSelector) {
				continue
			}
			if !slices.ContainsFunc(pods, func(e endpoint) bool { return peerMatches(np.Namespace, peer, e) }) {
				p.addf(obj, "peer %s selects no workload's pods", metav1.FormatLabelSelector(peer.PodSelector))
			}
		}
	}
}

// rules returns the peers and ports of all a policy's rules, ingress and egress.
func rules(np *networkingv1.NetworkPolicy) (peers []networkingv1.NetworkPolicyPeer, ports []networkingv1.NetworkPolicyPort) {
	for _, rule := range np.Spec.Ingress {
		peers, ports = append(peers, rule.From...), append(ports, rule.Ports...)
	}
	for _, rule := range np.Spec.Egress {
		peers, ports = append(peers, rule.To...), append(ports, rule.Ports...)
	}
	return peers, ports
}

// namesWorkload reports whether a selector picks workloads by app.kubernetes.io/name.
func namesWorkload(ls *metav1.LabelSelector) bool {
	if _, ok := ls.MatchLabels["app.kubernetes.io/name"]; ok {
		return true
	}
	for _, req := range ls.MatchExpressions {
		if req.Key == "app.kubernetes.io/name" {
			return true
		}
	}
	return false
}

// wantReachability is who may open connections to whom in every full render (base, dev,
// prod): the table of base/network/kustomization.yaml. Every port a policy or a container
// names is checked, and port 1 stands for all the others.
var wantReachability = map[string][]string{
	"hermes-orchestrator": {
		"hermes-mcpgateway:7070", "hermes-memory:7070", "hermes-nats:4222", "hermes-redis:6379", "hermes-session:7070", "hermes-tools:7070",
		"internet6:443", "internet:443", "kube-dns:53", "kube-dns:53/UDP", "nodelocaldns:53", "nodelocaldns:53/UDP",
	},
	"hermes-session": {"hermes-redis:6379", "kube-dns:53", "kube-dns:53/UDP", "nodelocaldns:53", "nodelocaldns:53/UDP"},
	"hermes-tools": {
		"hermes-mcpgateway:7070", "hermes-redis:6379",
		"internet6:443", "internet6:80", "internet:443", "internet:80", "kube-dns:53", "kube-dns:53/UDP", "nodelocaldns:53", "nodelocaldns:53/UDP",
	},
	"hermes-mcpgateway": {
		"hermes-nats:4222", "hermes-redis:6379", "hermes-tools:7070",
		"internet6:443", "internet6:80", "internet:443", "internet:80", "kube-dns:53", "kube-dns:53/UDP", "nodelocaldns:53", "nodelocaldns:53/UDP",
	},
	"hermes-memory": {
		"hermes-nats:4222", "hermes-qdrant:6334", "hermes-redis:6379",
		"internet6:443", "internet:443", "kube-dns:53", "kube-dns:53/UDP", "nodelocaldns:53", "nodelocaldns:53/UDP",
	},
	"hermes-redis":  {},
	"hermes-nats":   {"hermes-nats:6222", "kube-dns:53", "kube-dns:53/UDP", "nodelocaldns:53", "nodelocaldns:53/UDP"},
	"hermes-qdrant": {},
	// A pod of another namespace, even one labelled like the orchestrator, reaches only the
	// public door, the edge (gRPC 7070, HTTP/JSON 8080); so does the internet; the monitoring
	// namespace reaches the metrics ports.
	"impostor":   {"hermes-orchestrator:7070", "hermes-orchestrator:8080"},
	"internet":   {"hermes-orchestrator:7070", "hermes-orchestrator:8080"},
	"node":       {"hermes-orchestrator:7070", "hermes-orchestrator:8080"},
	"prometheus": {"hermes-mcpgateway:9090", "hermes-memory:9090", "hermes-orchestrator:7070", "hermes-orchestrator:8080", "hermes-orchestrator:9090", "hermes-session:9090", "hermes-tools:9090"},
}

// TestReachability computes who may reach whom from the rendered NetworkPolicies and compares
// it with wantReachability; then states the two rules that matter most on their own.
func TestReachability(t *testing.T) {
	for _, dir := range []string{"base", "overlays/dev", "overlays/prod"} {
		t.Run(dir, func(t *testing.T) {
			r, err := renderDisk(dir)
			if err != nil {
				t.Fatal(err)
			}
			checkReachability(t, r, nil)
		})
	}
}

// checkReachability compares the render's reachability with wantReachability changed by
// extra (source -> destinations added), and checks that nothing outside the namespace reaches
// an internal service or a backend (except Prometheus the metrics ports) and that no pod
// reaches a cloud metadata service on any port.
func checkReachability(t *testing.T, r *rendered, extra map[string][]string, more ...endpoint) {
	t.Helper()
	pods := append(r.workloadEndpoints(), more...)
	var sources, hosts []endpoint
	for _, o := range outsiders() {
		if slices.Contains([]string{"impostor", "prometheus", "internet", "node"}, o.name) {
			sources = append(sources, o)
		}
		hosts = append(hosts, o)
	}
	want := map[string][]string{}
	for src, dsts := range wantReachability {
		want[src] = append(slices.Clone(dsts), extra[src]...)
		sort.Strings(want[src])
	}
	for src, dsts := range extra {
		if _, ok := want[src]; !ok {
			want[src] = slices.Sorted(slices.Values(dsts))
		}
	}
	got := r.reachability(pods, append(slices.Clone(pods), hosts...))
	for src, dsts := range r.reachability(sources, pods) {
		got[src] = dsts
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("reachability (-want +got):\n%s", diff)
	}

	conns := r.candidateConnections(append(slices.Clone(pods), hosts...))
	internal := []string{"hermes-session", "hermes-tools", "hermes-mcpgateway", "hermes-memory", "hermes-redis", "hermes-nats", "hermes-qdrant"}
	for _, dst := range pods {
		if !slices.Contains(internal, dst.name) {
			continue
		}
		for _, src := range sources {
			for _, c := range conns {
				metrics := src.name == "prometheus" && c.port == 9090 && c.protocol == corev1.ProtocolTCP
				if r.allows(src, dst, c) && !metrics {
					t.Errorf("%s (outside the namespace) reaches %s:%s", src.name, dst.name, c)
				}
			}
		}
	}
	for _, src := range pods {
		for _, dst := range hosts {
			if !slices.Contains(metadataServices, dst.name) {
				continue
			}
			for _, c := range conns {
				if r.allows(src, dst, c) {
					t.Errorf("%s reaches the metadata service %s (%s) on %s", src.name, dst.name, dst.addr, c)
				}
			}
		}
	}
}

// TestReachabilityOptions: what an overlay turns on opens exactly its own door:
// components/mcp-endpoint opens the MCP endpoint to labelled client pods only.
func TestReachabilityOptions(t *testing.T) {
	client := endpoint{name: "mcp-client", namespace: "hermes-dev", labels: map[string]string{"hermes-mcp-client": "true"}, addr: netip.MustParseAddr("10.244.9.9")}
	tests := []struct {
		name          string
		kustomization string
		more          []endpoint
		extra         map[string][]string
	}{
		{
			name:          "MCP endpoint",
			kustomization: "namespace: hermes-dev\nresources: [../dev]\ncomponents: [../../components/mcp-endpoint]\n",
			more:          []endpoint{client},
			extra: map[string][]string{
				"mcp-client": {"hermes-mcpgateway:7071", "kube-dns:53", "kube-dns:53/UDP", "nodelocaldns:53", "nodelocaldns:53/UDP"},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fSys := diskCopy(t)
			if err := fSys.WriteFile("/k8s/overlays/test/kustomization.yaml", []byte(tt.kustomization)); err != nil {
				t.Fatal(err)
			}
			r, err := render(fSys, "/k8s/overlays/test")
			if err != nil {
				t.Fatal(err)
			}
			checkReachability(t, r, tt.extra, tt.more...)
		})
	}
}

// diskCopy copies deploy/k8s (its YAML and config files) into an in-memory file system at /k8s,
// so a test can add an overlay of its own next to the real ones.
func diskCopy(t *testing.T) filesys.FileSystem {
	t.Helper()
	fSys := filesys.MakeFsInMemory()
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.HasSuffix(path, ".go") || strings.HasSuffix(path, ".md") {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return fSys.WriteFile(filepath.Join("/k8s", path), data)
	})
	if err != nil {
		t.Fatal(err)
	}
	return fSys
}
