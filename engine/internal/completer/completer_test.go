package completer_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/engine/internal/backoff"
	"github.com/cairnhq/cairn/engine/internal/completer"
	"github.com/cairnhq/cairn/engine/internal/executor"
	"github.com/cairnhq/cairn/store"
)

type exec struct{ executor.Execution }

func (e *exec) Exec() *executor.Execution { return &e.Execution }

func newExec(id, run int64, dependents ...int) *exec {
	e := &exec{}
	e.Init(store.Claimed{Task: store.Task{ID: id, RunID: run, Attempt: 1, Dependents: dependents}}, time.Now())
	return e
}

// fakeStore records the statements a write runs; fail fails the next
// ones.
type fakeStore struct {
	mu    sync.Mutex
	calls []string
	items [][]store.TransitionItem
	fail  int
	claim []store.Claimed // what a claim along returns
}

func (s *fakeStore) record(name string, p store.TransitionParams) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, name)
	s.items = append(s.items, append([]store.TransitionItem(nil), p.Items...))
	if s.fail > 0 {
		s.fail--
		return errors.New("database down")
	}
	return nil
}

func moved(p store.TransitionParams) []store.Moved {
	var ms []store.Moved
	for _, it := range p.Items {
		ms = append(ms, store.Moved{TaskID: it.TaskID, From: it.From, To: it.To})
	}
	return ms
}

func (s *fakeStore) TaskFinishAndClaimOne(_ context.Context, p store.TransitionParams, c store.ClaimParams) ([]store.Moved, []store.Claimed, error) {
	if err := s.record("one", p); err != nil {
		return nil, nil, err
	}
	return moved(p), append(c.Buf, s.claim...), nil
}

func (s *fakeStore) TaskFinishAndClaim(_ context.Context, p store.TransitionParams, c store.ClaimParams) ([]store.Moved, []store.Moved, []store.Claimed, error) {
	if err := s.record("finish-and-claim", p); err != nil {
		return nil, nil, nil, err
	}
	return moved(p), nil, append(c.Buf, s.claim...), nil
}

func (s *fakeStore) TransitionAll(_ context.Context, p store.TransitionParams) ([]store.Moved, []store.Moved, error) {
	if err := s.record("transition", p); err != nil {
		return nil, nil, err
	}
	return moved(p), nil, nil
}

// producer asks for want tasks along and resumes resume; it records what
// it is told.
type producer struct {
	want     int
	resume   []*exec
	failed   int
	claimed  []int64
	resumed  map[int64]bool
	releases bool
}

type state struct{ asked int }

func (p *producer) Plan(batch []completer.Completion[*exec], releases bool, a *completer.Along[*exec, state]) {
	p.releases = releases
	for _, b := range batch {
		b.Ex.HoldsSlot.Store(false)
	}
	a.Resume = p.resume
	a.Total = p.want
	a.State.asked = p.want
}

func (p *producer) ClaimParams(a *completer.Along[*exec, state]) store.ClaimParams {
	if a.State.asked == 0 {
		return store.ClaimParams{}
	}
	return store.ClaimParams{Queues: []string{"q"}, Limits: []int{a.State.asked}}
}

func (p *producer) ClaimFailed(a *completer.Along[*exec, state], _ store.ClaimParams, _ error) {
	p.failed++
	a.State.asked = 0
}

func (p *producer) Written(_ []completer.Completion[*exec], _ *completer.Along[*exec, state], _ store.ClaimParams, claimed []store.Claimed, resumed map[int64]bool) {
	for _, c := range claimed {
		p.claimed = append(p.claimed, c.ID)
	}
	p.resumed = resumed
}

func newCompleter(st *fakeStore, p *producer) *completer.Completer[*exec, state] {
	return completer.New(completer.Config[*exec, state]{Store: st, Producer: p, WorkerID: 1, Lease: time.Minute, Max: 100,
		Held: func() int { return 0 }, Clock: time.Now,
		Health:   backoff.NewHealth(slog.New(slog.NewTextHandler(io.Discard, nil)), time.Now),
		OnWrite:  func(time.Time, []completer.Completion[*exec], int, []store.Claimed, error) {},
		OnCommit: func(time.Time, []store.Moved, []store.Moved, int) {}})
}

func completed(e *exec) completer.Completion[*exec] {
	return completer.Completion[*exec]{Ex: e, Item: store.TransitionItem{TaskID: e.Task.ID, To: store.StatusCompleted, Attempt: 1}}
}

// A batch without dependents is one statement, which claims along and
// hands the rows back to the producer.
func TestFlushLeavesIsOneStatementAndHandsBackClaims(t *testing.T) {
	st := &fakeStore{claim: []store.Claimed{{Task: store.Task{ID: 10, Queue: "q"}}, {Task: store.Task{ID: 11, Queue: "q"}}}}
	p := &producer{want: 2}
	c := newCompleter(st, p)
	c.Flush([]completer.Completion[*exec]{completed(newExec(1, 1)), completed(newExec(2, 2)), {Ex: newExec(3, 3)}})
	require.Equal(t, []string{"one"}, st.calls)
	require.Len(t, st.items[0], 2, "a lost task writes nothing")
	require.Equal(t, store.StatusRunning, st.items[0][0].From)
	require.Equal(t, []int64{10, 11}, p.claimed)
	require.False(t, p.releases)
	require.EqualValues(t, 1, c.OneStatementWrites())
	require.EqualValues(t, 1, c.ClaimingWrites())
}

// Dependents to release take the transaction; tasks handed a slot are
// resumed in it.
func TestFlushReleasesAndResumes(t *testing.T) {
	st := &fakeStore{}
	parked := newExec(5, 5)
	parked.Parked.Store(true)
	p := &producer{resume: []*exec{parked}}
	c := newCompleter(st, p)
	c.Flush([]completer.Completion[*exec]{completed(newExec(1, 1, 1))})
	require.Equal(t, []string{"transition"}, st.calls)
	require.True(t, p.releases)
	require.Len(t, st.items[0], 2)
	require.Equal(t, store.StatusRunning, st.items[0][1].To)
	require.Equal(t, store.StatusDeferred, st.items[0][1].From)
	require.True(t, p.resumed[5])
	require.EqualValues(t, 1, c.HandoffWrites())
	require.Zero(t, c.ClaimingWrites())
}

// A failed write is retried without its claim.
func TestFlushRetriesWithoutTheClaim(t *testing.T) {
	st := &fakeStore{fail: 1, claim: []store.Claimed{{Task: store.Task{ID: 10, Queue: "q"}}}}
	p := &producer{want: 1}
	c := newCompleter(st, p)
	c.Flush([]completer.Completion[*exec]{completed(newExec(1, 1, 1))})
	require.Equal(t, []string{"finish-and-claim", "transition"}, st.calls)
	require.Equal(t, 1, p.failed)
	require.Empty(t, p.claimed)
}

func TestStartStop(t *testing.T) {
	c := newCompleter(&fakeStore{}, &producer{})
	c.Stop() // before Start
	c.Stop()
	c = newCompleter(&fakeStore{}, &producer{})
	require.NoError(t, c.Start(context.Background()))
	require.NoError(t, c.Submit(completed(newExec(1, 1))))
	c.Stop()
	c.Stop()
	require.Error(t, c.Submit(completed(newExec(2, 2))))
}
