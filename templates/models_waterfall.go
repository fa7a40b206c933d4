package templates

// Stamp is a point in time for a <time> element: ISO is RFC 3339 (its
// datetime attribute), Text the UTC time shown until the page's script
// says it in the browser's time zone. The zero Stamp shows "–".
type Stamp struct {
	ISO  string
	Text string
}

// Waterfall is a run's timeline as a Gantt chart, its geometry computed
// in advance: one row per task, time running left to right.
type Waterfall struct {
	Width, Height int
	Rows          []WaterfallRow
	Ticks         []WaterfallTick
	// Span is the time the chart covers, e.g. "4 min 10 s"; Live is set
	// while the run runs (the chart ends now).
	Span string
	Live bool
}

// WaterfallRow is one task of the chart.
type WaterfallRow struct {
	TaskID int64
	// Name is its name, cut to fit; Title says it in full, with its state
	// and times.
	Name  string
	Title string
	Href  string
	// Y is the top of the row.
	Y    int
	Segs []WaterfallSeg
}

// WaterfallSeg is one stretch of a task's time.
type WaterfallSeg struct {
	// Kind is "wait" (ready, before an attempt), "attempt" (from claim to
	// end) or "deferred" (within an attempt, holding no slot).
	Kind string
	// Status is an attempt's outcome: completed, failed, retried,
	// interrupted or cancelled; running or deferred while it lasts.
	Status     string
	Attempt    int
	X, Y, W, H int
	Title      string
	// Open is set while it lasts.
	Open bool
}

// WaterfallTick is a label of the time axis, since the run's creation.
type WaterfallTick struct {
	X     int
	Label string
}
