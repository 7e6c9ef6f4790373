// Package sandboxd holds the benchmarks of the sandboxd runtime daemon:
// legacy /execute round trips, gRPC Execute round trips, file PUT/GET
// throughput, and the resident memory of an idle daemon. Run them with
//
//	go test -run '^$' -bench . -benchtime 3s ./test/bench/sandboxd/
package sandboxd
