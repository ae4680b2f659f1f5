package k8s_test

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// tokenOff reports whether the pod mounts no ServiceAccount token: set on the pod, or on its
// ServiceAccount and not overridden by the pod.
func tokenOff(r *rendered, ns string, spec *corev1.PodSpec) bool {
	if spec.AutomountServiceAccountToken != nil {
		return !*spec.AutomountServiceAccountToken
	}
	sa := r.serviceAccounts[ns+"/"+spec.ServiceAccountName]
	return sa != nil && sa.AutomountServiceAccountToken != nil && !*sa.AutomountServiceAccountToken
}

// secretHasKey reports false only when the render holds the Secret, or the Certificate that
// writes it, and that has no such key. A Secret created outside the render is not known here.
func secretHasKey(r *rendered, ns, name, key string) bool {
	if s := r.secrets[ns+"/"+name]; s != nil {
		_, inData := s.Data[key]
		_, inString := s.StringData[key]
		return inData || inString
	}
	if r.certificateFor(ns, name) != nil {
		return slices.Contains(certificateKeys, key)
	}
	return true
}

// containerPort returns the number of the container's port with that name.
func containerPort(c corev1.Container, name string) (int32, bool) {
	for _, cp := range c.Ports {
		if cp.Name == name {
			return cp.ContainerPort, true
		}
	}
	return 0, false
}

// resolvePort returns the number a probe's or Service's port means for the container.
func resolvePort(c corev1.Container, port intstr.IntOrString) (int32, bool) {
	if port.Type == intstr.Int {
		return port.IntVal, port.IntVal > 0
	}
	return containerPort(c, port.StrVal)
}

// secretLikeName matches names of variables and keys whose value is a credential.
var secretLikeName = regexp.MustCompile(`(?i)(PASSWORD|PASSWD|_API_KEY|APIKEY|_TOKEN|_SECRET|CREDENTIALS?)$|^REDISCLI_AUTH$`)

// envReference is a Kubernetes dependent variable, $(NAME), expanded by the kubelet.
var envReference = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// urlUserinfo finds scheme://user:password@ in a value; the password is group 2.
var urlUserinfo = regexp.MustCompile(`[a-zA-Z][a-zA-Z0-9+.-]*://([^\s/@:]*):([^\s/@]*)@`)

// configPassword finds passwords in configuration files: Redis' requirepass and masterauth, and
// NATS-style password/token keys. A value that starts with $ is a reference, not a password.
var configPassword = regexp.MustCompile(`(?mi)^\s*(requirepass|masterauth)\s+(\S+)|^\s*(password|pass|token|auth_token)\s*[:=]\s*([^\s#]+)`)

// checkEnvSecrets: no credential is a literal in a container's env or command line, a URL's
// password is a $(NAME) reference to a variable from a Secret, every $(NAME) is defined before
// it is used, and HERMES_INSECURE_NO_AUTH appears nowhere.
func checkEnvSecrets(p *problems, obj string, c corev1.Container) {
	defined := map[string]bool{}
	for _, e := range c.Env {
		if e.Name == "HERMES_INSECURE_NO_AUTH" {
			p.addf(obj, "sets HERMES_INSECURE_NO_AUTH: a listener without keys is for a laptop, never for a cluster")
		}
		if e.ValueFrom == nil {
			if secretLikeName.MatchString(e.Name) && e.Value != "" {
				p.addf(obj, "env %s holds a literal value: a credential comes from a secretKeyRef", e.Name)
			}
			for _, m := range urlUserinfo.FindAllStringSubmatch(e.Value, -1) {
				if !isReference(m[2]) {
					p.addf(obj, "env %s: the URL carries its password in clear; use $(NAME) with NAME from a secretKeyRef", e.Name)
				}
			}
			for _, m := range envReference.FindAllStringSubmatch(e.Value, -1) {
				if !defined[m[1]] {
					p.addf(obj, "env %s uses $(%s), which is not defined before it in env: the kubelet would pass it literally", e.Name, m[1])
				}
			}
		} else if e.ValueFrom.SecretKeyRef == nil && secretLikeName.MatchString(e.Name) {
			p.addf(obj, "env %s does not come from a Secret", e.Name)
		}
		defined[e.Name] = true
	}
	words := append(slices.Clone(c.Command), c.Args...)
	for i, w := range words {
		for _, m := range envReference.FindAllStringSubmatch(w, -1) {
			if !defined[m[1]] {
				p.addf(obj, "command or args use $(%s), which is not defined in env: the kubelet would pass it literally", m[1])
			}
		}
		if (w == "--requirepass" || w == "--masterauth") && i+1 < len(words) && !isReference(words[i+1]) {
			p.addf(obj, "%s is given in clear on the command line; use $(NAME) with NAME from a secretKeyRef", w)
		}
	}
}

// isReference reports whether a value is exactly one $(NAME) reference.
func isReference(v string) bool {
	m := envReference.FindStringIndex(v)
	return m != nil && m[0] == 0 && m[1] == len(v)
}

// checkNoClearSecrets: a ConfigMap holds no credential: no secret-like key with a value, no URL
// with a password, no password in a configuration file, no private key.
func checkNoClearSecrets(p *problems, cm *corev1.ConfigMap) {
	obj := "ConfigMap/" + cm.Name
	for _, k := range keys(cm.Data) {
		v := cm.Data[k]
		if secretLikeName.MatchString(k) && v != "" {
			p.addf(obj, "key %s holds a credential; put it in a Secret", k)
		}
		if strings.Contains(v, "PRIVATE KEY-----") {
			p.addf(obj, "key %s holds a private key; put it in a Secret", k)
		}
		for _, m := range urlUserinfo.FindAllStringSubmatch(v, -1) {
			if m[2] != "" && !isReference(m[2]) {
				p.addf(obj, "key %s: a URL carries its password in clear", k)
			}
		}
		for _, m := range configPassword.FindAllStringSubmatch(v, -1) {
			value := m[2] + m[4]
			if !strings.HasPrefix(value, "$") {
				p.addf(obj, "key %s: %s is written in clear; read it from the environment ($NAME) filled from a Secret", k, strings.TrimSpace(m[1]+m[3]))
			}
		}
	}
}

// tlsFiles are the TLS settings and the key of cert-manager's Secret layout each must name.
var tlsFiles = []struct{ env, key string }{
	{"HERMES_TLS_CERT", "tls.crt"},
	{"HERMES_TLS_KEY", "tls.key"},
	{"HERMES_TLS_CA", "ca.crt"},
	{"HERMES_TLS_CLIENT_CA", "ca.crt"},
}

// checkHermesTLS: a Hermes container serves and calls with mutual TLS, from files of one mounted
// Secret in cert-manager's layout (a Certificate of the render, when it has one, for the
// service's names, issued by a CA); only the orchestrator accepts callers without a
// certificate; the API keys file is a mounted Secret.
func checkHermesTLS(p *problems, r *rendered, obj, ns string, spec *corev1.PodSpec, c corev1.Container, env map[string]envVar) {
	target := targetOf(c.Args)
	secrets := map[string]bool{}
	for _, f := range tlsFiles {
		v, ok := env[f.env]
		if !ok || !v.known || v.value == "" {
			p.addf(obj, "%s is not set: Hermes' services authenticate each other with mutual TLS", f.env)
			continue
		}
		secret, key, err := secretFile(spec, c, v.value)
		if err != nil {
			p.addf(obj, "%s=%s %v", f.env, v.value, err)
			continue
		}
		secrets[secret] = true
		if key != f.key {
			p.addf(obj, "%s=%s is key %q of Secret/%s; cert-manager writes it as %q", f.env, v.value, key, secret, f.key)
		} else if !secretHasKey(r, ns, secret, key) {
			p.addf(obj, "%s=%s: Secret/%s has no key %q", f.env, v.value, secret, key)
		}
	}
	if len(secrets) > 1 {
		p.addf(obj, "the TLS files come from different Secrets %v: certificate, key and CA belong together", keys(secrets))
	}
	for secret := range secrets {
		if cert := r.certificateFor(ns, secret); cert != nil {
			checkServiceCertificate(p, r, obj, target, cert)
		}
	}
	want := "require"
	if target == "orchestrator" {
		want = "optional" // users call it with API keys and no certificate
	}
	if v := env["HERMES_TLS_CLIENT_AUTH"]; !v.known || v.value != want {
		p.addf(obj, "HERMES_TLS_CLIENT_AUTH is %q, want %q for the %s target", v.value, want, target)
	}
	if v, ok := env["HERMES_AUTH_FILE"]; !ok || !v.known || v.value == "" {
		p.addf(obj, "HERMES_AUTH_FILE is not set: users and operators could not authenticate")
	} else if _, _, err := secretFile(spec, c, v.value); err != nil {
		p.addf(obj, "HERMES_AUTH_FILE=%s %v", v.value, err)
	}
}

// checkServiceCertificate: the certificate a target serves with names the Services it is
// reached by, works as server and client certificate, and comes from a CA Issuer (a self-signed
// certificate per service would share no CA with the others).
func checkServiceCertificate(p *problems, r *rendered, obj, target string, cert *certificate) {
	for _, name := range []string{"hermes-" + target, "hermes-" + target + "-headless"} {
		if !slices.Contains(cert.Spec.DNSNames, name) {
			p.addf(obj, "Certificate/%s does not name %s, which clients of the %s target dial", cert.Name, name, target)
		}
	}
	for _, u := range []string{"server auth", "client auth"} {
		if !slices.Contains(cert.Spec.Usages, u) {
			p.addf(obj, "Certificate/%s lacks the usage %q", cert.Name, u)
		}
	}
	if is := r.issuers[cert.Namespace+"/"+cert.Spec.IssuerRef.Name]; is != nil && is.Spec.CA == nil {
		p.addf(obj, "Certificate/%s is not issued by a CA Issuer, so no other service can verify it", cert.Name)
	}
}

// secretFile finds the Secret key a file path of the container comes from.
func secretFile(spec *corev1.PodSpec, c corev1.Container, path string) (secret, key string, err error) {
	var mount *corev1.VolumeMount
	for i, m := range c.VolumeMounts {
		if strings.HasPrefix(path, strings.TrimSuffix(m.MountPath, "/")+"/") && (mount == nil || len(m.MountPath) > len(mount.MountPath)) {
			mount = &c.VolumeMounts[i]
		}
	}
	if mount == nil {
		return "", "", errors.New("is in no mounted volume")
	}
	if mount.SubPath != "" || mount.SubPathExpr != "" {
		return "", "", fmt.Errorf("is in volume %s mounted with subPath, which never sees an updated Secret", mount.Name)
	}
	var vol *corev1.Volume
	for i, v := range spec.Volumes {
		if v.Name == mount.Name {
			vol = &spec.Volumes[i]
		}
	}
	if vol == nil || vol.Secret == nil {
		return "", "", fmt.Errorf("is in volume %s, which is not a Secret", mount.Name)
	}
	rel := strings.TrimPrefix(path, strings.TrimSuffix(mount.MountPath, "/")+"/")
	if len(vol.Secret.Items) == 0 {
		return vol.Secret.SecretName, rel, nil
	}
	for _, item := range vol.Secret.Items {
		if item.Path == rel {
			return vol.Secret.SecretName, item.Key, nil
		}
	}
	return "", "", fmt.Errorf("is not among the items volume %s projects from Secret/%s", mount.Name, vol.Secret.SecretName)
}

// secure replaces minimal's files with a whole Hermes in miniature: mutual TLS from a
// cert-manager Certificate, API keys from a Secret, TCP probes, and NetworkPolicies.
var secure = map[string]string{
	"kustomization.yaml": `apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources: [sa.yaml, deploy.yaml, svc.yaml, hpa.yaml, pdb.yaml, netpol.yaml, certs.yaml, secret.yaml]
configMapGenerator:
  - name: hermes-config
    literals: [HERMES_LISTEN=0.0.0.0:7070, HERMES_SESSION_ADDR=dns:///hermes-session:7070]
`,
	"deploy.yaml": `apiVersion: apps/v1
kind: Deployment
metadata: {name: hermes-session}
spec:
  selector: {matchLabels: {app.kubernetes.io/name: hermes-session}}
  template:
    metadata: {labels: {app.kubernetes.io/name: hermes-session}}
    spec:
      serviceAccountName: hermes-session
      automountServiceAccountToken: false
      enableServiceLinks: false
      terminationGracePeriodSeconds: 40
      securityContext: {runAsNonRoot: true, runAsUser: 65532, runAsGroup: 65532, seccompProfile: {type: RuntimeDefault}}
      containers:
        - name: hermes
          image: hermes:v1
          args: [serve, --target=session]
          ports: [{name: grpc, containerPort: 7070}, {name: health, containerPort: 8081}]
          envFrom: [{configMapRef: {name: hermes-config}}]
          env:
            - {name: HERMES_DRAIN_DELAY, value: 5s}
            - {name: HERMES_SHUTDOWN_TIMEOUT, value: 20s}
            - {name: HERMES_TLS_CERT, value: /etc/hermes/tls/tls.crt}
            - {name: HERMES_TLS_KEY, value: /etc/hermes/tls/tls.key}
            - {name: HERMES_TLS_CA, value: /etc/hermes/tls/ca.crt}
            - {name: HERMES_TLS_CLIENT_CA, value: /etc/hermes/tls/ca.crt}
            - {name: HERMES_TLS_CLIENT_AUTH, value: require}
            - {name: HERMES_AUTH_FILE, value: /etc/hermes/auth/auth.yaml}
            - {name: HERMES_HEALTH_LISTEN, value: "0.0.0.0:8081"}
          readinessProbe: {httpGet: {port: health, path: /readyz}}
          livenessProbe: {httpGet: {port: 8081, path: /livez}}
          resources:
            requests: {cpu: 10m, memory: 16Mi}
            limits: {cpu: 100m, memory: 64Mi}
          securityContext:
            readOnlyRootFilesystem: true
            allowPrivilegeEscalation: false
            capabilities: {drop: [ALL]}
          volumeMounts:
            - {name: tls, mountPath: /etc/hermes/tls, readOnly: true}
            - {name: auth, mountPath: /etc/hermes/auth, readOnly: true}
      volumes:
        - {name: tls, secret: {secretName: hermes-session-tls}}
        - {name: auth, secret: {secretName: hermes-secrets, items: [{key: auth.yaml, path: auth.yaml}]}}
`,
	"svc.yaml": `apiVersion: v1
kind: Service
metadata: {name: hermes-session}
spec:
  selector: {app.kubernetes.io/name: hermes-session}
  ports: [{name: grpc, port: 7070, targetPort: grpc}]
`,
	"pdb.yaml": `apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: hermes-session}
spec:
  maxUnavailable: 1
  selector: {matchLabels: {app.kubernetes.io/name: hermes-session}}
`,
	"netpol.yaml": `apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: hermes-session}
spec:
  podSelector: {matchLabels: {app.kubernetes.io/name: hermes-session}}
  policyTypes: [Ingress, Egress]
  ingress:
    - from: [{podSelector: {matchLabels: {app.kubernetes.io/name: hermes-session}}}]
`,
	"certs.yaml": `apiVersion: cert-manager.io/v1
kind: Issuer
metadata: {name: hermes-selfsigned}
spec: {selfSigned: {}}
---
apiVersion: cert-manager.io/v1
kind: Certificate
metadata: {name: hermes-ca}
spec:
  isCA: true
  commonName: hermes-ca
  secretName: hermes-ca
  duration: 43800h
  renewBefore: 8760h
  issuerRef: {name: hermes-selfsigned, kind: Issuer, group: cert-manager.io}
---
apiVersion: cert-manager.io/v1
kind: Issuer
metadata: {name: hermes-ca}
spec: {ca: {secretName: hermes-ca}}
---
apiVersion: cert-manager.io/v1
kind: Certificate
metadata: {name: hermes-session}
spec:
  secretName: hermes-session-tls
  dnsNames: [hermes-session, hermes-session-headless]
  usages: [digital signature, server auth, client auth]
  duration: 720h
  renewBefore: 240h
  issuerRef: {name: hermes-ca, kind: Issuer, group: cert-manager.io}
`,
	"secret.yaml": `apiVersion: v1
kind: Secret
metadata: {name: hermes-secrets}
stringData: {auth.yaml: "{}"}
`,
}

// TestSecurityPolicyRejects: each case breaks one rule of mutual TLS, API keys or
// NetworkPolicies in the secure kustomization, and the policy must name the problem.
func TestSecurityPolicyRejects(t *testing.T) {
	const container = "/spec/template/spec/containers/0"
	checkRejects(t, policy{settings: newSettings(), pinnedImages: true, whole: true}, secure, []rejectCase{
		{name: "valid"},
		{
			name:    "native gRPC probe on a TLS listener",
			patches: []string{jsonPatch("Deployment", `- {op: replace, path: `+container+`/readinessProbe, value: {grpc: {port: 7070, service: hermes.session.v1.SessionService}}}`)},
			want:    "readiness probe is a native gRPC health check, which the kubelet makes in plaintext",
		},
		{
			name:    "TCP probe of a TLS listener",
			patches: []string{jsonPatch("Deployment", `- {op: replace, path: `+container+`/livenessProbe, value: {tcpSocket: {port: grpc}}}`)},
			want:    "liveness probe is a TCP connect, which says nothing about the service's state",
		},
		{
			name:    "HTTP probe on another port",
			patches: []string{jsonPatch("Deployment", `- {op: replace, path: `+container+`/livenessProbe/httpGet/port, value: 7070}`)},
			want:    "liveness probe gets port 7070, not the health listener's port 8081",
		},
		{
			name:    "readiness probe on the liveness path",
			patches: []string{jsonPatch("Deployment", `- {op: replace, path: `+container+`/readinessProbe/httpGet/path, value: /livez}`)},
			want:    `readiness probe gets "/livez", want /readyz`,
		},
		{
			name: "TLS listener without a health listener",
			patches: []string{jsonPatch("Deployment", `- {op: remove, path: `+container+`/env/8}`+"\n"+
				`- {op: replace, path: `+container+`/readinessProbe, value: {tcpSocket: {port: grpc}}}`+"\n"+
				`- {op: replace, path: `+container+`/livenessProbe, value: {tcpSocket: {port: grpc}}}`)},
			want: "there is no plaintext health listener (HERMES_HEALTH_LISTEN) to probe instead",
		},
		{
			name:    "no CA to verify the services it calls",
			patches: []string{jsonPatch("Deployment", `- {op: remove, path: `+container+`/env/4}`)},
			want:    "HERMES_TLS_CA is not set",
		},
		{
			name:    "internal service accepting callers without a certificate",
			patches: []string{jsonPatch("Deployment", `- {op: replace, path: `+container+`/env/6/value, value: optional}`)},
			want:    `HERMES_TLS_CLIENT_AUTH is "optional", want "require" for the session target`,
		},
		{
			name:    "certificate mounted with subPath",
			patches: []string{jsonPatch("Deployment", `- {op: add, path: `+container+`/volumeMounts/0/subPath, value: tls.crt}`)},
			want:    "HERMES_TLS_CERT=/etc/hermes/tls/tls.crt is in volume tls mounted with subPath",
		},
		{
			name:    "key file under another name",
			patches: []string{jsonPatch("Deployment", `- {op: replace, path: `+container+`/env/3/value, value: /etc/hermes/tls/key.pem}`)},
			want:    `HERMES_TLS_KEY=/etc/hermes/tls/key.pem is key "key.pem" of Secret/hermes-session-tls; cert-manager writes it as "tls.key"`,
		},
		{
			name:    "API keys in a ConfigMap",
			patches: []string{jsonPatch("Deployment", `- {op: replace, path: /spec/template/spec/volumes/1, value: {name: auth, configMap: {name: hermes-config}}}`)},
			want:    "HERMES_AUTH_FILE=/etc/hermes/auth/auth.yaml is in volume auth, which is not a Secret",
		},
		{
			name:    "API keys file not projected",
			patches: []string{jsonPatch("Deployment", `- {op: replace, path: /spec/template/spec/volumes/1/secret/items/0/path, value: keys.yaml}`)},
			want:    "HERMES_AUTH_FILE=/etc/hermes/auth/auth.yaml is not among the items volume auth projects from Secret/hermes-secrets",
		},
		{
			name:    "projected key the Secret lacks",
			patches: []string{jsonPatch("Deployment", `- {op: replace, path: /spec/template/spec/volumes/1/secret/items/0/key, value: keys.yaml}`)},
			want:    `volume auth: Secret/hermes-secrets has no key "keys.yaml"`,
		},
		{
			name:    "certificate without the headless name",
			patches: []string{jsonPatch("Certificate", `- {op: replace, path: /spec/dnsNames, value: [hermes-session]}`)},
			want:    "Certificate/hermes-session does not name hermes-session-headless",
		},
		{
			name:    "certificate only for servers",
			patches: []string{jsonPatch("Certificate", `- {op: replace, path: /spec/usages, value: [digital signature, server auth]}`)},
			want:    `Certificate/hermes-session lacks the usage "client auth"`,
		},
		{
			name:    "self-signed service certificate",
			patches: []string{jsonPatch("Certificate", `- {op: replace, path: /spec/issuerRef/name, value: hermes-selfsigned}`)},
			want:    "Certificate/hermes-session is not issued by a CA Issuer",
		},
		{
			name:    "ClusterIssuer",
			patches: []string{jsonPatch("Certificate", `- {op: replace, path: /spec/issuerRef/kind, value: ClusterIssuer}`)},
			want:    "is not an Issuer of the namespace",
		},
		{
			name:    "renewal window as long as the certificate",
			patches: []string{jsonPatch("Certificate", `- {op: replace, path: /spec/renewBefore, value: 720h}`)},
			want:    "renewBefore 720h0m0s is not shorter than duration 720h0m0s",
		},
		{
			name:    "namespace placeholder left in a name",
			patches: []string{jsonPatch("Certificate", `- {op: add, path: /spec/dnsNames/-, value: hermes-session.NAMESPACE.svc}`)},
			want:    `dnsName "hermes-session.NAMESPACE.svc"`,
		},
		{
			name:    "CA Issuer without a CA certificate",
			replace: map[string]string{"certs.yaml": strings.Replace(secure["certs.yaml"], "  isCA: true\n", "", 1)},
			want:    "Issuer/hermes-ca: ca.secretName hermes-ca is not the Secret of a CA Certificate",
		},
		{
			name:    "address in env of a Service that is not there",
			patches: []string{jsonPatch("Deployment", `- {op: add, path: `+container+`/env/-, value: {name: HERMES_TOOLS_ADDR, value: "dns:///hermes-tool:7070"}}`)},
			want:    "HERMES_TOOLS_ADDR=dns:///hermes-tool:7070: no Service hermes-tool with port 7070 in the render",
		},
		{
			name:    "no NetworkPolicy",
			replace: map[string]string{"netpol.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: unrelated}\n"},
			want:    "hermes-session: no NetworkPolicy restricts its Ingress",
		},
		{
			name:    "ingress restricted, egress open",
			patches: []string{jsonPatch("NetworkPolicy", `- {op: replace, path: /spec/policyTypes, value: [Ingress]}`)},
			want:    "hermes-session: no NetworkPolicy restricts its Egress",
		},
		{
			name:    "policy for a misspelt workload",
			patches: []string{jsonPatch("NetworkPolicy", `- {op: replace, path: /spec/podSelector/matchLabels/app.kubernetes.io~1name, value: hermes-sesion}`)},
			want:    "NetworkPolicy/hermes-session: selects no workload's pods",
		},
		{
			name:    "peer that is a misspelt workload",
			patches: []string{jsonPatch("NetworkPolicy", `- {op: replace, path: /spec/ingress/0/from/0/podSelector/matchLabels/app.kubernetes.io~1name, value: hermes-orchestrater}`)},
			want:    "peer app.kubernetes.io/name=hermes-orchestrater selects no workload's pods",
		},
	})
}
