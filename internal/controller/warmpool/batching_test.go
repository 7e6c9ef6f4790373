package warmpool

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
)

func TestSlowStartBatch(t *testing.T) {
	errBoom := errors.New("boom")
	cases := []struct {
		name      string
		count     int
		failAt    int // 1-based call number that fails; 0 = none
		wantOK    int
		wantCalls int
		wantErr   bool
	}{
		{name: "14 in batches 1,2,4,7", count: 14, wantOK: 14, wantCalls: 14},
		{name: "zero", count: 0, wantOK: 0, wantCalls: 0},
		{name: "stops after the failing batch", count: 14, failAt: 2, wantOK: 2, wantCalls: 3, wantErr: true},
		{name: "first call fails", count: 5, failAt: 1, wantOK: 0, wantCalls: 1, wantErr: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var calls atomic.Int32
			ok, err := slowStartBatch(context.Background(), c.count, func(context.Context) error {
				if n := int(calls.Add(1)); n == c.failAt {
					return errBoom
				}
				return nil
			})
			if ok != c.wantOK || int(calls.Load()) != c.wantCalls || (err != nil) != c.wantErr {
				t.Fatalf("ok=%d calls=%d err=%v; want ok=%d calls=%d err=%v", ok, calls.Load(), err, c.wantOK, c.wantCalls, c.wantErr)
			}
		})
	}
}

func TestBatchSizes(t *testing.T) {
	for count, want := range map[int][]int{0: nil, 1: {1}, 3: {1, 2}, 14: {1, 2, 4, 7}, 15: {1, 2, 4, 8}, 16: {1, 2, 4, 8, 1}} {
		if got := batchSizes(count); !slices.Equal(got, want) {
			t.Errorf("batchSizes(%d) = %v, want %v", count, got, want)
		}
	}
}

func TestSlowStartBatchContextCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var calls atomic.Int32
	ok, err := slowStartBatch(ctx, 14, func(context.Context) error {
		if calls.Add(1) == 3 { // during the second batch
			cancel()
		}
		return nil
	})
	if !errors.Is(err, context.Canceled) || ok != 3 {
		t.Fatalf("ok=%d err=%v; want 3 done and context.Canceled before the third batch", ok, err)
	}
}
