package sandbox

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
)

// statusEvents holds the events of one pass that explain a change to the
// Sandbox's status (a memory snapshot saved, a restore that fell back).
// They go out only once the status naming them is written: recorded
// earlier, a failed write would repeat them on the retry, which recomputes
// the same change and asks for the same event again.
type statusEvents struct {
	list []statusEvent
}

type statusEvent struct {
	related                   runtime.Object
	typ, reason, action, note string
}

type statusEventsKey struct{}

// withStatusEvents gives the pass a buffer for its status events.
func withStatusEvents(ctx context.Context) (context.Context, *statusEvents) {
	ev := &statusEvents{}
	return context.WithValue(ctx, statusEventsKey{}, ev), ev
}

// eventAfterWrite queues an event for after this pass's status write. A
// caller outside a pass (no buffer in ctx) records it at once.
func (r *Reconciler) eventAfterWrite(ctx context.Context, regarding, related runtime.Object, typ, reason, action, format string, args ...any) {
	note := fmt.Sprintf(format, args...)
	if ev, ok := ctx.Value(statusEventsKey{}).(*statusEvents); ok {
		ev.list = append(ev.list, statusEvent{related: related, typ: typ, reason: reason, action: action, note: note})
		return
	}
	r.Recorder.Eventf(regarding, related, typ, reason, action, "%s", note)
}

// flush records the queued events, once the status write succeeded.
func (ev *statusEvents) flush(r *Reconciler, regarding runtime.Object) {
	for _, e := range ev.list {
		r.Recorder.Eventf(regarding, e.related, e.typ, e.reason, e.action, "%s", e.note)
	}
	ev.list = nil
}
