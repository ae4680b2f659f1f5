package k8s_test

import (
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"go.yaml.in/yaml/v3"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// secretRef is one key of one Secret.
type secretRef struct{ secret, key string }

// envSecret returns the Secret key a container's variable comes from.
func envSecret(c corev1.Container, name string) (secretRef, bool) {
	for _, e := range c.Env {
		if e.Name == name && e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			return secretRef{e.ValueFrom.SecretKeyRef.Name, e.ValueFrom.SecretKeyRef.Key}, true
		}
	}
	return secretRef{}, false
}

// envValue returns a container's literal variable.
func envValue(c corev1.Container, name string) (string, bool) {
	for _, e := range c.Env {
		if e.Name == name && e.ValueFrom == nil {
			return e.Value, true
		}
	}
	return "", false
}

func (r *rendered) statefulSet(name string) *appsv1.StatefulSet {
	for _, s := range r.statefulSets {
		if s.Name == name {
			return s
		}
	}
	return nil
}

// natsUser returns the user hermes-nats' configuration requires and the environment variable
// its password comes from.
func natsUser(t *testing.T, r *rendered, ns string) (user, variable string) {
	t.Helper()
	nats := r.statefulSet("hermes-nats")
	var conf string
	for _, v := range nats.Spec.Template.Spec.Volumes {
		if v.ConfigMap != nil && v.Name == "config" {
			conf = r.configMaps[ns+"/"+v.ConfigMap.Name].Data["nats.conf"]
		}
	}
	if conf == "" {
		t.Fatal("StatefulSet/hermes-nats mounts no nats.conf")
	}
	m := regexp.MustCompile(`(?s)authorization\s*\{\s*user:\s*(\S+)\s+password:\s*\$(\w+)\s*\}`).FindStringSubmatch(conf)
	if m == nil {
		t.Fatalf("nats.conf has no authorization block with a user and a $VARIABLE password:\n%s", conf)
	}
	return m[1], m[2]
}

// TestBackendCredentials: Redis and NATS require a password from the Secret hermes-secrets, and
// every Hermes service that uses them connects with that very password, by reference; only
// the services that use NATS get its password.
func TestBackendCredentials(t *testing.T) {
	usesNATS := []string{"hermes-mcpgateway", "hermes-memory", "hermes-orchestrator"}
	for _, dir := range []string{"base", "overlays/dev", "overlays/prod"} {
		t.Run(dir, func(t *testing.T) {
			r, err := renderDisk(dir)
			if err != nil {
				t.Fatal(err)
			}
			ns := r.deployments[0].Namespace

			redis := r.statefulSet("hermes-redis").Spec.Template.Spec.Containers[0]
			words := append(slices.Clone(redis.Command), redis.Args...)
			i := slices.Index(words, "--requirepass")
			if i < 0 || i+1 == len(words) || !isReference(words[i+1]) {
				t.Fatalf("Redis does not require a password from the environment: %q", words)
			}
			redisPassword, ok := envSecret(redis, envReference.FindStringSubmatch(words[i+1])[1])
			if !ok || redisPassword != (secretRef{"hermes-secrets", "redis-password"}) {
				t.Errorf("Redis' password comes from %v, want Secret hermes-secrets key redis-password", redisPassword)
			}
			if ref, _ := envSecret(redis, "REDISCLI_AUTH"); ref != redisPassword {
				t.Errorf("redis-cli in the probe authenticates with %v, want %v", ref, redisPassword)
			}

			natsUser, natsVar := natsUser(t, r, ns)
			natsPassword, ok := envSecret(r.statefulSet("hermes-nats").Spec.Template.Spec.Containers[0], natsVar)
			if !ok || natsPassword != (secretRef{"hermes-secrets", "nats-password"}) {
				t.Errorf("NATS' $%s comes from %v, want Secret hermes-secrets key nats-password", natsVar, natsPassword)
			}

			// Qdrant requires its API key; the memory service, its only client, sends the same one.
			qdrantKey, ok := envSecret(r.statefulSet("hermes-qdrant").Spec.Template.Spec.Containers[0], "QDRANT__SERVICE__API_KEY")
			if !ok || qdrantKey != (secretRef{"hermes-secrets", "qdrant-api-key"}) {
				t.Errorf("Qdrant's API key comes from %v, want Secret hermes-secrets key qdrant-api-key", qdrantKey)
			}
			for _, d := range r.deployments {
				ref, has := envSecret(d.Spec.Template.Spec.Containers[0], "HERMES_QDRANT_API_KEY")
				switch {
				case d.Name == "hermes-memory" && ref != qdrantKey:
					t.Errorf("Deployment/%s sends the Qdrant key %v, want %v", d.Name, ref, qdrantKey)
				case d.Name != "hermes-memory" && has:
					t.Errorf("Deployment/%s gets the Qdrant key; only memory talks to Qdrant", d.Name)
				}
			}

			// The orchestrator signs turn.finished and memory verifies it with one key from the
			// Secret; no other service holds it.
			for _, d := range r.deployments {
				ref, has := envSecret(d.Spec.Template.Spec.Containers[0], "HERMES_EVENTS_KEY")
				switch {
				case (d.Name == "hermes-memory" || d.Name == "hermes-orchestrator") && ref != (secretRef{"hermes-secrets", "events-key"}):
					t.Errorf("Deployment/%s: HERMES_EVENTS_KEY comes from %v, want Secret hermes-secrets key events-key", d.Name, ref)
				case d.Name != "hermes-memory" && d.Name != "hermes-orchestrator" && has:
					t.Errorf("Deployment/%s gets the events key; only orchestrator and memory sign or verify events", d.Name)
				}
			}

			for _, d := range r.deployments {
				c := d.Spec.Template.Spec.Containers[0]
				checkURL := func(name, host, user string, want secretRef) {
					t.Helper()
					v, ok := envValue(c, name)
					if !ok {
						t.Errorf("Deployment/%s: no %s in env", d.Name, name)
						return
					}
					u, err := url.Parse(v)
					if err != nil || u.User == nil || u.Hostname() != host {
						t.Errorf("Deployment/%s: %s=%s is not a URL of %s with credentials", d.Name, name, v, host)
						return
					}
					password, _ := u.User.Password()
					ref, ok := secretRef{}, isReference(password)
					if ok {
						ref, ok = envSecret(c, envReference.FindStringSubmatch(password)[1])
					}
					if u.User.Username() != user || !ok || ref != want {
						t.Errorf("Deployment/%s: %s=%s: user %q with the password of %v, want user %q with %v", d.Name, name, v, u.User.Username(), ref, user, want)
					}
				}
				checkURL("HERMES_REDIS_URL", "hermes-redis", "", redisPassword)
				if slices.Contains(usesNATS, d.Name) {
					checkURL("HERMES_NATS_URL", "hermes-nats", natsUser, natsPassword)
					continue
				}
				for _, e := range c.Env {
					if ref, ok := envSecret(c, e.Name); e.Name == "HERMES_NATS_URL" || ok && ref == natsPassword {
						t.Errorf("Deployment/%s does not use NATS but gets %s", d.Name, e.Name)
					}
				}
			}
		})
	}
}

// TestNATSConfig parses both nats.conf files with the NATS server the binary embeds: they are
// valid, every client must authenticate as hermes with the password from the environment, and
// without that variable the server refuses to start rather than run open.
func TestNATSConfig(t *testing.T) {
	for _, conf := range []string{"base/nats/nats.conf", "overlays/prod/nats.conf"} {
		t.Run(conf, func(t *testing.T) {
			data, err := os.ReadFile(conf)
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(t.TempDir(), "nats.conf")
			if err := os.WriteFile(path, data, 0o600); err != nil {
				t.Fatal(err)
			}
			t.Setenv("POD_NAME", "hermes-nats-0")
			// What `openssl rand -hex 32` makes, and the dev placeholder.
			for _, password := range []string{"9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08", "placeholder0nats0password0change0me"} {
				t.Setenv("NATS_PASSWORD", password)
				opts, err := server.ProcessConfigFile(path)
				if err != nil {
					t.Fatalf("NATS_PASSWORD=%s: %v", password, err)
				}
				if opts.Username != "hermes" || opts.Password != password {
					t.Errorf("NATS_PASSWORD=%s: clients authenticate as %q with %q, want hermes with the variable's value", password, opts.Username, opts.Password)
				}
			}
			os.Unsetenv("NATS_PASSWORD") // restored by t.Setenv's cleanup
			if _, err := server.ProcessConfigFile(path); err == nil {
				t.Errorf("without NATS_PASSWORD the configuration is accepted; the server would run without a password")
			}
		})
	}
}

// TestDevSecrets: the dev placeholders hold no API key (a key in git would open the
// orchestrator to anyone who reads it), and the passwords fit unescaped in the URLs.
func TestDevSecrets(t *testing.T) {
	r, err := renderDisk("overlays/dev")
	if err != nil {
		t.Fatal(err)
	}
	s := r.secrets["hermes-dev/hermes-secrets"]
	if s == nil {
		t.Fatal("overlays/dev has no Secret hermes-secrets")
	}
	var keys map[string]any
	if err := yaml.Unmarshal(s.Data["auth.yaml"], &keys); err != nil {
		t.Fatalf("auth.yaml: %v", err)
	}
	if len(keys) != 0 {
		t.Errorf("the placeholder auth.yaml holds keys %v; keys are never in git", keys)
	}
	for _, k := range []string{"redis-password", "nats-password"} {
		if v := string(s.Data[k]); !regexp.MustCompile(`^[0-9A-Za-z]{16,}$`).MatchString(v) {
			t.Errorf("%s %q: want 16 or more letters and digits (a URL carries it unescaped)", k, v)
		}
	}
	if v := s.Data["events-key"]; len(v) < 32 {
		t.Errorf("events-key %q: the binary refuses keys shorter than 32 characters", v)
	}
}

// TestDialledNamesAreCertified: every address a Hermes service dials another one at
// (HERMES_<TARGET>_ADDR) is a name in the certificate of the service behind it, so TLS
// verification of that name succeeds.
func TestDialledNamesAreCertified(t *testing.T) {
	for _, dir := range []string{"overlays/dev", "overlays/prod"} {
		t.Run(dir, func(t *testing.T) {
			r, err := renderDisk(dir)
			if err != nil {
				t.Fatal(err)
			}
			var config *corev1.ConfigMap
			for _, cm := range r.configMaps {
				if strings.HasPrefix(cm.Name, "hermes-config-") {
					config = cm
				}
			}
			for _, target := range []string{"session", "tools", "mcpgateway", "memory", "orchestrator"} {
				name := "HERMES_" + strings.ToUpper(target) + "_ADDR"
				host, _, ok := hostPort(config.Data[name])
				if !ok {
					t.Errorf("%s=%q is not host:port", name, config.Data[name])
					continue
				}
				var d *appsv1.Deployment
				for _, dd := range r.deployments {
					if dd.Name == "hermes-"+target {
						d = dd
					}
				}
				var secret string
				for _, v := range d.Spec.Template.Spec.Volumes {
					if v.Name == "tls" && v.Secret != nil {
						secret = v.Secret.SecretName
					}
				}
				cert := r.certificateFor(d.Namespace, secret)
				if cert == nil {
					t.Errorf("Deployment/%s: no Certificate writes its Secret %q", d.Name, secret)
					continue
				}
				if !slices.Contains(cert.Spec.DNSNames, host) {
					t.Errorf("%s dials %s, which Certificate/%s does not name (%v)", name, host, cert.Name, cert.Spec.DNSNames)
				}
				for _, fqdn := range []string{"hermes-" + target + "." + d.Namespace + ".svc", "hermes-" + target + "." + d.Namespace + ".svc.cluster.local"} {
					if !slices.Contains(cert.Spec.DNSNames, fqdn) {
						t.Errorf("Certificate/%s does not name %s, which clients in other namespaces dial", cert.Name, fqdn)
					}
				}
			}
		})
	}
}
