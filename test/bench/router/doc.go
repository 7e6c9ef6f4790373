// Package routerbench measures sandbox-router's data path on loopback: the
// latency it adds over calling the backend directly, requests per second,
// and memory while streaming 1 GiB through it. The router runs in process
// with its production handler stack (validation, authz, cache resolution,
// address policy, metrics, access log to a discarding JSON logger); only the
// Kubernetes informers are replaced by an index fed directly.
//
//	go test -run '^$' -bench AddedLatency -benchtime 20000x ./test/bench/router/
//	go test -run '^$' -bench Throughput -benchtime 5s ./test/bench/router/
//	go test -run '^$' -bench 1GiB -benchtime 1x ./test/bench/router/
//
// The machine is shared: report the load average next to the numbers.
package routerbench
