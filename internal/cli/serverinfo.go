package cli

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// componentHealth is what the cluster says about one part of
// agent-sandbox: its Pods, how many are Ready, and their images (whose
// tags are the server-side versions).
type componentHealth struct {
	Name       string   `json:"name"`
	Pods       int      `json:"pods"`
	Ready      int      `json:"ready"`
	Namespaces []string `json:"namespaces,omitempty"`
	Images     []string `json:"images,omitempty"`
	// Healthy: at least one Pod, all of them Ready.
	Healthy bool   `json:"healthy"`
	Error   string `json:"error,omitempty"`
}

// serverInfo is the cluster side of `version` and `status`.
type serverInfo struct {
	Kubernetes string            `json:"kubernetes,omitempty"`
	Components []componentHealth `json:"components"`
	Error      string            `json:"error,omitempty"`
}

// components are found by the app label of the manifests and the chart.
var components = []struct{ name, app string }{
	{"agent-sandbox-controller", "agent-sandbox-controller"},
	{"sandbox-router", "sandbox-router"},
}

// fetchServerInfo asks the cluster of flags about itself, within a few
// seconds; what cannot be learned is reported in the Error fields, never
// as a failure: version and status must work without a cluster.
func fetchServerInfo(ctx context.Context, flags *clusterFlags) serverInfo {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var info serverInfo
	s, err := flags.connect(ctx)
	if err != nil {
		info.Error = oneLine(err.Error())
		return info
	}
	if v, err := s.helper.DiscoveryClient.ServerVersion(); err != nil {
		info.Error = oneLine(err.Error())
		return info
	} else {
		info.Kubernetes = v.GitVersion
	}
	for _, c := range components {
		info.Components = append(info.Components, componentOf(ctx, s.kube(), c.name, c.app))
	}
	return info
}

func componentOf(ctx context.Context, c client.Client, name, app string) componentHealth {
	h := componentHealth{Name: name}
	var pods corev1.PodList
	if err := c.List(ctx, &pods, client.MatchingLabels{"app": app}); err != nil {
		h.Error = oneLine(err.Error())
		return h
	}
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil {
			continue
		}
		h.Pods++
		for _, cd := range p.Status.Conditions {
			if cd.Type == corev1.PodReady && cd.Status == corev1.ConditionTrue {
				h.Ready++
			}
		}
		if !slices.Contains(h.Namespaces, p.Namespace) {
			h.Namespaces = append(h.Namespaces, p.Namespace)
		}
		for _, ct := range p.Spec.Containers {
			if !slices.Contains(h.Images, ct.Image) {
				h.Images = append(h.Images, ct.Image)
			}
		}
	}
	h.Healthy = h.Pods > 0 && h.Ready == h.Pods
	if h.Pods == 0 {
		h.Error = "no pods with label app=" + app + " (not installed?)"
	}
	return h
}

// printServerInfo writes the cluster side as a table.
func printServerInfo(w io.Writer, info serverInfo) {
	if info.Error != "" {
		fmt.Fprintf(w, "cluster: not reachable: %s\n", info.Error)
		return
	}
	fmt.Fprintf(w, "kubernetes: %s\n", info.Kubernetes)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "COMPONENT\tHEALTH\tREADY\tNAMESPACES\tIMAGES")
	for _, c := range info.Components {
		health := "healthy"
		switch {
		case c.Error != "":
			health = "unknown: " + c.Error
		case !c.Healthy:
			health = "unhealthy"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d/%d\t%s\t%s\n", c.Name, health, c.Ready, c.Pods,
			none(strings.Join(c.Namespaces, ",")), none(strings.Join(c.Images, ",")))
	}
	_ = tw.Flush()
}
