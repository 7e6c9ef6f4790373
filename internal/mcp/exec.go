package mcp

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"sigs.k8s.io/agent-sandbox/clients/go/sandbox"
	"sigs.k8s.io/agent-sandbox/internal/capbuf"
)

type execIn struct {
	claimIn
	Command string  `json:"command" jsonschema:"command line, run by /bin/sh -c in the sandbox's workspace"`
	Timeout float64 `json:"timeout,omitempty" jsonschema:"seconds the operation may take, 0 < timeout <= 600 (default 60)"`
}

type execOut struct {
	ExitCode int    `json:"exit_code"`
	Stdout   string `json:"stdout"`
	Stderr   string `json:"stderr"`
}

func (s *Server) executeCommand(ctx context.Context, req *sdk.CallToolRequest, in execIn) (*sdk.CallToolResult, execOut, error) {
	var out execOut
	timeout, err := checkTimeout("timeout", in.Timeout)
	if err != nil {
		return nil, out, err
	}
	if strings.TrimSpace(in.Command) == "" {
		return nil, out, errors.New("command is empty")
	}
	sb, err := s.attach(ctx, req.Session, in.claimIn)
	if err != nil {
		return nil, out, err
	}
	prog := newProgress(ctx, req)
	stdout := newOutputBuffer(maxOutputBytes, prog, "stdout")
	stderr := newOutputBuffer(maxOutputBytes, prog, "stderr")
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	p, err := sb.Start(cctx, []string{"/bin/sh", "-c", in.Command}, &sandbox.ProcessOptions{Stdout: stdout, Stderr: stderr})
	if err != nil {
		return nil, out, fmt.Errorf("starting the command: %w", err)
	}
	_ = p.Stdin().Close()
	stopBeat := prog.heartbeat(p.Done())
	code, err := p.Wait()
	stopBeat()
	prog.flush()
	if err != nil {
		if cctx.Err() != nil && ctx.Err() == nil {
			return nil, out, fmt.Errorf("command did not finish within %v seconds and was killed", in.Timeout)
		}
		return nil, out, fmt.Errorf("running the command: %w", err)
	}
	out.ExitCode, out.Stdout, out.Stderr = code, stdout.String(), stderr.String()
	return nil, out, nil
}

// progress sends notifications/progress for a request that asked for
// them (a progress token), and nothing otherwise.
type progress struct {
	ctx   context.Context
	req   *sdk.CallToolRequest
	token any
	began time.Time

	mu      sync.Mutex
	n       float64
	pending strings.Builder
	last    time.Time
}

func newProgress(ctx context.Context, req *sdk.CallToolRequest) *progress {
	p := &progress{ctx: ctx, req: req, began: time.Now()}
	if req != nil && req.Params != nil && req.Session != nil {
		p.token = req.Params.GetProgressToken()
	}
	return p
}

// send sends msg now.
func (p *progress) send(msg string) {
	if p.token == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.sendLocked(msg)
}

func (p *progress) sendLocked(msg string) {
	p.n++
	p.last = time.Now()
	if len(msg) > maxProgressMessage {
		msg = msg[len(msg)-maxProgressMessage:]
	}
	_ = p.req.Session.NotifyProgress(p.ctx, &sdk.ProgressNotificationParams{
		ProgressToken: p.token, Progress: p.n, Message: msg,
	})
}

// output records command output and sends it once progressInterval has
// passed since the last notification (the rest goes with flush or the
// next write).
func (p *progress) output(stream string, b []byte) {
	if p.token == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if stream == "stderr" {
		p.pending.WriteString("[stderr] ")
	}
	p.pending.Write(b)
	if time.Since(p.last) >= progressInterval {
		p.flushLocked()
	}
}

func (p *progress) flush() {
	if p.token == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.flushLocked()
}

func (p *progress) flushLocked() {
	if p.pending.Len() == 0 {
		return
	}
	msg := strings.ToValidUTF8(p.pending.String(), "\uFFFD")
	p.pending.Reset()
	p.sendLocked(msg)
}

// heartbeat flushes pending output and, when the command is silent, says
// it is still running, until done is closed or stop is called.
func (p *progress) heartbeat(done <-chan struct{}) (stop func()) {
	if p.token == nil {
		return func() {}
	}
	quit := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(progressInterval)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-quit:
				return
			case <-t.C:
				p.mu.Lock()
				switch {
				case p.pending.Len() > 0:
					p.flushLocked()
				case time.Since(p.last) >= progressHeartbeat:
					p.sendLocked(fmt.Sprintf("running for %.0fs", time.Since(p.began).Seconds()))
				}
				p.mu.Unlock()
			}
		}
	})
	return func() {
		close(quit)
		wg.Wait()
	}
}

// outputBuffer keeps up to max bytes of one output stream and forwards
// everything to the progress notifications.
type outputBuffer struct {
	kept   *capbuf.Buffer
	prog   *progress
	stream string
}

func newOutputBuffer(max int, prog *progress, stream string) *outputBuffer {
	return &outputBuffer{kept: capbuf.New(max), prog: prog, stream: stream}
}

func (o *outputBuffer) Write(b []byte) (int, error) {
	_, _ = o.kept.Write(b)
	o.prog.output(o.stream, b)
	return len(b), nil
}

func (o *outputBuffer) String() string {
	s := o.kept.String()
	if o.kept.Truncated() {
		s += fmt.Sprintf("\n[output truncated at %d bytes]", o.kept.Max())
	}
	return s
}
