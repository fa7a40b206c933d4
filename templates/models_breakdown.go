package templates

// Breakdown is one workflow's or queue's figures over the last hour, as
// a row of the breakdown tables of the overview and queues pages.
type Breakdown struct {
	// Kind is "workflow" or "queue".
	Kind string
	Name string
	// Link leads to its runs (a workflow) or its queue.
	Link string
	// States are its tasks by state, states without tasks left out.
	States []StateCount
	// Completed and Failed count tasks finished in the last hour.
	Completed, Failed int64
	// FailRate is failed over finished, e.g. "12.5%"; "–" with none.
	FailRate string
	// Throughput is finished tasks per minute over the hour, e.g. "3.2".
	Throughput string
	// WaitP50 .. RunP95 are durations, e.g. "1.2s"; "–" when none.
	WaitP50, WaitP95, RunP50, RunP95 string
	Chart                            SparkChart
	// Attention is a short reason it needs attention, "" when none.
	Attention string
}

// SparkChart is a small inline SVG chart of one row: stacked bars of
// completed and failed tasks per bucket and a line of the p95 run time,
// its geometry computed in advance.
type SparkChart struct {
	Width, Height int
	Bars          []SparkBar
	// Line is the polyline points of the p95 run time ("x,y x,y"), ""
	// when nothing was measured.
	Line string
	// Label describes the chart for screen readers.
	Label string
}

// SparkBar is one bucket of a SparkChart.
type SparkBar struct {
	X, W         int
	DoneY, DoneH int
	FailY, FailH int
	Title        string
}

// Attention is a queue, worker or backlog that needs a look, shown first.
type Attention struct {
	// Kind is "unroutable", "heartbeat" or "deferred".
	Kind string
	// Subject names what it is about, e.g. "queue default", "worker #3".
	Subject string
	Text    string
	Link    string
}
