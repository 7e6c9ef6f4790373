package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"sigs.k8s.io/agent-sandbox/internal/cli/remote"
	"sigs.k8s.io/agent-sandbox/internal/router/tunnel"
)

// tunnelHandshakeTimeout bounds connecting to the router and its answer;
// the router itself holds a tunnel for a resuming sandbox only up to its
// --ready-timeout.
const tunnelHandshakeTimeout = 2 * time.Minute

// serveTCPForward accepts local connections until ctx ends and joins each
// with its own tunnel through the router. A refused or failed tunnel is
// reported on errOut and closes only that connection: the forward keeps
// serving, like kubectl port-forward.
func serveTCPForward(ctx context.Context, ln net.Listener, routerURL string, target tunnel.Target, errOut io.Writer) {
	var (
		mu    sync.Mutex
		conns = map[net.Conn]struct{}{}
		wg    sync.WaitGroup
	)
	stop := context.AfterFunc(ctx, func() {
		_ = ln.Close()
		mu.Lock()
		for c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
	})
	defer stop()
	defer wg.Wait()
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() == nil {
				fmt.Fprintf(errOut, "port-forward: accepting connections: %v\n", err)
			}
			_ = ln.Close()
			return
		}
		local, ok := c.(*net.TCPConn)
		if !ok {
			_ = c.Close()
			continue
		}
		mu.Lock()
		conns[c] = struct{}{}
		mu.Unlock()
		wg.Go(func() {
			defer func() {
				mu.Lock()
				delete(conns, c)
				mu.Unlock()
				_ = c.Close()
			}()
			hctx, cancel := context.WithTimeout(ctx, tunnelHandshakeTimeout)
			tc, err := tunnel.Dial(hctx, routerURL, target, nil)
			cancel()
			if err != nil {
				if ctx.Err() == nil {
					fmt.Fprintf(errOut, "port-forward: connection from %s: %v\n", c.RemoteAddr(), err)
				}
				return
			}
			mu.Lock()
			conns[tc] = struct{}{}
			mu.Unlock()
			if ctx.Err() != nil {
				// Stopped while dialling: the sweep may have missed tc.
				_ = tc.Close()
			}
			defer func() {
				mu.Lock()
				delete(conns, tc)
				mu.Unlock()
			}()
			tunnel.Join(local, tc)
		})
	}
}

// Headers the sandbox-router routes by (internal/router/headers.go).
const (
	headerSandboxID        = "X-Sandbox-Id"
	headerSandboxUID       = "X-Sandbox-Uid"
	headerSandboxNamespace = "X-Sandbox-Namespace"
	headerSandboxPort      = "X-Sandbox-Port"
)

type portForwardOptions struct {
	address string
	timeout time.Duration
	tcp     bool
}

func newPortForwardCommand(prog string, flags *clusterFlags) *cobra.Command {
	o := &portForwardOptions{}
	cmd := &cobra.Command{
		Use:   "port-forward NAME [LOCAL:]REMOTE",
		Short: "Forward a local port to a port of a sandbox (HTTP, or raw TCP with --tcp), through the sandbox-router",
		Long: "Listen on LOCAL (default: REMOTE; 0 picks a free port) and forward every HTTP request,\n" +
			"WebSocket included, to port REMOTE of sandbox NAME through the sandbox-router, which\n" +
			"only forwards to ports the sandbox's Pod declares (and sandboxd's). Requests are\n" +
			"pinned to the Sandbox's UID: if it is deleted and a new one takes its name, they\n" +
			"fail instead of reaching the newcomer.\n\n" +
			"With --tcp every local connection becomes one raw TCP tunnel to the port instead\n" +
			"(any protocol: databases, SSH, Redis; half-close is passed on), authorized and\n" +
			"checked by the router exactly like an HTTP request. Runs until Ctrl-C.",
		Example: "  " + prog + " port-forward my-sandbox 8000            # a web app: prints URL: http://127.0.0.1:8000/\n" +
			"  " + prog + " port-forward my-sandbox 9000:8080 &  curl localhost:9000/v1/health\n" +
			"  " + prog + " port-forward --tcp my-sandbox 5432      # psql -h 127.0.0.1",
		Args:              exactArgs(2, "a sandbox NAME and a port spec [LOCAL:]REMOTE"),
		ValidArgsFunction: completeSandboxNames(flags, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			local, remotePort, err := parsePortSpec(args[1])
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			s, err := flags.connect(ctx)
			if err != nil {
				return err
			}
			defer s.close()
			rep := newReporter(cmd.ErrOrStderr(), false)
			// Resume and wait like exec, and prove the sandbox answers.
			sb, t, err := attachReady(ctx, s, rep, prog, args[0], o.timeout)
			if err != nil {
				return err
			}
			disconnect(sb)
			routerURL, err := s.routerURL(ctx)
			if err != nil {
				return err
			}
			target, err := url.Parse(routerURL)
			if err != nil {
				return fmt.Errorf("router URL %q: %w", routerURL, err)
			}
			ln, err := net.Listen("tcp", net.JoinHostPort(o.address, strconv.Itoa(local)))
			if err != nil {
				return withFix(fmt.Errorf("listening on %s:%d: %w", o.address, local, err), "choose another LOCAL port (0 picks a free one)")
			}
			if o.tcp {
				fmt.Fprintf(cmd.OutOrStdout(), "Forwarding from %s -> %s:%d (raw TCP, through the sandbox-router)\n", ln.Addr(), t.Name(), remotePort)
				serveTCPForward(ctx, ln, routerURL, tunnel.Target{Namespace: t.Namespace, Name: t.Sandbox.Name,
					UID: string(t.Sandbox.UID), Port: remotePort}, cmd.ErrOrStderr())
				return nil
			}
			proxy := &httputil.ReverseProxy{
				Rewrite: func(r *httputil.ProxyRequest) {
					r.SetURL(target)
					r.Out.Host = target.Host
					r.Out.Header.Set(headerSandboxID, t.Sandbox.Name)
					r.Out.Header.Set(headerSandboxUID, string(t.Sandbox.UID))
					r.Out.Header.Set(headerSandboxNamespace, t.Namespace)
					r.Out.Header.Set(headerSandboxPort, strconv.Itoa(remotePort))
				},
				FlushInterval: -1, // stream: server-sent events, progress output
			}
			srv := &http.Server{Handler: proxy, ReadHeaderTimeout: 30 * time.Second}
			fmt.Fprintf(cmd.OutOrStdout(), "Forwarding from %s -> %s:%d (HTTP, through the sandbox-router)\n", ln.Addr(), t.Name(), remotePort)
			fmt.Fprintf(cmd.OutOrStdout(), "URL: %s\n", localURL(ln.Addr()))
			errc := make(chan error, 1)
			go func() { errc <- srv.Serve(ln) }()
			select {
			case err := <-errc:
				return fmt.Errorf("serving the port-forward: %w", err)
			case <-ctx.Done():
			}
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
				return fmt.Errorf("stopping the port-forward: %w", err)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&o.address, "address", "127.0.0.1", "local address to listen on")
	cmd.Flags().BoolVar(&o.tcp, "tcp", false, "forward raw TCP (one router tunnel per connection) instead of HTTP requests")
	cmd.Flags().DurationVar(&o.timeout, "timeout", defaultReadyTimeout, "how long to wait for a sandbox that is still starting")
	return cmd
}

// localURL is the URL a browser on this machine opens for an HTTP
// forward: a wildcard listen address becomes localhost.
func localURL(a net.Addr) string {
	host, port, err := net.SplitHostPort(a.String())
	if err != nil {
		return "http://" + a.String() + "/"
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		host = "localhost"
	}
	return "http://" + net.JoinHostPort(host, port) + "/"
}

// parsePortSpec parses [LOCAL:]REMOTE.
func parsePortSpec(spec string) (local, remotePort int, err error) {
	l, r, found := strings.Cut(spec, ":")
	if !found {
		l, r = spec, spec
	}
	parse := func(what, s string, zeroOK bool) (int, error) {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 || n > 65535 || (n == 0 && !zeroOK) {
			return 0, usagef("invalid %s port %q in %q: want [LOCAL:]REMOTE, ports 1-65535 (LOCAL 0: any free port)", what, s, spec)
		}
		return n, nil
	}
	if remotePort, err = parse("remote", r, false); err != nil {
		return 0, 0, err
	}
	if local, err = parse("local", l, true); err != nil {
		return 0, 0, err
	}
	return local, remotePort, nil
}

// routerURL is a URL of the sandbox-router this process can reach: the
// --router-url, the port-forward the session already opened, or a new
// port-forward to the router (in the sandboxes' namespace, else the
// default router namespace, or --router-namespace).
func (s *session) routerURL(ctx context.Context) (string, error) {
	if s.flags.routerURL != "" {
		return s.flags.routerURL, nil
	}
	if s.flags.gateway != "" {
		return "", usagef("port-forward goes to the sandbox-router directly: pass --router-url instead of --gateway")
	}
	if s.tunnel != nil {
		return s.tunnel.URL(), nil
	}
	ns := s.flags.routerNamespace
	if ns == "" {
		pod, err := remote.RouterPod(ctx, s.helper, s.namespace)
		if err != nil {
			return "", err
		}
		ns = remote.DefaultRouterNamespace
		if pod != "" {
			ns = s.namespace
		}
	}
	t, err := remote.OpenRouterTunnel(ctx, s.helper, ns)
	if err != nil {
		return "", withFix(fmt.Errorf("reaching the sandbox-router in %s: %w", ns, err),
			"pass --router-namespace (where the router runs) or --router-url")
	}
	s.tunnel = t
	return t.URL(), nil
}
