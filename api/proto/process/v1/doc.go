// Package processv1 is the generated Go code of process.v1.ProcessService,
// sandboxd's gRPC API for running commands in a sandbox (see
// process.proto; regenerate with hack/gen-proto.sh).
package processv1
