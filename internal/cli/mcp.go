package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"

	"sigs.k8s.io/agent-sandbox/internal/mcp"
)

type mcpOptions struct {
	transport       string
	listen          string
	path            string
	sessionLabelKey string
	idleTimeout     time.Duration
	shutdownAfter   time.Duration
}

func newMCPCommand(prog string, flags *clusterFlags) *cobra.Command {
	o := &mcpOptions{}
	cmd := &cobra.Command{
		Use:   "mcp",
		Short: "Serve sandboxes to agent frameworks as an MCP server (stdio or streamable HTTP)",
		Long: "Run a Model Context Protocol server with the tools create_sandbox, delete_sandbox,\n" +
			"execute_command, upload_file, download_file, list_files and file_exists, and the\n" +
			"resource sandboxes://{namespace}. Sessions are isolated: a session only sees the\n" +
			"sandboxes it created (claims labelled --session-label-key=<session id>); other\n" +
			"claims read as not found. execute_command streams its output as progress\n" +
			"notifications when the client sends a progress token.\n\n" +
			"--transport stdio (default) serves one session on stdin/stdout, for clients that\n" +
			"start the server themselves; --transport http serves streamable HTTP at\n" +
			"http://--listen--path for many sessions. There is no authentication: anyone who can\n" +
			"reach the HTTP listener can create sandboxes with your Kubernetes credentials,\n" +
			"so it listens on loopback unless told otherwise.",
		Example: "  " + prog + " mcp                       # in an MCP client's server config\n" +
			"  " + prog + " mcp --transport http --listen 127.0.0.1:8000",
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch o.transport {
			case "stdio", "http":
			default:
				return usagef("unknown --transport %q: use stdio or http", o.transport)
			}
			ctx := cmd.Context()
			s, err := flags.connect(ctx)
			if err != nil {
				return err
			}
			defer s.close()
			opts, err := s.sdkOptions(ctx)
			if err != nil {
				return err
			}
			var logger *slog.Logger
			if flags.verbose {
				logger = slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil))
			}
			srv, err := mcp.New(ctx, mcp.Config{
				Options: opts, Namespace: s.namespace, SessionLabelKey: o.sessionLabelKey,
				Version: versionString(), Logger: logger, DefaultShutdownAfter: o.shutdownAfter,
			})
			if err != nil {
				return err
			}
			defer func() {
				dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
				defer cancel()
				srv.Close(dctx)
			}()
			if o.transport == "stdio" {
				err := srv.Run(ctx, &sdk.StdioTransport{})
				if err != nil && ctx.Err() == nil && !errors.Is(err, context.Canceled) {
					return fmt.Errorf("serving MCP on stdio: %w", err)
				}
				return nil
			}
			return serveMCPHTTP(ctx, cmd, srv, o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.transport, "transport", "stdio", "stdio or http (streamable HTTP)")
	f.StringVar(&o.listen, "listen", "127.0.0.1:8000", "address of the HTTP listener (--transport http)")
	f.StringVar(&o.path, "path", "/mcp", "URL path of the MCP endpoint (--transport http)")
	f.StringVar(&o.sessionLabelKey, "session-label-key", mcp.DefaultSessionLabelKey, "claim label that holds the MCP session id")
	f.DurationVar(&o.idleTimeout, "idle-timeout", 30*time.Minute, "end HTTP sessions idle this long (0: never)")
	f.DurationVar(&o.shutdownAfter, "default-shutdown-after", 5*time.Minute,
		"lifetime of sandboxes whose create_sandbox call sets no shutdown_after_seconds (at least 1s; every sandbox expires)")
	_ = cmd.RegisterFlagCompletionFunc("transport", cobra.FixedCompletions([]string{"stdio", "http"}, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

func serveMCPHTTP(ctx context.Context, cmd *cobra.Command, srv *mcp.Server, o *mcpOptions) error {
	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		return withFix(fmt.Errorf("listening on %s: %w", o.listen, err), "choose another --listen address")
	}
	mux := http.NewServeMux()
	mux.Handle(o.path, srv.HTTPHandler(o.idleTimeout))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(cmd.ErrOrStderr(), "serving MCP (streamable HTTP) at http://%s%s\n", ln.Addr(), o.path)
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serving MCP over HTTP: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = hs.Shutdown(sctx)
	return nil
}
