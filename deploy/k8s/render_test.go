package k8s_test

import (
	"errors"
	"fmt"
	"sort"
	"sync"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// decoder decodes strictly into the Kubernetes API types of the kinds the manifests may use: an
// unknown or misspelt field (matched case-sensitively), a duplicate field, or a kind or version
// outside this scheme (autoscaling/v1, a typo in kind) is an error. cert-manager's kinds decode
// into the subset of their API that components/cert-manager uses (certmanager_test.go).
var decoder = func() runtime.Decoder {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		corev1.AddToScheme,
		appsv1.AddToScheme,
		autoscalingv2.AddToScheme,
		policyv1.AddToScheme,
		networkingv1.AddToScheme,
	} {
		if err := add(scheme); err != nil {
			panic(err)
		}
	}
	certManager := schema.GroupVersion{Group: "cert-manager.io", Version: "v1"}
	scheme.AddKnownTypeWithName(certManager.WithKind("Certificate"), &certificate{})
	scheme.AddKnownTypeWithName(certManager.WithKind("Issuer"), &issuer{})
	metav1.AddToGroupVersion(scheme, certManager)
	return serializer.NewCodecFactory(scheme, serializer.EnableStrict).UniversalDeserializer()
}()

// rendered is what `kustomize build` produces for one directory, decoded and indexed.
type rendered struct {
	dir             string
	objects         []runtime.Object
	deployments     []*appsv1.Deployment
	statefulSets    []*appsv1.StatefulSet
	services        []*corev1.Service
	hpas            []*autoscalingv2.HorizontalPodAutoscaler
	pdbs            []*policyv1.PodDisruptionBudget
	netpols         []*networkingv1.NetworkPolicy
	certificates    []*certificate
	issuers         map[string]*issuer           // by namespace/name
	configMaps      map[string]*corev1.ConfigMap // by namespace/name
	secrets         map[string]*corev1.Secret
	serviceAccounts map[string]*corev1.ServiceAccount
	namespaces      map[string]bool
}

// render runs kustomize on dir in fSys (no network, no plugins) and decodes every object. All
// decoding errors are returned together, each naming its object.
func render(fSys filesys.FileSystem, dir string) (*rendered, error) {
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	m, err := k.Run(fSys, dir)
	if err != nil {
		return nil, fmt.Errorf("kustomize build %s: %w", dir, err)
	}
	r := &rendered{
		dir:             dir,
		configMaps:      map[string]*corev1.ConfigMap{},
		secrets:         map[string]*corev1.Secret{},
		serviceAccounts: map[string]*corev1.ServiceAccount{},
		namespaces:      map[string]bool{},
		issuers:         map[string]*issuer{},
	}
	var errs []error
	for _, res := range m.Resources() {
		id := res.GetKind() + "/" + res.GetName()
		data, err := res.AsYAML()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", id, err))
			continue
		}
		obj, err := decode(data)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", id, err))
			continue
		}
		r.add(obj)
	}
	return r, errors.Join(errs...)
}

// renders caches renderDisk: the directories on disk do not change during a run, and callers
// only read what a render returns.
var renders sync.Map // dir -> func() (*rendered, error)

// renderDisk renders a directory of deploy/k8s once per test binary.
func renderDisk(dir string) (*rendered, error) {
	f, _ := renders.LoadOrStore(dir, sync.OnceValues(func() (*rendered, error) {
		return render(filesys.MakeFsOnDisk(), dir)
	}))
	return f.(func() (*rendered, error))()
}

// decode decodes one object strictly. The serializer returns the object together with a strict
// decoding error; either error fails.
func decode(data []byte) (runtime.Object, error) {
	obj, _, err := decoder.Decode(data, nil, nil)
	if err != nil {
		return nil, err
	}
	return obj, nil
}

func (r *rendered) add(obj runtime.Object) {
	r.objects = append(r.objects, obj)
	switch o := obj.(type) {
	case *appsv1.Deployment:
		r.deployments = append(r.deployments, o)
	case *appsv1.StatefulSet:
		r.statefulSets = append(r.statefulSets, o)
	case *corev1.Service:
		r.services = append(r.services, o)
	case *autoscalingv2.HorizontalPodAutoscaler:
		r.hpas = append(r.hpas, o)
	case *policyv1.PodDisruptionBudget:
		r.pdbs = append(r.pdbs, o)
	case *networkingv1.NetworkPolicy:
		r.netpols = append(r.netpols, o)
	case *certificate:
		r.certificates = append(r.certificates, o)
	case *issuer:
		r.issuers[o.Namespace+"/"+o.Name] = o
	case *corev1.ConfigMap:
		r.configMaps[o.Namespace+"/"+o.Name] = o
	case *corev1.Secret:
		r.secrets[o.Namespace+"/"+o.Name] = o
	case *corev1.ServiceAccount:
		r.serviceAccounts[o.Namespace+"/"+o.Name] = o
	case *corev1.Namespace:
		r.namespaces[o.Name] = true
	}
}

// deploymentNames lists the Deployments, sorted, for assertions on what a render contains.
func (r *rendered) deploymentNames() []string {
	var out []string
	for _, d := range r.deployments {
		out = append(out, d.Name)
	}
	sort.Strings(out)
	return out
}

func (r *rendered) statefulSetNames() []string {
	var out []string
	for _, s := range r.statefulSets {
		out = append(out, s.Name)
	}
	sort.Strings(out)
	return out
}
