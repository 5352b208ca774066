#pragma once
// Which process made an object: a fork() child inherits communicators and
// works whose threads, locks and peers belong to its parent.

namespace tutti::detail {

// The number of fork()s this process descends from since the library first
// asked (each child sees one more than its parent had). Reading it is one
// relaxed load; the first call registers the fork handler.
unsigned fork_generation();

}  // namespace tutti::detail
