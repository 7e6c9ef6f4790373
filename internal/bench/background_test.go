package bench

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"sigs.k8s.io/agent-sandbox/internal/testenv"
)

// The net figure charges the background rate over the claim window's own
// length, not over the background window's.
func TestNetPerClaimMs(t *testing.T) {
	for _, c := range []struct {
		name             string
		gross, bg        float64
		window, bgWindow time.Duration
		claims           int
		want             float64
	}{
		// 0.2 CPU-s/s of background over a 20 s window is 4 s of the 6 s.
		{"rate over the claim window", 6, 2, 20 * time.Second, 10 * time.Second, 200, 10},
		{"no background", 3, 0, 20 * time.Second, 10 * time.Second, 300, 10},
		// A background busier than the window's share comes out negative:
		// noise, reported, not hidden.
		{"noise", 1, 2, 10 * time.Second, 10 * time.Second, 100, -10},
		{"no claims", 1, 0, 10 * time.Second, 10 * time.Second, 0, 0},
		{"no background window", 1, 0, 10 * time.Second, 0, 10, 0},
	} {
		if got := netPerClaimMs(c.gross, c.window, c.bg, c.bgWindow, c.claims); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("%s: netPerClaimMs = %v, want %v", c.name, got, c.want)
		}
	}
}

func TestChargeBackground(t *testing.T) {
	r := &ScaleResult{Claims: 100, ControllerCPU: 3, APIServerCPU: 12, Elapsed: 20 * time.Second}
	r.chargeBackground(&ScaleResult{ControllerCPU: 0.5, APIServerCPU: 1, Elapsed: 10 * time.Second,
		Writes: RequestCounts{"PATCH nodes/status": 4}})
	if r.NetCPUPerClaimMs != 20 || r.NetAPIServerCPUPerClaimMs != 100 || r.BackgroundSeconds != 10 ||
		r.BackgroundControllerCPU != 0.5 || r.BackgroundAPIServerCPU != 1 || r.BackgroundWrites != 4 {
		t.Fatalf("chargeBackground: %+v", r)
	}
}

// WaitSettled returns only once no Pod has changed for the quiet period,
// as the apiserver's watch reports it, and gives up with an error when the
// changes never stop.
func TestWaitSettled(t *testing.T) {
	testenv.SkipShortNeeds(t, "a kube-apiserver (envtest)")
	env, err := testenv.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = env.Stop() }()
	ctx := context.Background()
	ns := "settle"
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	// churn creates a Pod every 100 ms until stop, and reports when it
	// made its last one.
	churn := func(prefix string, stop <-chan struct{}) <-chan time.Time {
		last := make(chan time.Time, 1)
		go func() {
			var at time.Time
			defer func() { last <- at }()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				case <-time.After(100 * time.Millisecond):
				}
				p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("%s-%d", prefix, i)},
					Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "x"}}}}
				if err := env.Client.Create(ctx, p); err != nil {
					t.Errorf("creating pod: %v", err)
					return
				}
				at = time.Now()
			}
		}()
		return last
	}

	t.Run("waits for the changes to stop", func(t *testing.T) {
		stop := make(chan struct{})
		last := churn("a", stop)
		time.AfterFunc(2*time.Second, func() { close(stop) })
		const quiet = time.Second
		s, err := WaitSettled(ctx, env.Config, quiet, time.Minute)
		returned := time.Now()
		if err != nil {
			t.Fatal(err)
		}
		lastCreate := <-last
		if lastCreate.IsZero() {
			t.Fatal("churn created nothing")
		}
		if gap := returned.Sub(lastCreate); gap < quiet {
			t.Errorf("returned %s after the last Pod create, before the %s quiet period", gap, quiet)
		}
		if s.Events < 10 {
			t.Errorf("saw %d changes in 2 s of a create every 100 ms", s.Events)
		}
	})

	t.Run("gives up on changes that never stop", func(t *testing.T) {
		stop := make(chan struct{})
		last := churn("b", stop)
		_, err := WaitSettled(ctx, env.Config, time.Second, 3*time.Second)
		close(stop)
		<-last
		if err == nil || !strings.Contains(err.Error(), "still changing") {
			t.Fatalf("WaitSettled under constant change: err %v, want a timeout", err)
		}
	})
}
