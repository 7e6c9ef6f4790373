// Command sandbox-hibernate-agent is deep hibernation's node agent: it runs
// as root on each gVisor node (host process or privileged DaemonSet with the
// host's runsc root and store mounted), checkpoints the Pods the controller
// asks it to (runsc checkpoint) and reports restore results recorded by the
// hibernation shim. See internal/hibernate.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"sigs.k8s.io/agent-sandbox/clients/k8s/clientset/versioned"
	"sigs.k8s.io/agent-sandbox/internal/hibernate"
)

// version is stamped by the image build (-X main.version).
var version = "dev"

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "sandbox-hibernate-agent:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("sandbox-hibernate-agent", flag.ContinueOnError)
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig (empty: in-cluster)")
	node := fs.String("node-name", os.Getenv("NODE_NAME"), "this node's name (default $NODE_NAME)")
	store := fs.String("store", "/var/lib/agent-sandbox/hibernate", "node-local snapshot store (the shim's AGENT_SANDBOX_HIBERNATE_DIR)")
	runsc := fs.String("runsc", "runsc", "the runsc binary the node's shim uses")
	runscRoot := fs.String("runsc-root", "/run/agent-sandbox/runsc/k8s.io", "the shim's runsc state root for containerd's k8s.io namespace")
	showVersion := fs.Bool("version", false, "print the version and exit")
	taskDir := fs.String("task-dir", "/run/agent-sandbox/containerd/io.containerd.runtime.v2.task/k8s.io", "containerd's task bundle dir for the k8s.io namespace")
	// An agent in a container (the chart's DaemonSet) reaches Pod volumes
	// only through the node directories mounted into it; see
	// hibernate.HostPaths. A host process leaves it unset.
	var volumeRoots hibernate.HostPaths
	fs.Func("volume-root", "HOST[:LOCAL]: a node directory holding Pod volumes (the kubelet's pods/ dir, a hostPath PV's parent) mounted into the agent at LOCAL (default HOST); repeatable. When set, a volume outside them keeps its snapshot in the node store. Unset: the agent runs on the host and reaches every path", func(s string) error {
		m, err := hibernate.ParseHostMount(s)
		if err != nil {
			return err
		}
		volumeRoots = append(volumeRoots, m)
		return nil
	})
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *showVersion {
		fmt.Println("sandbox-hibernate-agent", version)
		return nil
	}
	for _, m := range volumeRoots {
		// A mount missing from the DaemonSet would otherwise only show as
		// every volume snapshot landing in the node store.
		fi, err := os.Stat(m.Local)
		if err != nil {
			return fmt.Errorf("--volume-root %s (is it mounted?): %w", m, err)
		}
		if !fi.IsDir() {
			return fmt.Errorf("--volume-root %s: %s is not a directory", m, m.Local)
		}
	}
	if *node == "" {
		return fmt.Errorf("--node-name (or $NODE_NAME) is required")
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		return fmt.Errorf("loading kubeconfig: %w", err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("creating client: %w", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	sandboxes, err := versioned.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("creating sandbox client: %w", err)
	}
	a := &hibernate.Agent{Client: cs, NodeName: *node, Checkpointer: hibernate.Checkpointer{
		Store: hibernate.Store{Root: *store}, Runsc: *runsc, RunscRoot: *runscRoot, TaskDir: *taskDir,
		HostPaths: volumeRoots,
	}, SandboxUID: func(ctx context.Context, namespace, name string) (string, error) {
		sb, err := sandboxes.AgentsV1beta1().Sandboxes(namespace).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return "", nil
		}
		if err != nil {
			return "", fmt.Errorf("getting sandbox %s/%s: %w", namespace, name, err)
		}
		return string(sb.UID), nil
	}}
	return a.Run(ctx)
}
