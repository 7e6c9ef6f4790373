package cli

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"golang.org/x/term"
)

// reporter shows the progress of long operations on stderr. On a terminal
// each step line carries the time since the command began and waits show
// a spinner with a running clock; elsewhere (pipes, logs, tests) steps are
// plain lines and waits print one line, so output stays stable and
// greppable. Quiet reporters print nothing.
type reporter struct {
	w     io.Writer
	tty   bool
	quiet bool
	start time.Time

	mu      sync.Mutex
	spinMsg string
	spinEnd chan struct{}
	spinWG  sync.WaitGroup
}

func newReporter(w io.Writer, quiet bool) *reporter {
	return &reporter{w: w, tty: isTerminal(w), quiet: quiet, start: time.Now()}
}

// isTerminal reports whether w is a terminal that can redraw a line.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd())) && os.Getenv("TERM") != "dumb"
}

// step prints one finished step.
func (r *reporter) step(format string, args ...any) {
	if r.quiet {
		return
	}
	msg := fmt.Sprintf(format, args...)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.tty {
		r.clearLocked()
		fmt.Fprintf(r.w, "[%5.1fs] %s\n", time.Since(r.start).Seconds(), msg)
		r.drawLocked()
		return
	}
	fmt.Fprintln(r.w, msg)
}

var spinnerFrames = []string{"⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"}

// wait announces a wait; call the returned function when it is over. On a
// terminal a spinner runs until then.
func (r *reporter) wait(format string, args ...any) (done func()) {
	if r.quiet {
		return func() {}
	}
	msg := fmt.Sprintf(format, args...)
	if !r.tty {
		fmt.Fprintln(r.w, msg+" ...")
		return func() {}
	}
	r.mu.Lock()
	r.stopLocked()
	r.spinMsg = msg
	end := make(chan struct{})
	r.spinEnd = end
	began := time.Now()
	r.drawLocked()
	r.mu.Unlock()
	r.spinWG.Go(func() {
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for i := 1; ; i++ {
			select {
			case <-end:
				return
			case <-t.C:
				r.mu.Lock()
				if r.spinEnd == end {
					fmt.Fprintf(r.w, "\r\033[K%s %s (%.1fs)", spinnerFrames[i%len(spinnerFrames)], msg, time.Since(began).Seconds())
				}
				r.mu.Unlock()
			}
		}
	})
	var once sync.Once
	return func() {
		once.Do(func() {
			r.mu.Lock()
			if r.spinEnd == end {
				r.stopLocked()
			}
			r.mu.Unlock()
			r.spinWG.Wait()
		})
	}
}

func (r *reporter) drawLocked() {
	if r.spinMsg != "" {
		fmt.Fprintf(r.w, "\r\033[K%s %s", spinnerFrames[0], r.spinMsg)
	}
}

func (r *reporter) clearLocked() {
	if r.spinMsg != "" {
		fmt.Fprint(r.w, "\r\033[K")
	}
}

func (r *reporter) stopLocked() {
	if r.spinEnd != nil {
		close(r.spinEnd)
		r.spinEnd = nil
	}
	r.clearLocked()
	r.spinMsg = ""
}
