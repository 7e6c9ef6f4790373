package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// Every controller flag the Helm chart can pass (charts/agent-sandbox,
// template agent-sandbox.controllerFlagNames) exists on the binary: an
// unknown flag would crash-loop the controller of whoever sets the value.
func TestChartControllerFlagsExist(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "charts", "agent-sandbox", "templates", "_helpers.tpl"))
	if err != nil {
		t.Fatal(err)
	}
	block := regexp.MustCompile(`(?s)define "agent-sandbox.controllerFlagNames" -}}(.*?){{- end }}`).FindSubmatch(data)
	if block == nil {
		t.Fatal("agent-sandbox.controllerFlagNames not found in _helpers.tpl")
	}
	n := 0
	for _, line := range strings.Split(strings.TrimSpace(string(block[1])), "\n") {
		_, name, ok := strings.Cut(line, ": ")
		if !ok {
			t.Fatalf("unexpected line %q", line)
		}
		n++
		// The value may not parse for this flag's type; only an unknown
		// flag matters here.
		if _, _, err := parseFlags([]string{"--" + strings.TrimSpace(name) + "=1"}); err != nil &&
			strings.Contains(err.Error(), "flag provided but not defined") {
			t.Errorf("the chart passes --%s, which the controller does not define", name)
		}
	}
	if n < 20 {
		t.Errorf("only %d flags found; is the template still parsed right?", n)
	}
}
