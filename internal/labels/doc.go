// Package labels owns every label and annotation key of the agents.x-k8s.io
// API and the name hash that the controllers put into identity labels.
package labels
