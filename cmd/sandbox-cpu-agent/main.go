// Command sandbox-cpu-agent runs as root on the local cluster's node and
// gives the platform's own Pods (selected by namespace and service account)
// the kernel's real-time CPU class within a bounded budget, so a claim's
// wake-ups in the controller are not delayed by pods starting. `agent-sandbox
// up` runs it next to the kubelet; see internal/cpuclass.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"sigs.k8s.io/agent-sandbox/internal/cpuclass"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "sandbox-cpu-agent:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("sandbox-cpu-agent", flag.ContinueOnError)
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig (empty: in-cluster)")
	node := fs.String("node-name", os.Getenv("NODE_NAME"), "this node's name (default $NODE_NAME)")
	mount := fs.String("cpu-cgroup", "/sys/fs/cgroup/cpu", "mount point of the cgroup v1 cpu hierarchy")
	root := fs.String("cgroup-root", "/", "the kubelet's cgroupRoot")
	period := fs.Duration("period", time.Second, "real-time budget period (every level of the Pod's cgroup chain gets it)")
	runtime := fs.Duration("runtime", 300*time.Millisecond, "real-time budget per container per period (per CPU)")
	var selectors []cpuclass.Selector
	fs.Func("pods", "NAMESPACE/SERVICEACCOUNT: Pods running as this service account in this namespace get the real-time class (repeatable, at least one)", func(s string) error {
		sel, err := cpuclass.ParseSelector(s)
		if err != nil {
			return err
		}
		selectors = append(selectors, sel)
		return nil
	})
	check := fs.Bool("check", false, "check the flags and the host, then exit")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if len(selectors) == 0 {
		return errors.New("--pods is required")
	}
	if *period <= 0 || *runtime <= 0 || *runtime > *period {
		return fmt.Errorf("--runtime %v and --period %v: want 0 < runtime <= period", *runtime, *period)
	}
	if *node == "" {
		return errors.New("--node-name (or $NODE_NAME) is required")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := cpuclass.Supported(*mount); err != nil {
		// Nothing to do on this host; stay up so the cluster's health
		// check of the component holds, and say why once.
		klog.InfoS("real-time class off", "reason", err.Error())
		if *check {
			return nil
		}
		<-ctx.Done()
		return nil
	}
	if *check {
		return nil
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		return fmt.Errorf("loading kubeconfig: %w", err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("creating client: %w", err)
	}
	a := &cpuclass.Agent{Client: cs, NodeName: *node, Select: selectors,
		Cgroups: cpuclass.PodCgroups{Mount: *mount, Root: *root},
		Budget:  cpuclass.Budget{Period: *period, Runtime: *runtime}}
	klog.InfoS("granting the real-time class", "pods", fmt.Sprint(selectors), "budget", a.Budget.Runtime, "period", a.Budget.Period)
	return a.Run(ctx)
}
