package engine

import (
	"cmp"
	"fmt"
	"log/slog"
	"math"
	"os"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/cairnhq/cairn/store/check"
)

// Defaults applied by New to zero Config fields.
const (
	DefaultSchema            = "cairn"
	DefaultQueue             = "default"
	DefaultSlots             = 4
	DefaultPollInterval      = time.Second
	DefaultHeartbeatInterval = 5 * time.Second
	DefaultLeaseDuration     = 30 * time.Second
	DefaultRescueInterval    = 5 * time.Second
	DefaultShutdownGrace     = 25 * time.Second
	DefaultTaskTimeout       = 5 * time.Minute
	DefaultMaxInputBytes     = 1 << 20
	DefaultMaxAttempts       = 3
	DefaultInitialDelay      = time.Second
	DefaultMaxDelay          = time.Hour
	DefaultBackoffFactor     = 2.0
	DefaultMaxRescues        = 3
	DefaultRetention         = 30 * 24 * time.Hour
	DefaultCompletionBatch   = 256
	DefaultLeaderLease       = 15 * time.Second
	DefaultSchedulerInterval = time.Second
)

// QueueConfig configures one queue this engine works.
type QueueConfig struct {
	// Slots is how many of the queue's tasks this engine runs at once.
	// Defaults to DefaultSlots (4).
	Slots int
	// MaxRunning, when > 0, caps running tasks of the queue across the
	// whole cluster. Defaults to 0 (no cap); a cap already stored in the
	// database is kept when this is 0.
	MaxRunning int
}

// Config configures an Engine.
type Config struct {
	// Schema is the Postgres schema holding Cairn's tables. Defaults to "cairn".
	Schema string
	// Queues maps queue names to this engine's slots on them. Defaults to
	// {"default": {Slots: 4}}.
	Queues map[string]QueueConfig
	// NoWorker makes an engine that enqueues and administers but never
	// claims tasks (for a web front end). Defaults to false.
	NoWorker bool
	// DatabaseURL opens the dedicated LISTEN connection that wakes workers
	// at once and carries cancels and signals between processes. Without it
	// the engine polls every PollInterval. Defaults to "" (poll only).
	DatabaseURL string
	// Logger receives the engine's logs. Defaults to a logger that discards.
	Logger *slog.Logger
	// Clock returns the current time. Defaults to time.Now.
	Clock func() time.Time
	// WorkerName names this process in the workers table. Defaults to host:pid.
	WorkerName string
	// PollInterval is the fallback claim poll. Defaults to 1s.
	PollInterval time.Duration
	// HeartbeatInterval is how often the worker row and task leases are
	// renewed. Defaults to 5s.
	HeartbeatInterval time.Duration
	// LeaseDuration is how long a task lease lasts without renewal. Must
	// exceed HeartbeatInterval. Defaults to 30s.
	LeaseDuration time.Duration
	// RescueInterval is how often expired leases are looked for. Defaults to 5s.
	RescueInterval time.Duration
	// ShutdownGrace is how long Shutdown lets running handlers finish.
	// Defaults to 25s.
	ShutdownGrace time.Duration
	// TaskTimeout is the timeout of tasks that set none. Defaults to 5m.
	TaskTimeout time.Duration
	// MaxInputBytes caps a run's JSON input. Defaults to 1 MiB.
	MaxInputBytes int
	// CallbackBaseURL is the web site's address ("https://cairn.example.com") TaskHandle.CallbackURL's URLs start with. Defaults to "": refused.
	CallbackBaseURL string
	// CompletionBatch caps how many finished tasks one write commits.
	// Defaults to 256.
	CompletionBatch int
	// Retention is how long finished runs are kept before pruning; negative
	// disables pruning. Defaults to 30 days.
	Retention time.Duration
	// NoHorizonWatch turns off the horizon watch: a warning when one
	// snapshot holds back vacuum for a minute, and a VACUUM of the hot
	// tables (tasks, runs, flow_keys) as soon as it ends, instead of at
	// autovacuum's next round (see the README, "Held snapshots"). Defaults
	// to false: the watch runs.
	NoHorizonWatch bool
	// LeaderLease is the scheduler leader lease. Defaults to 15s.
	LeaderLease time.Duration
	// SchedulerInterval is how often the leader looks for due schedules.
	// Defaults to 1s.
	SchedulerInterval time.Duration
	// Schedules are upserted at Start.
	Schedules []Schedule
	// TracerProvider, when set, traces enqueues, task attempts, claims and
	// completion writes with OpenTelemetry (see the README). Defaults to
	// nil: no spans, and no trace context stored with runs.
	TracerProvider trace.TracerProvider
}

// maxSlots bounds Slots per queue: the database stores the sum over
// queues as a 32-bit integer.
const maxSlots = 1 << 20

// withDefaults returns cfg with every zero field set to its default, or an
// error naming the first invalid field.
func (cfg Config) withDefaults() (Config, error) {
	cfg.Schema = cmp.Or(cfg.Schema, DefaultSchema)
	if len(cfg.Queues) == 0 {
		cfg.Queues = map[string]QueueConfig{DefaultQueue: {Slots: DefaultSlots}}
	}
	queues := make(map[string]QueueConfig, len(cfg.Queues))
	for name, q := range cfg.Queues {
		if check.Name(name) != nil {
			return cfg, fmt.Errorf("%w: Queues: queue name %q must be 1-64 of A-Z a-z 0-9 _ . : -", ErrInvalidConfig, name)
		}
		if q.Slots < 0 || q.MaxRunning < 0 {
			return cfg, fmt.Errorf("%w: Queues[%q]: Slots and MaxRunning must not be negative", ErrInvalidConfig, name)
		}
		if q.Slots > maxSlots || q.MaxRunning > math.MaxInt32 {
			return cfg, fmt.Errorf("%w: Queues[%q]: Slots must be at most %d and MaxRunning at most %d", ErrInvalidConfig, name, maxSlots, math.MaxInt32)
		}
		q.Slots = cmp.Or(q.Slots, DefaultSlots)
		queues[name] = q
	}
	cfg.Queues = queues
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.WorkerName == "" {
		host, _ := os.Hostname()
		cfg.WorkerName = fmt.Sprintf("%s:%d", host, os.Getpid())
	}
	cfg.PollInterval = cmp.Or(cfg.PollInterval, DefaultPollInterval)
	cfg.HeartbeatInterval = cmp.Or(cfg.HeartbeatInterval, DefaultHeartbeatInterval)
	cfg.LeaseDuration = cmp.Or(cfg.LeaseDuration, DefaultLeaseDuration)
	cfg.RescueInterval = cmp.Or(cfg.RescueInterval, DefaultRescueInterval)
	cfg.ShutdownGrace = cmp.Or(cfg.ShutdownGrace, DefaultShutdownGrace)
	cfg.TaskTimeout = cmp.Or(cfg.TaskTimeout, DefaultTaskTimeout)
	cfg.MaxInputBytes = cmp.Or(cfg.MaxInputBytes, DefaultMaxInputBytes)
	cfg.CompletionBatch = cmp.Or(cfg.CompletionBatch, DefaultCompletionBatch)
	cfg.Retention = cmp.Or(cfg.Retention, DefaultRetention)
	cfg.LeaderLease = cmp.Or(cfg.LeaderLease, DefaultLeaderLease)
	cfg.SchedulerInterval = cmp.Or(cfg.SchedulerInterval, DefaultSchedulerInterval)
	for _, f := range []struct {
		name string
		d    time.Duration
	}{
		{"PollInterval", cfg.PollInterval}, {"HeartbeatInterval", cfg.HeartbeatInterval},
		{"LeaseDuration", cfg.LeaseDuration}, {"RescueInterval", cfg.RescueInterval},
		{"ShutdownGrace", cfg.ShutdownGrace}, {"TaskTimeout", cfg.TaskTimeout},
		{"LeaderLease", cfg.LeaderLease}, {"SchedulerInterval", cfg.SchedulerInterval},
	} {
		if f.d < 0 {
			return cfg, fmt.Errorf("%w: %s must not be negative", ErrInvalidConfig, f.name)
		}
	}
	if cfg.LeaseDuration <= cfg.HeartbeatInterval {
		return cfg, fmt.Errorf("%w: LeaseDuration (%s) must exceed HeartbeatInterval (%s)", ErrInvalidConfig, cfg.LeaseDuration, cfg.HeartbeatInterval)
	}
	if cfg.MaxInputBytes < 0 || cfg.CompletionBatch < 0 {
		return cfg, fmt.Errorf("%w: MaxInputBytes and CompletionBatch must not be negative", ErrInvalidConfig)
	}
	return cfg, nil
}
