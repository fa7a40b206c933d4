package claim

// KeepBuf keeps the array of used, what was read or built into *buf (a
// larger array when it did not fit; nil when nothing was, as for a
// failed claim), for the next use: emptied, so that it holds on to none
// of their strings and JSON (the executions started from claimed rows
// keep those they need).
func KeepBuf[T any](buf *[]T, used []T) {
	if cap(used) > cap(*buf) {
		*buf = used
	}
	clear((*buf)[:cap(*buf)])
	*buf = (*buf)[:0]
}
