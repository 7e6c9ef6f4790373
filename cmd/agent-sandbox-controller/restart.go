package main

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
)

// restartsInPlaceEnv carries the number of restarts in place into the new
// process image, for its log and agent_sandbox_controller_restarts_in_place:
// a restart in place is invisible to the kubelet's restartCount.
const restartsInPlaceEnv = "AGENT_SANDBOX_CONTROLLER_RESTARTS_IN_PLACE"

// lostLeadershipError is what run returns when the manager stopped because
// this replica lost its lease while nothing asked the process to stop, and
// --leader-election-restart-in-place is on.
type lostLeadershipError struct {
	err error
	// stopping reports whether the process has since been asked to stop
	// (SIGTERM or SIGINT), in which case it must exit, not start again.
	stopping func() bool
}

func (e *lostLeadershipError) Error() string { return "running manager: " + e.err.Error() }
func (e *lostLeadershipError) Unwrap() error { return e.err }

// isLeadershipLost reports whether the manager's error is controller-runtime's
// loss of the leader lease. controller-runtime returns it as a plain
// errors.New, so the message is all there is to match; the restart test
// (TestLostLeaseRestartsInPlace) fails if it ever changes.
func isLeadershipLost(err error) bool {
	return err != nil && strings.Contains(err.Error(), "leader election lost")
}

// restartInPlace replaces this process with a fresh run of its own binary,
// same arguments and environment (plus the restart count).
//
// Why not exit, as controller-runtime intends: a replica that cannot renew
// its lease (an API server outage longer than the renew deadline, 10 s)
// must stop acting at once, and exiting does that, but the kubelet then
// restarts the container with a crash-loop backoff that doubles with every
// restart and only resets after 10 minutes of running (10 s, 20 s, ... up
// to 5 min). A few outages in a row (a single control-plane node
// restarting, an upgrade) left the controller in CrashLoopBackOff for
// minutes after the API server was back, with every claim waiting. execve
// stops every goroutine of the old image just as exiting does (no
// reconcile of the old process survives it, so there is never a second
// leader in this Pod), closes its listeners (Go opens every descriptor
// close-on-exec), and the new image starts as a restarted container would:
// it waits for the API server, then takes its own lease back.
func restartInPlace(stopping func() bool) error {
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding this binary: %w", err)
	}
	// From here a SIGTERM ends the process (the default action) instead of
	// cancelling a context nobody reads any more; one that came before is
	// seen by stopping.
	signal.Reset(syscall.SIGTERM, syscall.SIGINT)
	if stopping() {
		return errors.New("asked to stop")
	}
	env := append(withoutEnv(os.Environ(), restartsInPlaceEnv), restartsInPlaceEnv+"="+strconv.Itoa(restartsInPlace()+1))
	return syscall.Exec(exe, os.Args, env)
}

// restartsInPlace is how many times this process image's predecessors in
// the container started again in place (0 for the container's first).
func restartsInPlace() int {
	n, err := strconv.Atoi(os.Getenv(restartsInPlaceEnv))
	if err != nil || n < 0 {
		return 0
	}
	return n
}

// withoutEnv returns env without the entries for key.
func withoutEnv(env []string, key string) []string {
	out := env[:0:0]
	for _, kv := range env {
		if !strings.HasPrefix(kv, key+"=") {
			out = append(out, kv)
		}
	}
	return out
}
