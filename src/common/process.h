#pragma once
// Whether another process of this host is gone.

namespace tutti::detail {

// True when `pid` has exited: it no longer exists, or it is a zombie (it
// exited and its parent has not reaped it yet, which kill(pid, 0) does not
// tell apart from a live process). False for pid <= 0.
bool process_gone(int pid);

}  // namespace tutti::detail
