package k8s_test

import (
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
)

// certificate is the part of cert-manager's Certificate (cert-manager.io/v1) that
// components/cert-manager uses, with the API's field names. Decoding is strict, so a field
// outside this subset (a typo, or a field this test does not know) fails instead of being
// ignored; extend the subset when the component needs more.
type certificate struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              certificateSpec `json:"spec"`
}

type certificateSpec struct {
	SecretName     string          `json:"secretName"`
	SecretTemplate *secretTemplate `json:"secretTemplate,omitempty"`
	CommonName     string          `json:"commonName,omitempty"`
	DNSNames       []string        `json:"dnsNames,omitempty"`
	IsCA           bool            `json:"isCA,omitempty"`
	Usages         []string        `json:"usages,omitempty"`
	Duration       string          `json:"duration,omitempty"`
	RenewBefore    string          `json:"renewBefore,omitempty"`
	PrivateKey     *privateKey     `json:"privateKey,omitempty"`
	IssuerRef      issuerRef       `json:"issuerRef"`
}

type secretTemplate struct {
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

type privateKey struct {
	Algorithm      string `json:"algorithm,omitempty"`
	Size           int    `json:"size,omitempty"`
	Encoding       string `json:"encoding,omitempty"`
	RotationPolicy string `json:"rotationPolicy,omitempty"`
}

type issuerRef struct {
	Name  string `json:"name"`
	Kind  string `json:"kind,omitempty"`
	Group string `json:"group,omitempty"`
}

// issuer is the part of cert-manager's Issuer that components/cert-manager uses.
type issuer struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              issuerSpec `json:"spec"`
}

type issuerSpec struct {
	SelfSigned *struct{} `json:"selfSigned,omitempty"`
	CA         *caIssuer `json:"ca,omitempty"`
}

type caIssuer struct {
	SecretName string `json:"secretName"`
}

func (c *certificate) DeepCopyObject() runtime.Object {
	out := *c
	c.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	out.Spec.DNSNames = slices.Clone(c.Spec.DNSNames)
	out.Spec.Usages = slices.Clone(c.Spec.Usages)
	if c.Spec.PrivateKey != nil {
		pk := *c.Spec.PrivateKey
		out.Spec.PrivateKey = &pk
	}
	if t := c.Spec.SecretTemplate; t != nil {
		out.Spec.SecretTemplate = &secretTemplate{Labels: clone(t.Labels), Annotations: clone(t.Annotations)}
	}
	return &out
}

func (i *issuer) DeepCopyObject() runtime.Object {
	out := *i
	i.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	if i.Spec.SelfSigned != nil {
		out.Spec.SelfSigned = &struct{}{}
	}
	if i.Spec.CA != nil {
		ca := *i.Spec.CA
		out.Spec.CA = &ca
	}
	return &out
}

func clone(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// certificateUsages are the key usages cert-manager accepts that a TLS certificate may carry.
var certificateUsages = []string{"digital signature", "key encipherment", "server auth", "client auth", "cert sign", "crl sign"}

// certificateKeys are the keys cert-manager writes into a Certificate's Secret.
var certificateKeys = []string{"tls.crt", "tls.key", "ca.crt"}

// certificateFor returns the Certificate that produces the Secret, or nil.
func (r *rendered) certificateFor(ns, secret string) *certificate {
	for _, c := range r.certificates {
		if c.Namespace == ns && c.Spec.SecretName == secret {
			return c
		}
	}
	return nil
}

// checkCertificates: every Certificate names a Secret, valid DNS names, known usages, a lifetime
// it renews within, and an Issuer of the render; every Issuer is self-signed or a CA whose
// Secret comes from a CA Certificate.
func checkCertificates(p *problems, r *rendered) {
	for _, c := range r.certificates {
		obj := "Certificate/" + c.Name
		if c.Spec.SecretName == "" {
			p.addf(obj, "no secretName")
		}
		for _, name := range c.Spec.DNSNames {
			for _, msg := range validation.IsDNS1123Subdomain(name) {
				p.addf(obj, "dnsName %q: %s", name, msg)
			}
		}
		for _, u := range c.Spec.Usages {
			if !slices.Contains(certificateUsages, u) {
				p.addf(obj, "unknown usage %q", u)
			}
		}
		duration, derr := time.ParseDuration(c.Spec.Duration)
		renew, rerr := time.ParseDuration(c.Spec.RenewBefore)
		switch {
		case derr != nil || rerr != nil:
			p.addf(obj, "duration %q and renewBefore %q must both be set, as Go durations", c.Spec.Duration, c.Spec.RenewBefore)
		case renew >= duration:
			p.addf(obj, "renewBefore %s is not shorter than duration %s: it would be renewed continuously", renew, duration)
		}
		ref := c.Spec.IssuerRef
		if ref.Kind != "Issuer" || (ref.Group != "" && ref.Group != "cert-manager.io") {
			p.addf(obj, "issuerRef %s %s/%s is not an Issuer of the namespace (a ClusterIssuer would let other namespaces mint Hermes identities)", ref.Group, ref.Kind, ref.Name)
		} else if r.issuers[c.Namespace+"/"+ref.Name] == nil {
			p.addf(obj, "issuerRef Issuer/%s is not in the render", ref.Name)
		}
	}
	for _, is := range r.issuers {
		obj := "Issuer/" + is.Name
		switch {
		case (is.Spec.SelfSigned == nil) == (is.Spec.CA == nil):
			p.addf(obj, "needs exactly one of selfSigned and ca")
		case is.Spec.CA != nil:
			ca := r.certificateFor(is.Namespace, is.Spec.CA.SecretName)
			if ca == nil || !ca.Spec.IsCA {
				p.addf(obj, "ca.secretName %s is not the Secret of a CA Certificate (isCA: true) in the render", is.Spec.CA.SecretName)
			}
		}
	}
}
