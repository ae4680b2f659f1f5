package main

import (
	"context"
	"flag"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/hermes-agent/hermes/app"
	"github.com/hermes-agent/hermes/internal/devcerts"
)

// runCerts makes a development CA and one certificate per service, in the layout cert-manager
// gives a pod, for trying mutual TLS on one machine.
func runCerts(_ context.Context, env *cliEnv, args []string) error {
	fs := flag.NewFlagSet("hermes certs", flag.ContinueOnError)
	fs.SetOutput(env.stderr)
	dir := fs.String("dir", "hermes-certs", "directory to write ca.crt and <service>/{tls.crt,tls.key,ca.crt} into")
	hosts := fs.String("hosts", "localhost,127.0.0.1,::1", "comma list of names and addresses every certificate is valid for (add the hosts your services run on)")
	valid := fs.Duration("valid", 90*24*time.Hour, "how long the certificates are valid")
	fs.Usage = func() {
		fmt.Fprintln(env.stderr, "Usage: hermes certs [--dir DIR] [--hosts a,b] — a development CA and a certificate per service for mutual TLS (use cert-manager in a cluster).")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return errUsage{fmt.Sprintf("unexpected argument %q", fs.Arg(0))}
	}
	ca, err := devcerts.NewCA("hermes development CA", *valid)
	if err != nil {
		return err
	}
	base := strings.Split(*hosts, ",")
	set := map[string][]string{}
	for _, t := range append(app.Targets(), "client") {
		set[t] = append([]string{t, "hermes-" + t}, base...)
	}
	if err := ca.WriteSet(*dir, set, *valid); err != nil {
		return err
	}
	abs, _ := filepath.Abs(*dir)
	fmt.Fprintf(env.stdout, "wrote a development CA and certificates for %s, client to %s\n", strings.Join(app.Targets(), ", "), abs)
	fmt.Fprintf(env.stdout, "serve with:   --tls-cert %[1]s/session/tls.crt --tls-key %[1]s/session/tls.key --tls-client-ca %[1]s/ca.crt --tls-ca %[1]s/ca.crt\n", abs)
	fmt.Fprintf(env.stdout, "grpcurl with: -cacert %[1]s/ca.crt -cert %[1]s/client/tls.crt -key %[1]s/client/tls.key\n", abs)
	return nil
}
