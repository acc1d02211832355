package daemon

import (
	"math"

	"golang.org/x/sys/unix"
)

// closeInherited marks every file descriptor above stderr close-on-exec, so
// that those scavd inherited from whoever started it (a shell's, a
// service manager's: an open root-only file) are not passed on to the
// workers it starts as other users. The descriptors Go opens are
// close-on-exec already; what a launcher hands a worker it hands on
// purpose (its standard streams).
func closeInherited() {
	_ = unix.CloseRange(3, math.MaxUint32, unix.CLOSE_RANGE_CLOEXEC)
}
