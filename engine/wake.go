package engine

import "github.com/cairnhq/cairn/engine/internal/notify"

// waker decides which enqueues announce their ready queues in their
// transaction and announces the others after their commit (see
// notify.Waker).
type waker struct{ *notify.Waker }

// begin reports whether an enqueue announces its queues in its own
// transaction; every begin is paired with an end.
func (w *waker) begin() (inline bool) { return w.Begin() }

// end closes an enqueue's begin: one that committed without announcing
// has its queues announced now.
func (w *waker) end(queues []string, inline, committed bool) { w.End(queues, inline, committed) }
