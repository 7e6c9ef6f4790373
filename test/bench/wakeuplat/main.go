// Command wakeuplat measures how late the kernel wakes a sleeping thread on
// each CPU: the scheduling delay a control-plane process meets every time a
// request or a watch event wakes it. One thread per CPU, pinned, sleeps to
// an absolute deadline every period and records how far past the deadline
// it ran; each interval it prints a histogram of those delays per CPU.
//
// Run it beside a load (say `agent-sandbox bench` on the local cluster) in
// the scheduling class and cgroup to compare:
//
//	go run ./test/bench/wakeuplat -duration 2m                      # SCHED_OTHER, this cgroup
//	go run ./test/bench/wakeuplat -duration 2m -rr 10               # SCHED_RR priority 10
//	echo $PID > /sys/fs/cgroup/cpu/agent-sandbox-control-plane/cgroup.procs
//
// docs/performance.md ("Wake-ups on the node's kernel") has what it showed.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// bounds are the histogram's upper edges; a last bucket holds the rest.
var bounds = []time.Duration{
	100 * time.Microsecond, time.Millisecond, 5 * time.Millisecond, 10 * time.Millisecond,
	20 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond,
}

type histogram struct {
	counts []int
	max    time.Duration
}

func newHistogram() *histogram { return &histogram{counts: make([]int, len(bounds)+1)} }

func (h *histogram) add(d time.Duration) {
	i := 0
	for i < len(bounds) && d >= bounds[i] {
		i++
	}
	h.counts[i]++
	h.max = max(h.max, d)
}

func (h *histogram) String() string {
	var b strings.Builder
	for i, n := range h.counts {
		if i < len(bounds) {
			fmt.Fprintf(&b, "<%v:%d ", bounds[i], n)
		} else {
			fmt.Fprintf(&b, ">=%v:%d ", bounds[len(bounds)-1], n)
		}
	}
	fmt.Fprintf(&b, "max:%v", h.max.Round(10*time.Microsecond))
	return b.String()
}

func main() {
	period := flag.Duration("period", time.Millisecond, "sleep between wake-ups")
	interval := flag.Duration("interval", time.Minute, "print a histogram this often")
	duration := flag.Duration("duration", 0, "stop after this long (0: run until killed)")
	rr := flag.Int("rr", 0, "run the probe threads under SCHED_RR at this priority (0: SCHED_OTHER)")
	flag.Parse()

	var mu sync.Mutex
	for cpu := range runtime.NumCPU() {
		go probe(cpu, *period, *interval, *rr, &mu)
	}
	if *duration > 0 {
		time.Sleep(*duration)
		return
	}
	select {}
}

// probe pins its thread to cpu and records the lateness of each wake-up.
func probe(cpu int, period, interval time.Duration, rr int, mu *sync.Mutex) {
	runtime.LockOSThread() // the thread stays locked, and its settings die with it
	var set unix.CPUSet
	set.Set(cpu)
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		fail(fmt.Errorf("pin to cpu %d: %w", cpu, err))
	}
	if rr > 0 {
		attr := &unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_RR, Priority: uint32(rr)}
		if err := unix.SchedSetAttr(0, attr, 0); err != nil {
			fail(fmt.Errorf("SCHED_RR %d: %w", rr, err))
		}
	}
	h := newHistogram()
	next := now()
	reported := next
	for {
		next += period.Nanoseconds()
		ts := unix.NsecToTimespec(next)
		// EINTR (a signal) just means sleep again to the same deadline.
		for errors.Is(unix.ClockNanosleep(unix.CLOCK_MONOTONIC, unix.TIMER_ABSTIME, &ts, nil), unix.EINTR) {
		}
		t := now()
		h.add(time.Duration(t - next))
		if t-next > period.Nanoseconds() {
			next = t // a missed wake-up does not make the next ones look late
		}
		if time.Duration(t-reported) >= interval {
			mu.Lock()
			fmt.Printf("%s cpu%d %s\n", time.Now().UTC().Format(time.TimeOnly), cpu, h)
			mu.Unlock()
			h, reported = newHistogram(), t
		}
	}
}

func now() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "wakeuplat:", err)
	os.Exit(1)
}
