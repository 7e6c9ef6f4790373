package install

import (
	"slices"
	"testing"
)

// The late-binding key's Role comes with the extensions and goes with
// controller.manageLateBindingKey=false, which also reaches the flag.
func TestHelmLateBindingKeyValues(t *testing.T) {
	const role = "Role/agent-sandbox-system/agent-sandbox-controller-late-binding"
	if !slices.Contains(keys(decode(t, helmTemplate(t))), role) {
		t.Errorf("the default install lacks %s", role)
	}
	objs := decode(t, helmTemplate(t, "--set", "controller.manageLateBindingKey=false"))
	if slices.Contains(keys(objs), role) {
		t.Errorf("manageLateBindingKey=false still renders %s", role)
	}
	if args := controllerArgs(t, objs); !slices.Contains(args, "--manage-late-binding-key=false") {
		t.Errorf("controller args %v lack --manage-late-binding-key=false", args)
	}
	if slices.Contains(keys(decode(t, helmTemplate(t, "--set", "controller.extensions=false"))), role) {
		t.Errorf("extensions off, yet %s is rendered", role)
	}
}
