// Command crdconversion adds the conversion webhook stanza to CRDs that
// controller-gen generated (controller-gen has no marker for it): every CRD
// serving more than one version converts through the controller's webhook
// at https://<service>.<namespace>.svc:443/convert. The caBundle is left out;
// the controller patches it in at runtime (--manage-webhook-certs).
//
//	go run ./hack/crdconversion [-service NAME] [-namespace NS] FILE...
//
// `make generate` runs it on k8s/crd/*.yaml.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

func main() {
	service := flag.String("service", "agent-sandbox-webhook-service", "webhook Service name")
	namespace := flag.String("namespace", "agent-sandbox-system", "webhook Service namespace")
	flag.Parse()
	for _, path := range flag.Args() {
		if err := patchFile(path, *service, *namespace); err != nil {
			fmt.Fprintf(os.Stderr, "crdconversion: %v\n", err)
			os.Exit(1)
		}
	}
}

func patchFile(path, service, namespace string) error {
	in, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("reading %s: %w", path, err)
	}
	// Decode into a generic map, not the typed CRD, so that no field the
	// generator wrote is reordered or dropped.
	var crd map[string]any
	if err := yaml.Unmarshal(in, &crd); err != nil {
		return fmt.Errorf("parsing %s: %w", path, err)
	}
	spec, ok := crd["spec"].(map[string]any)
	if !ok {
		return fmt.Errorf("%s: no spec", path)
	}
	versions, _ := spec["versions"].([]any)
	if len(versions) < 2 {
		return nil
	}
	conv := apiextensionsv1.CustomResourceConversion{
		Strategy: apiextensionsv1.WebhookConverter,
		Webhook: &apiextensionsv1.WebhookConversion{
			ClientConfig: &apiextensionsv1.WebhookClientConfig{
				Service: &apiextensionsv1.ServiceReference{
					Name: service, Namespace: namespace, Path: new("/convert"), Port: new(int32(443)),
				},
			},
			ConversionReviewVersions: []string{"v1", "v1beta1"},
		},
	}
	raw, err := yaml.Marshal(conv)
	if err != nil {
		return fmt.Errorf("encoding conversion: %w", err)
	}
	var convMap map[string]any
	if err := yaml.Unmarshal(raw, &convMap); err != nil {
		return fmt.Errorf("decoding conversion: %w", err)
	}
	spec["conversion"] = convMap
	out, err := yaml.Marshal(crd)
	if err != nil {
		return fmt.Errorf("encoding %s: %w", path, err)
	}
	if bytes.HasPrefix(in, []byte("---\n")) {
		out = append([]byte("---\n"), out...)
	}
	if err := os.WriteFile(path, out, 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}
