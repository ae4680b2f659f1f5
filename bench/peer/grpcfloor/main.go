// Command grpcfloor measures what a round trip between two processes on loopback costs with no
// Hermes code in it, to set issue 27's latency ratio against this machine's floor: a gRPC health
// check answered by a bare grpc-go server (or by `hermes serve`, given its address), the same
// server behind net/http's HTTP/2 (h2c), and a raw TCP ping-pong of 32 bytes.
//
//	go run ./grpcfloor                      # all three, servers started as child processes
//	go run ./grpcfloor -addr 127.0.0.1:7070 # a health check of a running hermes serve
//
// Each client makes -n calls, sleeping 50 µs after every other one (as a caller that does some
// work between calls), and prints the median and the 90th percentile.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/h2c"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

func main() {
	serve := flag.String("serve", "", "child mode: serve grpc, h2c or raw on a free loopback port and print its address")
	addr := flag.String("addr", "", "measure a health check of this gRPC server only")
	n := flag.Int("n", 5000, "calls per measurement")
	flag.Parse()
	if *serve != "" {
		if err := runServer(*serve); err != nil {
			log.Fatal(err)
		}
		return
	}
	if *addr != "" {
		call, err := healthCheck(*addr)
		if err == nil {
			err = report("health check of "+*addr, *n, call)
		}
		if err != nil {
			log.Fatal(err)
		}
		return
	}
	for _, kind := range []string{"raw", "grpc", "h2c"} {
		if err := measure(kind, *n); err != nil {
			log.Fatal(err)
		}
	}
}

// measure starts a server of kind as a child process, reports its round trips and stops it,
// whether or not the measurement succeeded.
func measure(kind string, n int) error {
	child, a, err := startServer(kind)
	if err != nil {
		return err
	}
	defer func() {
		_ = child.Process.Kill()
		_ = child.Wait()
	}()
	dial := healthCheck
	if kind == "raw" {
		dial = pingPong
	}
	call, err := dial(a)
	if err != nil {
		return err
	}
	return report(kind, n, call)
}

func runServer(kind string) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	fmt.Println(ln.Addr().String())
	switch kind {
	case "raw":
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		buf := make([]byte, 64)
		for {
			n, err := c.Read(buf)
			if err != nil {
				return nil
			}
			if _, err := c.Write(buf[:n]); err != nil {
				return nil
			}
		}
	case "grpc", "h2c":
		s := grpc.NewServer()
		healthpb.RegisterHealthServer(s, health.NewServer())
		if kind == "grpc" {
			return s.Serve(ln)
		}
		return (&http.Server{Handler: h2c.NewHandler(s, &http2.Server{})}).Serve(ln)
	}
	return fmt.Errorf("unknown server kind %q", kind)
}

// startServer runs this program as a child serving kind and returns the address it printed.
func startServer(kind string) (*exec.Cmd, string, error) {
	cmd := exec.Command(os.Args[0], "-serve", kind)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, "", err
	}
	if err := cmd.Start(); err != nil {
		return nil, "", err
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		return nil, "", err
	}
	go func() { _, _ = io.Copy(io.Discard, out) }()
	return cmd, strings.TrimSpace(line), nil
}

func healthCheck(addr string) (func() error, error) {
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	h := healthpb.NewHealthClient(cc)
	return func() error {
		_, err := h.Check(context.Background(), &healthpb.HealthCheckRequest{})
		return err
	}, nil
}

func pingPong(addr string) (func() error, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	buf := make([]byte, 64)
	return func() error {
		if _, err := c.Write(buf[:32]); err != nil {
			return err
		}
		_, err := io.ReadFull(c, buf[:32])
		return err
	}, nil
}

// report makes 200 warm-up calls, then n measured ones, and prints their median and 90th
// percentile.
func report(name string, n int, call func() error) error {
	took := make([]time.Duration, 0, n)
	for i := range n + 200 {
		start := time.Now()
		if err := call(); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if i >= 200 {
			took = append(took, time.Since(start))
		}
		if i%2 == 0 {
			time.Sleep(50 * time.Microsecond)
		}
	}
	slices.Sort(took)
	fmt.Printf("%-40s p50 %7.1f µs   p90 %7.1f µs\n", name, us(took[len(took)/2]), us(took[len(took)*9/10]))
	return nil
}

func us(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
