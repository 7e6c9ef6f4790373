// Command clientset uses the generated typed clients at the reference's
// import paths: it creates a SandboxClaim from a warm pool with the
// extensions clientset, waits through an informer until it is Ready, reads
// its Sandbox with the agents.x-k8s.io clientset and a lister, then deletes
// the claim.
//
//	clientset -pool python-sandbox-warmpool -namespace default
//
// The kubeconfig comes from KUBECONFIG. It prints "key=value" lines.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
	agentsclient "sigs.k8s.io/agent-sandbox/clients/k8s/clientset/versioned"
	extclient "sigs.k8s.io/agent-sandbox/clients/k8s/extensions/clientset/versioned"
	extinformers "sigs.k8s.io/agent-sandbox/clients/k8s/extensions/informers/externalversions"
	agentsinformers "sigs.k8s.io/agent-sandbox/clients/k8s/informers/externalversions"
)

func main() {
	pool := flag.String("pool", "", "SandboxWarmPool to claim from")
	namespace := flag.String("namespace", "default", "namespace of the pool and the claim")
	flag.Parse()
	if err := run(*pool, *namespace); err != nil {
		fmt.Fprintln(os.Stderr, "clientset:", err)
		os.Exit(1)
	}
}

func run(pool, namespace string) error {
	if pool == "" {
		return fmt.Errorf("-pool is required")
	}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
		clientcmd.NewDefaultClientConfigLoadingRules(), &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	ext, err := extclient.NewForConfig(cfg)
	if err != nil {
		return err
	}
	agents, err := agentsclient.NewForConfig(cfg)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	claim, err := ext.ExtensionsV1beta1().SandboxClaims(namespace).Create(ctx, &extv1beta1.SandboxClaim{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "refsdk-clientset-"},
		Spec:       extv1beta1.SandboxClaimSpec{WarmPoolRef: extv1beta1.WarmPoolRef{Name: pool}},
	}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("create SandboxClaim: %w", err)
	}
	defer func() {
		_ = ext.ExtensionsV1beta1().SandboxClaims(namespace).Delete(context.Background(), claim.Name, metav1.DeleteOptions{})
	}()
	fmt.Printf("claim=%s\n", claim.Name)

	// Wait for Ready through a shared informer (level-triggered: the lister
	// is re-read on every event).
	extFactory := extinformers.NewSharedInformerFactoryWithOptions(ext, 0, extinformers.WithNamespace(namespace))
	claims := extFactory.Extensions().V1beta1().SandboxClaims()
	ready := make(chan string, 1)
	check := func(any) {
		c, err := claims.Lister().SandboxClaims(namespace).Get(claim.Name)
		if err != nil {
			return
		}
		for _, cond := range c.Status.Conditions {
			if cond.Type == "Ready" && cond.Status == metav1.ConditionTrue && c.Status.SandboxStatus.Name != "" {
				select {
				case ready <- c.Status.SandboxStatus.Name:
				default:
				}
			}
		}
	}
	if _, err := claims.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: check, UpdateFunc: func(_, n any) { check(n) },
	}); err != nil {
		return err
	}
	// Shutdown waits for the informers, which stop when their context ends:
	// end it first (a deferred cancel of ctx would run after Shutdown).
	extCtx, stopExt := context.WithCancel(ctx)
	extFactory.Start(extCtx.Done())
	defer func() { stopExt(); extFactory.Shutdown() }()
	var sandboxName string
	select {
	case sandboxName = <-ready:
	case <-ctx.Done():
		return fmt.Errorf("claim %s not Ready: %w", claim.Name, ctx.Err())
	}
	fmt.Printf("sandbox=%s\n", sandboxName)

	sb, err := agents.AgentsV1beta1().Sandboxes(namespace).Get(ctx, sandboxName, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("get Sandbox: %w", err)
	}
	agentsFactory := agentsinformers.NewSharedInformerFactoryWithOptions(agents, 0, agentsinformers.WithNamespace(namespace))
	lister := agentsFactory.Agents().V1beta1().Sandboxes().Lister()
	agentsCtx, stopAgents := context.WithCancel(ctx)
	agentsFactory.Start(agentsCtx.Done())
	defer func() { stopAgents(); agentsFactory.Shutdown() }()
	for typ, ok := range agentsFactory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("informer %v did not sync", typ)
		}
	}
	cached, err := lister.Sandboxes(namespace).Get(sandboxName)
	if err != nil {
		return fmt.Errorf("lister: %w", err)
	}
	if cached.UID != sb.UID {
		return fmt.Errorf("lister has Sandbox %s with UID %s, the API %s", sandboxName, cached.UID, sb.UID)
	}
	fmt.Printf("sandbox-uid=%s\n", sb.UID)
	return nil
}
