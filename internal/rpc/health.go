package rpc

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// dependency is a backend (Redis, NATS, Qdrant, another service) that some services need; while
// its check fails, those services report NOT_SERVING.
type dependency struct {
	name     string
	services []string
	healthy  bool
	cancel   context.CancelFunc
}

func (d *dependency) stop() {
	if d.cancel != nil {
		d.cancel()
	}
}

// WatchDependency checks a backend every interval (and once right away) and reports the given
// services NOT_SERVING while the check fails; they return to SERVING by themselves once it
// passes again. The watch ends with Shutdown.
func (s *Server) WatchDependency(name string, services []string, interval time.Duration, check func(context.Context) error) {
	ctx, cancel := context.WithCancel(context.Background())
	d := &dependency{name: name, services: services, healthy: true, cancel: cancel}
	s.mu.Lock()
	if old, ok := s.deps[name]; ok {
		old.stop()
	}
	s.deps[name] = d
	s.mu.Unlock()
	probe := func() {
		cctx, ccancel := context.WithTimeout(ctx, interval)
		err := check(cctx)
		ccancel()
		if ctx.Err() != nil {
			return
		}
		s.mu.Lock()
		changed := d.healthy != (err == nil)
		d.healthy = err == nil
		s.mu.Unlock()
		if changed {
			if err != nil {
				s.log.Warn("dependency down; affected services NOT_SERVING", "dependency", name, "services", services, "error", err)
			} else {
				s.log.Info("dependency back; services SERVING", "dependency", name, "services", services)
			}
			s.refreshHealth()
		}
	}
	probe()
	go func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				probe()
			}
		}
	}()
}

// refreshHealth recomputes every registered service's status from its dependencies, and the
// overall status ("") from the services': NOT_SERVING while any of them is, so a probe of the
// process as a whole does not report SERVING while memory cannot serve.
func (s *Server) refreshHealth() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopping {
		return
	}
	overall := healthpb.HealthCheckResponse_SERVING
	defer func() { s.health.SetServingStatus("", overall) }()
	for _, svc := range s.services {
		st := healthpb.HealthCheckResponse_SERVING
		for _, d := range s.deps {
			if d.healthy {
				continue
			}
			for _, name := range d.services {
				if name == svc {
					st = healthpb.HealthCheckResponse_NOT_SERVING
				}
			}
		}
		s.health.SetServingStatus(svc, st)
		if st != healthpb.HealthCheckResponse_SERVING {
			overall = st
		}
	}
}

// LiveHandler answers HTTP liveness probes: 200 while the process answers, whatever its
// dependencies' state (restarting a pod because Redis is down would not bring Redis back), with
// each service's status in the body for a person reading it.
func (s *Server) LiveHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
		for _, name := range s.Services() {
			res, err := s.health.Check(r.Context(), &healthpb.HealthCheckRequest{Service: name})
			st := "UNKNOWN"
			if err == nil {
				st = res.GetStatus().String()
			}
			fmt.Fprintf(w, "%s %s\n", name, st)
		}
	})
}

// ReadyHandler answers HTTP readiness probes (the kubelet's httpGet on the plaintext metrics
// listener, where its gRPC probe cannot reach a mutual-TLS listener): 200 while every
// registered service is SERVING, 503 with the ones that are not.
func (s *Server) ReadyHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var down []string
		for _, name := range append([]string{""}, s.Services()...) {
			res, err := s.health.Check(r.Context(), &healthpb.HealthCheckRequest{Service: name})
			if err != nil || res.GetStatus() != healthpb.HealthCheckResponse_SERVING {
				if name == "" {
					name = "(server)"
				}
				down = append(down, name)
			}
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if len(down) > 0 {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, "not serving: %s\n", strings.Join(down, ", "))
			return
		}
		fmt.Fprintln(w, "ok")
	})
}
