package app

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"runtime"
	"time"

	"github.com/hermes-agent/hermes/internal/auth"
)

// registerPprofFlag registers --pprof-listen and the contention profiles' rates.
func (c *Config) registerPprofFlag(fs *flag.FlagSet) {
	fs.StringVar(&c.PprofListen, "pprof-listen", "", "HTTP address serving Go's profiler under /debug/pprof/ (CPU, heap, goroutines) so an operator can profile a running process; empty disables it")
	fs.IntVar(&c.PprofBlockRate, "pprof-block-rate", 0, "with --pprof-listen: /debug/pprof/block samples one blocking event (channel, select, lock or condition wait) per this many nanoseconds spent blocked, 1 every one; 0 records none (each recorded event costs CPU)")
	fs.IntVar(&c.PprofMutexFraction, "pprof-mutex-fraction", 0, "with --pprof-listen: /debug/pprof/mutex records one in this many contended mutex hand-overs, 1 every one; 0 records none")
}

// startPprof serves the profiler on cfg.PprofListen, when set, until the app closes. It has its
// own mux: nothing else is reachable on that address.
func (a *App) startPprof() error {
	if a.cfg.PprofListen == "" {
		return nil
	}
	if a.cfg.PprofBlockRate < 0 || a.cfg.PprofMutexFraction < 0 {
		return errors.New("--pprof-block-rate and --pprof-mutex-fraction must not be negative")
	}
	// The profile shows the process's memory: loopback only unless keys protect it, and then
	// for operators only.
	if err := a.sec.checkListen("pprof-listen", a.cfg.PprofListen, a.keys != nil); err != nil {
		return err
	}
	// A page in the operator's browser must not read the command line or profiles (DNS
	// rebinding) on loopback. go tool pprof posts symbol lookups as application/octet-stream.
	guard, err := a.cfg.HTTP.Guard(a.log.With("component", "pprof"), "application/octet-stream")
	if err != nil {
		return err
	}
	lis, err := net.Listen("tcp", a.cfg.PprofListen)
	if err != nil {
		return fmt.Errorf("pprof listen on %s: %w", a.cfg.PprofListen, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: guard.Wrap(a.sec.httpAuth(auth.PprofMethod, mux)), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			a.log.Error("pprof server stopped", "error", err)
		}
	}()
	a.pprofAddr = lis.Addr().String()
	a.log.Info("profiler serving", "addr", a.pprofAddr)
	a.onClose(func() { _ = srv.Close() })
	return nil
}

// setContentionRates turns the block and mutex profiles on as configured, while the profiler
// serves. The rates are the runtime's, for the whole process; New sets them last, because the
// embedded NATS server sets the block rate (to its own option, 0) when it starts.
func (a *App) setContentionRates() {
	if a.cfg.PprofListen == "" {
		return
	}
	if a.cfg.PprofBlockRate > 0 {
		runtime.SetBlockProfileRate(a.cfg.PprofBlockRate)
		a.onClose(func() { runtime.SetBlockProfileRate(0) })
	}
	if a.cfg.PprofMutexFraction > 0 {
		prev := runtime.SetMutexProfileFraction(a.cfg.PprofMutexFraction)
		a.onClose(func() { runtime.SetMutexProfileFraction(prev) })
	}
}

// PprofAddr is the profiler's address, empty when it is off.
func (a *App) PprofAddr() string { return a.pprofAddr }
