package web

import (
	"context"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cairnhq/cairn/store"
)

// Reads is every query the site reads with: exactly the read methods of
// *store.Store that its pages, fragments, API and metrics call, so an
// embedder passes store.New(db, schema) (and a second one over a read
// replica's pool for Config.ReplicaReads). The site never writes through
// it: every change goes through Engine.
type Reads interface {
	// DatabasePing checks that the database answers (GET /healthz).
	DatabasePing(ctx context.Context) error
	// ReplicaStatusGet reports a replica's replication state (GET /healthz).
	ReplicaStatusGet(ctx context.Context) (store.ReplicaStatus, error)
	// Horizon names what holds back vacuum (Needs attention).
	Horizon(ctx context.Context) (store.Horizon, error)
	// Snapshot runs fn with reads that all see one repeatable-read
	// snapshot (a run's page and its tasks agree). It is the one method
	// that names *store.Store: fn gets the store bound to the snapshot,
	// and the site reads from it only through Reads.
	Snapshot(ctx context.Context, fn func(*store.Store) error) error

	// Runs.
	RunGet(ctx context.Context, id int64) (*store.Run, error)
	RunListFiltered(ctx context.Context, p *store.RunListParams) ([]store.RunListItem, error)
	RunCountFiltered(ctx context.Context, p *store.RunListParams, upTo int) (int, error)
	RunCountInterrupted(ctx context.Context, upTo int) (int, error)
	RunIDListFiltered(ctx context.Context, p *store.RunListParams) ([]int64, error)
	RunDepList(ctx context.Context, runID int64) ([]store.RunDep, error)
	RunParentGet(ctx context.Context, runID int64) (*store.RunParent, error)
	RunChildList(ctx context.Context, runID int64, limit int) ([]store.ChildRun, error)
	RunChildProgressList(ctx context.Context, runID int64) (map[int64]store.ChildProgress, error)
	RunTransitionList(ctx context.Context, runID int64) (map[int64][]store.Transition, error)
	EventListByRunRecent(ctx context.Context, runID int64, limit int) ([]store.Event, error)

	// Tasks.
	TaskGet(ctx context.Context, id int64) (*store.Task, error)
	TaskListByRun(ctx context.Context, runID int64) ([]store.Task, error)
	TaskRefListByRunsStatuses(ctx context.Context, runIDs []int64, statuses []string) ([]store.TaskRef, error)
	TaskDepList(ctx context.Context, taskID int64) ([]store.Task, error)
	TaskAttemptList(ctx context.Context, taskID int64) ([]store.TaskAttempt, error)
	TaskWaitGet(ctx context.Context, id int64) (*store.TaskWait, error)
	TaskChildProgress(ctx context.Context, taskID int64) (store.ChildProgress, error)
	TaskSignalList(ctx context.Context, p *store.TaskSignalListParams) ([]store.SignalInfo, error)
	TaskStepRecent(ctx context.Context, taskID int64, limit int) ([]store.StepInfo, error)
	TaskLogRecent(ctx context.Context, taskID int64, limit int) ([]store.TaskLogLine, bool, error)
	EventListByTask(ctx context.Context, taskID int64) ([]store.Event, error)

	// Overview, workers, queues and schedules.
	TaskCountsByState(ctx context.Context) ([]store.TaskCount, error)
	TaskBreakdown(ctx context.Context, p store.BreakdownParams) ([]store.BreakdownRow, error)
	ThroughputPerMinute(ctx context.Context, since, until time.Time) ([]store.ThroughputBucket, error)
	WorkerSlotList(ctx context.Context, limit int) ([]store.WorkerSlots, error)
	WorkerHandlesList(ctx context.Context) ([]store.WorkerHandles, error)
	QueueDepthList(ctx context.Context) ([]store.QueueDepth, error)
	FlowHoldList(ctx context.Context, perQueue int) (map[string][]store.FlowHold, map[string]int64, error)
	UnroutableList(ctx context.Context) ([]store.Unroutable, error)
	ScheduleGet(ctx context.Context, name string) (*store.Schedule, error)
	ScheduleList(ctx context.Context) ([]store.Schedule, error)

	// Workflows as workers stored them, with their versions' deploy.
	WorkflowVersionList(ctx context.Context, workflow string) ([]store.WorkflowVersionState, error)
	WorkflowNameList(ctx context.Context) ([]string, error)
}

// The store answers every read of the site.
var _ Reads = (*store.Store)(nil)

// The pools a request's reads go to, as logs and metrics name them.
const (
	poolPrimary = "primary"
	poolReplica = "replica"
)

// readsKey is the context key of the store a request reads from.
type readsKey struct{}

// newReadRequests counts the GET and HEAD requests by the pool their
// reads went to.
func newReadRequests(replica bool) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cairn_site_read_requests_total",
		Help: "GET and HEAD requests of the site and the API, by the database pool their reads went to (primary or replica).",
	}, []string{"pool"})
	c.WithLabelValues(poolPrimary)
	if replica {
		c.WithLabelValues(poolReplica)
	}
	return c
}

// pickReads sends the reads of GET and HEAD requests to the read replica
// when one is configured. The page right after this browser's own form
// action (it carries the flash cookie) reads from the primary instead, so
// that it shows what the action did whatever the replica's lag. Every
// other request, and every write, uses the primary.
func (s *Server) pickReads(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			next.ServeHTTP(w, r)
			return
		}
		pool := poolPrimary
		if s.replica != nil {
			if _, err := r.Cookie(flashCookie); err != nil {
				pool = poolReplica
				r = r.WithContext(context.WithValue(r.Context(), readsKey{}, s.replica))
			}
		}
		if !strings.HasPrefix(r.URL.Path, "/static/") {
			s.readRequests.WithLabelValues(pool).Inc()
		}
		next.ServeHTTP(w, r)
	})
}

// reads returns the store the request of ctx reads from: the replica for
// the reads pickReads sent there, else the primary.
func (s *Server) reads(ctx context.Context) Reads {
	if st, ok := ctx.Value(readsKey{}).(Reads); ok {
		return st
	}
	return s.st
}

// poolOf names the pool the request of ctx reads from.
func (s *Server) poolOf(ctx context.Context) string {
	if s.reads(ctx) == s.st {
		return poolPrimary
	}
	return poolReplica
}

// readFresh runs read on the request's store. When that is the replica
// and it answers "not found", read runs again on the primary: the run or
// task may be newer than what the replica has replayed (an API client
// that enqueues and then reads its run back, a link from a live event).
func (s *Server) readFresh(ctx context.Context, read func(st Reads) error) error {
	st := s.reads(ctx)
	err := read(st)
	if st != s.st && err != nil {
		if status, _ := statusOf(err); status == http.StatusNotFound {
			return read(s.st)
		}
	}
	return err
}

// snapshotFresh runs read in one snapshot of the request's store, and
// again on the primary's when the replica has not got what it looks for
// (see readFresh).
func (s *Server) snapshotFresh(ctx context.Context, read func(st Reads) error) error {
	return s.readFresh(ctx, func(st Reads) error {
		return st.Snapshot(ctx, func(tx *store.Store) error { return read(tx) })
	})
}
