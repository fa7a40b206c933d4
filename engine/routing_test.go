package engine_test

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/engine"
	"github.com/cairnhq/cairn/store"
	"github.com/cairnhq/cairn/store/pgtest"
)

// routingBed is a database with a producer engine (no worker) that knows
// every workflow, and worker engines that each know some.
type routingBed struct {
	t        *testing.T
	db       *pgtest.DB
	producer *engine.Engine

	mu  sync.Mutex
	ran map[string][]string // engine name -> "workflow.task" it ran
}

func newRoutingBed(t *testing.T) *routingBed {
	db := pgtest.New(t)
	b := &routingBed{t: t, db: db, ran: map[string][]string{}}
	cfg := fastConfig(db, t)
	cfg.NoWorker = true
	b.producer = newEngine(t, db, cfg)
	for _, wf := range []string{"wf1", "wf2", "wf3"} {
		require.NoError(t, b.producer.Register(b.workflow("producer", wf)))
	}
	return b
}

// workflow is a one-task workflow name.task whose handler, in engine
// eng, records that it ran there.
func (b *routingBed) workflow(eng, name string) engine.Workflow {
	return engine.Workflow{Name: name, Tasks: []engine.Task{{Name: "task",
		Run: func(ctx context.Context, h *engine.TaskHandle) error {
			b.mu.Lock()
			defer b.mu.Unlock()
			b.ran[eng] = append(b.ran[eng], name+".task")
			return nil
		}}}}
}

// engine starts a worker engine that registers workflows.
func (b *routingBed) engine(name string, workflows ...string) *engine.Engine {
	cfg := fastConfig(b.db, b.t)
	cfg.WorkerName = name
	cfg.Queues = map[string]engine.QueueConfig{"default": {Slots: 4}}
	eng := newEngine(b.t, b.db, cfg)
	for _, wf := range workflows {
		require.NoError(b.t, eng.Register(b.workflow(name, wf)))
	}
	start(b.t, eng)
	return eng
}

func (b *routingBed) enqueue(workflow string, n int) {
	ps := make([]engine.EnqueueParams, n)
	for i := range ps {
		ps[i] = engine.EnqueueParams{Workflow: workflow}
	}
	_, err := b.producer.EnqueueMany(context.Background(), ps)
	require.NoError(b.t, err)
}

// count runs a count query.
func (b *routingBed) count(query string, args ...any) int {
	var n int
	require.NoError(b.t, b.db.SQL.QueryRow(query, args...).Scan(&n), query)
	return n
}

func (b *routingBed) waitCompleted(workflow string, n int) {
	eventually(b.t, 60*time.Second, workflow+" tasks completed", func() bool {
		return b.count(`SELECT count(*) FROM cairn.tasks WHERE workflow = $1 AND status = 'completed'`, workflow) == n
	})
}

// claimsByOthers counts the claims (ready -> running events) of workflow's
// tasks by workers other than the given ones.
func (b *routingBed) claimsByOthers(workflow string, workers ...int64) int {
	return b.count(`SELECT count(*) FROM cairn.task_events e JOIN cairn.tasks t ON t.id = e.task_id
		WHERE t.workflow = $1 AND e.to_status = 'running' AND NOT (e.worker_id = ANY($2::bigint[]))`, workflow, pgInt64s(workers))
}

func pgInt64s(v []int64) string {
	parts := make([]string, len(v))
	for i, x := range v {
		parts[i] = strconv.FormatInt(x, 10)
	}
	return "{" + strings.Join(parts, ",") + "}"
}

func TestRoutingThreeEnginesClaimOnlyWhatTheyRegistered(t *testing.T) {
	t.Parallel()
	b := newRoutingBed(t)
	// wf3, which no engine registers, is enqueued first: it sits at the
	// head of the claim order, and every claim has to pass it.
	b.enqueue("wf3", 20)
	b.enqueue("wf1", 30)
	b.enqueue("wf2", 30)
	a := b.engine("A", "wf1")
	bb := b.engine("B", "wf2")
	c := b.engine("C", "wf1", "wf2")
	b.waitCompleted("wf1", 30)
	b.waitCompleted("wf2", 30)

	// Nobody claimed what it cannot run.
	require.Zero(t, b.claimsByOthers("wf1", a.WorkerID(), c.WorkerID()), "wf1 claimed by an engine that did not register it")
	require.Zero(t, b.claimsByOthers("wf2", bb.WorkerID(), c.WorkerID()), "wf2 claimed by an engine that did not register it")
	require.Zero(t, b.count(`SELECT count(*) FROM cairn.tasks WHERE workflow IN ('wf1', 'wf2') AND attempt <> 1`), "every task ran once")
	require.Zero(t, b.count(`SELECT count(*) FROM cairn.task_events WHERE to_status IN ('failed', 'ready') AND from_status = 'running'`),
		"no attempt failed")
	b.mu.Lock()
	require.NotContains(t, b.ran["A"], "wf2.task")
	require.NotContains(t, b.ran["B"], "wf1.task")
	require.Equal(t, 60, len(b.ran["A"])+len(b.ran["B"])+len(b.ran["C"]), "each task ran once")
	b.mu.Unlock()

	// wf3 waits: ready, no attempt spent, never claimed, shown as such.
	require.Equal(t, 20, b.count(`SELECT count(*) FROM cairn.tasks WHERE workflow = 'wf3' AND status = 'ready' AND attempt = 0`))
	require.Zero(t, b.claimsByOthers("wf3"))
	un, err := newStore(t, b.db, "").UnroutableList(context.Background())
	require.NoError(t, err)
	require.Len(t, un, 1)
	require.NotNil(t, un[0].Version, "the version its runs were created with")
	require.Equal(t, store.Unroutable{Queue: "default", Workflow: "wf3", Task: "task", Ready: 20, Available: 20, OldestReadyAt: un[0].OldestReadyAt,
		Version: un[0].Version}, un[0])

	// Registered on a running engine, wf3 runs there, once per task.
	require.NoError(t, bb.Register(b.workflow("B", "wf3")))
	b.waitCompleted("wf3", 20)
	require.Zero(t, b.claimsByOthers("wf3", bb.WorkerID()))
	require.Zero(t, b.count(`SELECT count(*) FROM cairn.tasks WHERE workflow = 'wf3' AND attempt <> 1`))
	un, err = newStore(t, b.db, "").UnroutableList(context.Background())
	require.NoError(t, err)
	require.Empty(t, un)
}

func TestRoutingTasksWaitForAnEngineThatRegistersThem(t *testing.T) {
	t.Parallel()
	b := newRoutingBed(t)
	b.enqueue("wf2", 5)
	b.enqueue("wf1", 5) // after wf2 in claim order
	a := b.engine("A", "wf1")
	b.waitCompleted("wf1", 5)
	// A claimed wf1's tasks, which come after wf2's: any claim of A would
	// have taken wf2's first, had it been allowed to.
	require.Equal(t, 5, b.count(`SELECT count(*) FROM cairn.tasks WHERE workflow = 'wf2' AND status = 'ready' AND attempt = 0`))
	require.Zero(t, b.claimsByOthers("wf2"))

	d := b.engine("D", "wf2")
	b.waitCompleted("wf2", 5)
	require.Zero(t, b.claimsByOthers("wf2", d.WorkerID()))
	require.Zero(t, b.claimsByOthers("wf1", a.WorkerID()))
	require.Zero(t, b.count(`SELECT count(*) FROM cairn.tasks WHERE attempt <> 1`))
}

func TestRoutingRunsATaskByNameInARunOfAnotherShape(t *testing.T) {
	t.Parallel()
	b := newRoutingBed(t)
	// A newer build's run of wf1 has a task before "task": "task" is at
	// index 1 there, at index 0 in this build's wf1.
	_, err := newStore(t, b.db, "").RunInsertMany(context.Background(), []store.RunInsertParams{{
		Workflow: "wf1", Input: []byte(`{}`), Queue: "default",
		Tasks: []store.TaskTemplate{
			{Idx: 0, Name: "new", MaxAttempts: 3, MaxRescues: 3, Deps: []int{}, Dependents: []int{}},
			{Idx: 1, Name: "task", MaxAttempts: 3, MaxRescues: 3, Deps: []int{}, Dependents: []int{}},
		}}})
	require.NoError(t, err)
	b.engine("A", "wf1")
	eventually(t, 30*time.Second, "wf1.task completed", func() bool {
		return b.count(`SELECT count(*) FROM cairn.tasks WHERE workflow = 'wf1' AND name = 'task' AND status = 'completed' AND attempt = 1`) == 1
	})
	require.Equal(t, 1, b.count(`SELECT count(*) FROM cairn.tasks WHERE workflow = 'wf1' AND name = 'new' AND status = 'ready' AND attempt = 0`),
		"the task this build does not know waits")
}
