package app

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"
)

// startHealth serves /readyz and /livez on cfg.HealthListen, when set, until the app closes:
// plaintext, because the kubelet's probes can neither speak the gRPC listener's mutual TLS nor
// present a client certificate; nothing else is on that address, and what it answers (service
// names and their status) holds no user data and needs no key.
func (a *App) startHealth() error {
	if a.cfg.HealthListen == "" {
		return nil
	}
	lis, err := net.Listen("tcp", a.cfg.HealthListen)
	if err != nil {
		return fmt.Errorf("health listen on %s: %w", a.cfg.HealthListen, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /readyz", a.srv.ReadyHandler())
	mux.Handle("GET /livez", a.srv.LiveHandler())
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second, MaxHeaderBytes: 8 << 10}
	go func() {
		if err := srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			a.log.Error("health server stopped", "error", err)
		}
	}()
	a.healthAddr = lis.Addr().String()
	a.log.Info("health probes serving", "addr", a.healthAddr, "paths", "/readyz /livez")
	a.onClose(func() { _ = srv.Close() })
	return nil
}

// HealthAddr is the health listener's address, empty when it is off.
func (a *App) HealthAddr() string { return a.healthAddr }
