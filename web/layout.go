package web

import (
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/cairnhq/cairn/store"
	"github.com/cairnhq/cairn/templates"
)

// DAG geometry, in SVG user units.
const (
	nodeW   = 168
	nodeH   = 38
	colGap  = 56
	rowGap  = 12
	dagPad  = 8
	nameLen = 22 // characters of a task name that fit in a node
)

// dagItem is one node to lay out: a task of a run, or of a workflow
// definition.
type dagItem struct {
	idx    int
	deps   []int // idx of its dependencies
	taskID int64
	name   string
	status string
	detail string
	href   string
}

// layoutDAG places a run's tasks (see layoutItems).
func layoutDAG(tasks []store.Task) templates.DAG {
	items := make([]dagItem, len(tasks))
	for i, t := range tasks {
		items[i] = dagItem{idx: t.Idx, deps: t.Deps, taskID: t.ID, name: t.Name, status: t.Status,
			href: "/tasks/" + strconv.FormatInt(t.ID, 10)}
	}
	return layoutItems(items)
}

// layoutItems places items in columns by dependency depth (an item sits
// one column right of its deepest dependency), orders each column by the
// mean row of its dependencies to keep edges short, and draws each
// dependency as a curve from the right of the dependency to the left of
// the dependent.
func layoutItems(tasks []dagItem) templates.DAG {
	byIdx := make(map[int]*dagItem, len(tasks))
	for i := range tasks {
		byIdx[tasks[i].idx] = &tasks[i]
	}
	depth := make(map[int]int, len(tasks))
	visiting := map[int]bool{}
	var depthOf func(idx int) int
	depthOf = func(idx int) int {
		if d, ok := depth[idx]; ok {
			return d
		}
		if visiting[idx] { // a cycle cannot be registered; stay safe anyway
			return 0
		}
		visiting[idx] = true
		d := 0
		if t := byIdx[idx]; t != nil {
			for _, dep := range t.deps {
				if _, ok := byIdx[dep]; ok {
					d = max(d, depthOf(dep)+1)
				}
			}
		}
		delete(visiting, idx)
		depth[idx] = d
		return d
	}
	var cols [][]*dagItem
	for i := range tasks {
		d := depthOf(tasks[i].idx)
		for len(cols) <= d {
			cols = append(cols, nil)
		}
		cols[d] = append(cols[d], &tasks[i])
	}
	row := map[int]float64{} // idx -> row within its column
	for c, col := range cols {
		if c > 0 {
			key := func(t *dagItem) float64 {
				sum, n := 0.0, 0
				for _, dep := range t.deps {
					if r, ok := row[dep]; ok {
						sum += r
						n++
					}
				}
				if n == 0 {
					return 0
				}
				return sum / float64(n)
			}
			slices.SortStableFunc(col, func(a, b *dagItem) int {
				ka, kb := key(a), key(b)
				switch {
				case ka < kb:
					return -1
				case ka > kb:
					return 1
				}
				return a.idx - b.idx
			})
		}
		for i, t := range col {
			row[t.idx] = float64(i)
		}
	}
	rows := 0
	for _, col := range cols {
		rows = max(rows, len(col))
	}
	out := templates.DAG{
		Width:  max(2*dagPad+len(cols)*nodeW+max(len(cols)-1, 0)*colGap, 2*dagPad+nodeW),
		Height: max(2*dagPad+rows*nodeH+max(rows-1, 0)*rowGap, 2*dagPad+nodeH),
	}
	pos := map[int][2]int{}
	for c, col := range cols {
		offset := (rows - len(col)) * (nodeH + rowGap) / 2
		for i, t := range col {
			x := dagPad + c*(nodeW+colGap)
			y := dagPad + offset + i*(nodeH+rowGap)
			pos[t.idx] = [2]int{x, y}
			out.Nodes = append(out.Nodes, templates.DAGNode{
				TaskID: t.taskID, Name: clip(t.name, nameLen), Status: t.status, Detail: clip(t.detail, nameLen),
				X: x, Y: y, W: nodeW, H: nodeH, Href: t.href,
			})
		}
	}
	for _, t := range tasks {
		to := pos[t.idx]
		for _, dep := range t.deps {
			from, ok := pos[dep]
			if !ok {
				continue
			}
			x1, y1 := from[0]+nodeW, from[1]+nodeH/2
			x2, y2 := to[0], to[1]+nodeH/2
			dx := colGap / 2
			out.Edges = append(out.Edges, templates.DAGEdge{
				From: byIdx[dep].taskID, To: t.taskID,
				Path: fmt.Sprintf("M %d %d C %d %d, %d %d, %d %d", x1, y1, x1+dx, y1, x2-dx, y2, x2, y2),
			})
		}
	}
	return out
}

// Chart geometry.
const (
	chartW = 720
	chartH = 110
)

// throughputChart draws per-minute buckets as stacked bars: completed
// below, failed on top, scaled to the busiest minute.
func throughputChart(buckets []store.ThroughputBucket) templates.BarChart {
	c := templates.BarChart{Width: chartW, Height: chartH}
	if len(buckets) == 0 {
		return c
	}
	for _, b := range buckets {
		c.Max = max(c.Max, b.Completed+b.Failed)
		c.Completed += b.Completed
		c.Failed += b.Failed
	}
	step := chartW / len(buckets)
	w := max(step-1, 1)
	scale := func(v int64) int {
		if c.Max == 0 || v == 0 {
			return 0
		}
		return max(int(v*int64(chartH-14)/c.Max), 1) // leave room for the max label
	}
	for i, b := range buckets {
		bar := templates.Bar{X: i * step, W: w,
			Title: fmt.Sprintf("%s: %d completed, %d failed", b.Minute.UTC().Format("15:04"), b.Completed, b.Failed)}
		bar.DoneH = scale(b.Completed)
		bar.DoneY = chartH - bar.DoneH
		bar.FailH = scale(b.Failed)
		bar.FailY = bar.DoneY - bar.FailH
		c.Bars = append(c.Bars, bar)
	}
	c.From = buckets[0].Minute.UTC().Format("15:04")
	c.To = buckets[len(buckets)-1].Minute.UTC().Format("15:04") + " UTC"
	return c
}

// throughputWindow is the hour the overview's chart covers, ending at now.
func throughputWindow(now time.Time) (time.Time, time.Time) {
	return now.Add(-59 * time.Minute), now
}
