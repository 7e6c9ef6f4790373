package warmpool

import (
	"context"
	"sync"
)

// slowStartBatch calls fn count times, in parallel batches of 1, 2, 4, …
// (the last one trimmed to what remains) and stops after the first batch in
// which a call failed. A failing apiserver (quota, admission, a deleted
// namespace) thus costs a handful of calls instead of count, while a healthy
// one gets the full parallelism after a few round trips. It returns how many
// calls succeeded and the first error.
func slowStartBatch(ctx context.Context, count int, fn func(ctx context.Context) error) (int, error) {
	succeeded := 0
	for _, n := range batchSizes(count) {
		if err := ctx.Err(); err != nil {
			return succeeded, err
		}
		errs := make(chan error, n)
		var wg sync.WaitGroup
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs <- fn(ctx)
			}()
		}
		wg.Wait()
		close(errs)
		var first error
		for err := range errs {
			if err == nil {
				succeeded++
			} else if first == nil {
				first = err
			}
		}
		if first != nil {
			return succeeded, first
		}
	}
	return succeeded, nil
}

// batchSizes returns the slow-start batch sizes for count calls: 1, 2, 4,
// … with the last trimmed to what remains (14 -> 1, 2, 4, 7).
func batchSizes(count int) []int {
	var out []int
	for batch, left := 1, count; left > 0; batch *= 2 {
		n := min(batch, left)
		out = append(out, n)
		left -= n
	}
	return out
}
