package localcluster

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// healthCheck returns nil once a component serves.
type healthCheck func(ctx context.Context) error

func (c *Cluster) health(name string) healthCheck {
	switch name {
	case compEtcd:
		return c.httpCheck(nil, fmt.Sprintf("http://127.0.0.1:%d/health", c.cfg.EtcdClientPort), `"health":"true"`)
	case compAPIServer:
		return c.httpCheck(c.adminTLS, fmt.Sprintf("%s/readyz", c.cfg.apiServerURL()), "ok")
	case compControllerManager:
		return c.httpCheck(insecureLoopbackTLS, fmt.Sprintf("https://127.0.0.1:%d/healthz", c.cfg.ControllerManagerPort), "ok")
	case compScheduler:
		return c.httpCheck(insecureLoopbackTLS, fmt.Sprintf("https://127.0.0.1:%d/healthz", c.cfg.SchedulerPort), "ok")
	case compKubelet:
		return c.httpCheck(nil, fmt.Sprintf("http://127.0.0.1:%d/healthz", c.cfg.KubeletHealthzPort), "ok")
	case compContainerd:
		return c.criReady
	case compCoreDNS:
		// ready turns 200 once the kubernetes plugin has synced its caches.
		return c.httpCheck(nil, fmt.Sprintf("http://127.0.0.1:%d/ready", c.cfg.CoreDNSReadyPort), "OK")
	case compKubeProxy:
		// 200 only after the first full sync of the Service rules.
		return c.httpCheck(nil, fmt.Sprintf("http://127.0.0.1:%d/healthz", c.cfg.KubeProxyHealthzPort), "")
	case compKubeRouter:
		return c.kubeRouterReady
	case compLocalPath:
		// It serves nothing; a bad config or missing permission makes it
		// exit at start, which waitHealthy reports. Give it that moment.
		return c.aliveFor(compLocalPath, 500*time.Millisecond)
	case compHibernateAgent:
		// Same: it serves nothing and exits at start on a bad config.
		return c.aliveFor(compHibernateAgent, 500*time.Millisecond)
	case compCPUAgent:
		// Same: it exits at start on bad flags or a bad kubeconfig.
		return c.aliveFor(compCPUAgent, 500*time.Millisecond)
	}
	panic("unknown component " + name)
}

// aliveFor passes once the component's process has run for at least d.
func (c *Cluster) aliveFor(name string, d time.Duration) healthCheck {
	return func(context.Context) error {
		rec, err := c.cfg.readRecord(name)
		if err != nil {
			return err
		}
		if !rec.alive() {
			return fmt.Errorf("%s is not running", name)
		}
		if up := systemUptime() - time.Duration(rec.StartTime)*time.Second/clockTicks; up < d {
			return fmt.Errorf("%s started %s ago", name, up)
		}
		return nil
	}
}

// insecureLoopbackTLS is for the controller-manager and scheduler health
// endpoints: they serve self-signed certificates on 127.0.0.1.
func insecureLoopbackTLS() (*tls.Config, error) {
	return &tls.Config{InsecureSkipVerify: true}, nil //nolint:gosec // loopback health probe of a self-signed endpoint
}

// adminTLS authenticates as cluster admin and verifies the apiserver.
func (c *Cluster) adminTLS() (*tls.Config, error) {
	pki := c.cfg.pkiDir()
	ca, err := os.ReadFile(filepath.Join(pki, "ca.crt"))
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	cert, err := tls.LoadX509KeyPair(filepath.Join(pki, "admin.crt"), filepath.Join(pki, "admin.key"))
	if err != nil {
		return nil, err
	}
	return &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}

func (c *Cluster) httpCheck(tlsConfig func() (*tls.Config, error), url, want string) healthCheck {
	return func(ctx context.Context) error {
		tr := &http.Transport{DisableKeepAlives: true}
		if tlsConfig != nil {
			tc, err := tlsConfig()
			if err != nil {
				return err
			}
			tr.TLSClientConfig = tc
		}
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := (&http.Client{Transport: tr}).Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), want) {
			return fmt.Errorf("%s: %s: %s", url, resp.Status, strings.TrimSpace(string(body)))
		}
		return nil
	}
}

// dialCRI connects to containerd's CRI service.
func (c *Cluster) dialCRI() (*grpc.ClientConn, runtimeapi.RuntimeServiceClient, error) {
	conn, err := grpc.NewClient("unix://"+c.cfg.containerdSocket(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, nil, fmt.Errorf("connect to containerd: %w", err)
	}
	return conn, runtimeapi.NewRuntimeServiceClient(conn), nil
}

// criReady succeeds once the CRI runtime reports RuntimeReady. (NetworkReady
// follows from the CNI config file; the kubelet waits for it itself.)
func (c *Cluster) criReady(ctx context.Context) error {
	conn, rt, err := c.dialCRI()
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	st, err := rt.Status(ctx, &runtimeapi.StatusRequest{})
	if err != nil {
		return err
	}
	for _, cond := range st.GetStatus().GetConditions() {
		if cond.GetType() == runtimeapi.RuntimeReady && !cond.GetStatus() {
			return fmt.Errorf("runtime not ready: %s", cond.GetMessage())
		}
	}
	return nil
}

// waitHealthy polls check until it passes, the process exits, or timeout.
// Failures carry the end of the component's log, which is where the real
// reason is (a port in use, a bad flag, a missing kernel feature).
func (c *Cluster) waitHealthy(ctx context.Context, name string, r *running, timeout time.Duration) error {
	check := c.health(name)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var exited <-chan struct{}
	if r != nil {
		exited = r.exited
	}
	var last error
	for {
		if last = check(ctx); last == nil {
			return nil
		}
		select {
		case <-exited:
			return c.componentFailed(name, exitedErr("exited", r.err))
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.Canceled) {
				return ctx.Err()
			}
			return c.componentFailed(name, fmt.Errorf("not healthy after %s: %w", timeout, last))
		case <-tick.C:
		}
	}
}

// componentFailed turns a failed start into a user error, recognising the
// common causes in the log.
func (c *Cluster) componentFailed(name string, err error) error {
	tail := c.cfg.logTail(name, 15)
	fix := fmt.Sprintf("see %s", c.cfg.logFile(name))
	switch {
	case strings.Contains(tail, "address already in use"):
		fix = "another process holds one of its ports (" + strings.Join(c.cfg.ports(name), ", ") + "): stop it, then run `agent-sandbox up` again; " + fix
	case strings.Contains(tail, "permission denied") || strings.Contains(tail, "operation not permitted"):
		fix = "run as root with full capabilities; " + fix
	case strings.Contains(tail, "overlay") && strings.Contains(tail, "not supported"):
		fix = "the kernel needs overlayfs (`modprobe overlay`); " + fix
	}
	last := ""
	if lines := strings.Split(strings.TrimSpace(tail), "\n"); len(lines) > 0 {
		last = strings.TrimSpace(lines[len(lines)-1])
		if len(last) > 300 {
			last = last[:300] + "..."
		}
	}
	cause := fmt.Sprintf("%s failed to start", name)
	if last != "" {
		cause += " (last log line: " + last + ")"
	}
	return &Error{Cause: cause, Fix: fix, Err: err}
}

// checkPortFree fails with a clear message when addr is taken, naming the
// process that holds it when it can be found.
func checkPortFree(addr string) error {
	l, err := net.Listen("tcp", addr)
	if err == nil {
		_ = l.Close()
		return nil
	}
	if !strings.Contains(err.Error(), "address already in use") {
		return fmt.Errorf("check port %s: %w", addr, err)
	}
	_, portStr, _ := net.SplitHostPort(addr)
	port, _ := strconv.Atoi(portStr)
	owner := "another process"
	if pid, comm := listenerOwner(port); pid > 0 {
		owner = fmt.Sprintf("pid %d (%s)", pid, comm)
	}
	return userError(nil, "stop that process (if it is a leftover of this cluster, run `agent-sandbox down`) and run `agent-sandbox up` again",
		"port %s is already in use by %s", addr, owner)
}

// waitPortsFree waits up to grace for each of a component's ports.
func (c *Cluster) waitPortsFree(name string, grace time.Duration) error {
	for _, addr := range c.cfg.ports(name) {
		if err := waitPortFree(addr, grace); err != nil {
			return err
		}
	}
	return nil
}

// waitPortFree is checkPortFree retried for up to grace.
func waitPortFree(addr string, grace time.Duration) error {
	deadline := time.Now().Add(grace)
	for {
		err := checkPortFree(addr)
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// listenerOwner finds the process listening on a TCP port via /proc/net/tcp*
// socket inodes and /proc/<pid>/fd links. Best effort.
func listenerOwner(port int) (int, string) {
	inodes := map[string]bool{}
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		fh, err := os.Open(f)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			fl := strings.Fields(sc.Text())
			// local_address is HEXIP:HEXPORT; st 0A is LISTEN; inode is field 9.
			if len(fl) < 10 || fl[3] != "0A" {
				continue
			}
			if i := strings.LastIndexByte(fl[1], ':'); i >= 0 {
				if p, err := strconv.ParseInt(fl[1][i+1:], 16, 32); err == nil && int(p) == port {
					inodes["socket:["+fl[9]+"]"] = true
				}
			}
		}
		fh.Close()
	}
	if len(inodes) == 0 {
		return 0, ""
	}
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
		for _, fd := range fds {
			if link, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name())); err == nil && inodes[link] {
				comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
				return pid, strings.TrimSpace(string(comm))
			}
		}
	}
	return 0, ""
}

// exitedErr says a component's process ended; err is what its wait
// returned, nil when it exited with status 0.
func exitedErr(what string, err error) error {
	if err == nil {
		return errors.New(what + " with status 0")
	}
	return fmt.Errorf("%s: %w", what, err)
}
