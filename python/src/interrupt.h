#pragma once
// Ctrl-C during a wait in tutti, for the tutti module and the torch backend.
//
// Python runs its SIGINT handler (KeyboardInterrupt) only between bytecodes,
// so a call that waits in tutti would hear Ctrl-C only when it ends, at
// worst after its timeout. While Python's main thread waits in a
// communicator's call and Python's handler is the default one, a C handler of
// ours sits in front of Python's: it passes the signal on to Python's and
// wakes a watcher thread, which aborts that communicator. The call then
// fails at once, and the binding raises what Python's handler raises
// (KeyboardInterrupt). The communicator stays aborted (every later call fails
// naming the interrupt): an operation cut off half-way cannot be resumed.
// Under a SIGINT handler of the user's, calls are not interrupted (the
// handler runs after the call, as before).
//
// Each extension module has its own copy of this state (hidden symbols); the
// handlers of two modules chain, each passing the signal on to the one it
// found.
#include <pthread.h>
#include <pybind11/pybind11.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "tutti/communicator.h"

namespace tutti_python::interrupt {

namespace py = pybind11;

inline struct sigaction g_next;           // the handler ours passes the signal on to
inline std::atomic<bool> g_armed{false};  // the main thread waits in a call
inline std::atomic<bool> g_hit{false};    // SIGINT came while armed
inline int g_wake = -1;                   // eventfd: the watcher waits on it
inline std::mutex g_mu;                   // guards g_abort
// Aborts what the main thread waits on (a communicator).
inline const std::function<void(const std::string&)>* g_abort = nullptr;
inline std::atomic<unsigned> g_forks{0};       // fork()s since import (a child has no watcher)
inline unsigned g_watcher_forks = ~0u;         // g_forks when the watcher started
inline unsigned long g_main_thread = 0;        // Python's main thread (PyThread_get_thread_ident)
inline PyObject* g_getsignal = nullptr;        // signal.getsignal
inline PyObject* g_default_handler = nullptr;  // signal.default_int_handler

inline void on_sigint(int sig, siginfo_t* info, void* context) {
  if (g_armed.load(std::memory_order_acquire)) {
    g_hit.store(true, std::memory_order_release);
    const std::uint64_t one = 1;
    ssize_t n = ::write(g_wake, &one, sizeof one);
    (void)n;
  }
  if (g_next.sa_flags & SA_SIGINFO) {
    g_next.sa_sigaction(sig, info, context);
  } else if (g_next.sa_handler != SIG_DFL && g_next.sa_handler != SIG_IGN) {
    g_next.sa_handler(sig);
  }
}

inline void watch(int fd) {
  while (true) {
    std::uint64_t n = 0;
    if (::read(fd, &n, sizeof n) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    std::lock_guard<std::mutex> lock(g_mu);
    if (g_abort && g_hit.load(std::memory_order_acquire))
      (*g_abort)("interrupted by SIGINT (Ctrl-C) while waiting in tutti; Python raised KeyboardInterrupt");
  }
}

// At import, with the GIL held.
inline void setup() {
  g_main_thread = py::module_::import("threading").attr("main_thread")().attr("ident").cast<unsigned long>();
  py::module_ signal_module = py::module_::import("signal");
  g_getsignal = py::object(signal_module.attr("getsignal")).release().ptr();
  g_default_handler = py::object(signal_module.attr("default_int_handler")).release().ptr();
  ::pthread_atfork(nullptr, nullptr, [] { g_forks.fetch_add(1, std::memory_order_relaxed); });
}

// Whether a call on this thread can be interrupted now; sets up what it
// needs. With the GIL held.
inline bool can_interrupt() {
  if (!g_getsignal) return false;
  PyObject* h = PyObject_CallFunction(g_getsignal, "i", SIGINT);
  if (!h) {
    PyErr_Clear();
    return false;
  }
  const bool default_handler = h == g_default_handler;
  Py_DECREF(h);
  if (!default_handler) return false;
  struct sigaction cur {};
  if (::sigaction(SIGINT, nullptr, &cur) != 0) return false;
  if (!(cur.sa_flags & SA_SIGINFO) || cur.sa_sigaction != on_sigint) {
    if (!(cur.sa_flags & SA_SIGINFO) && (cur.sa_handler == SIG_DFL || cur.sa_handler == SIG_IGN)) return false;
    g_next = cur;
    struct sigaction mine = cur;
    mine.sa_flags |= SA_SIGINFO;
    mine.sa_sigaction = on_sigint;
    if (::sigaction(SIGINT, &mine, nullptr) != 0) return false;
  }
  const unsigned forks = g_forks.load(std::memory_order_relaxed);
  if (g_watcher_forks != forks) {
    const int fd = ::eventfd(0, EFD_CLOEXEC);
    if (fd < 0) return false;
    g_wake = fd;  // a parent's, inherited, stays with its (absent) watcher
    std::thread(watch, fd).detach();
    g_watcher_forks = forks;
  }
  return true;
}

// can_interrupt(), asked again at most every 250 ms (and after a fork): a
// call costs a Python call and a system call, which a small operation would
// feel. Main thread only.
inline std::chrono::steady_clock::time_point g_checked_at{};
inline unsigned g_checked_forks = ~0u;
inline bool g_can = false;
inline bool can_interrupt_now(bool gil_held) {
  const auto now = std::chrono::steady_clock::now();
  const unsigned forks = g_forks.load(std::memory_order_relaxed);
  if (now - g_checked_at < std::chrono::milliseconds(250) && g_checked_forks == forks) return g_can;
  if (gil_held) {
    g_can = can_interrupt();
  } else {
    py::gil_scoped_acquire gil;
    g_can = can_interrupt();
  }
  g_checked_at = now;
  g_checked_forks = forks;
  return g_can;
}

// Around a wait of the main thread; `abort` aborts what it waits on. finish() raises the pending
// Python exception (KeyboardInterrupt) if Ctrl-C came meanwhile. `gil_held`:
// whether the caller holds the GIL (the torch backend runs without it).
class Guard {
 public:
  Guard(const std::function<void(const std::string&)>& abort, bool gil_held) : gil_held_(gil_held) {
    if (!abort || PyThread_get_thread_ident() != g_main_thread || !can_interrupt_now(gil_held)) return;
    {
      std::lock_guard<std::mutex> lock(g_mu);
      g_abort = &abort;
    }
    g_hit.store(false, std::memory_order_relaxed);
    g_armed.store(true, std::memory_order_release);
    armed_ = true;
  }
  ~Guard() { disarm(); }
  Guard(const Guard&) = delete;
  Guard& operator=(const Guard&) = delete;

  void finish() {
    if (!disarm()) return;
    if (gil_held_) {
      if (PyErr_CheckSignals() != 0) throw py::error_already_set();
      return;
    }
    py::gil_scoped_acquire gil;
    if (PyErr_CheckSignals() != 0) throw py::error_already_set();
  }

 private:
  // Whether SIGINT came while armed.
  bool disarm() {
    if (!armed_) return false;
    armed_ = false;
    g_armed.store(false, std::memory_order_release);
    std::lock_guard<std::mutex> lock(g_mu);
    g_abort = nullptr;
    return g_hit.load(std::memory_order_acquire);
  }
  bool armed_ = false;
  bool gil_held_;
};

// Runs f() waiting on `comm`, interruptible by Ctrl-C. With the GIL held,
// releases it around f().
template <class F>
void wait_in(tutti::Communicator& comm, F&& f) {
  const std::function<void(const std::string&)> abort = [&comm](const std::string& why) { comm.abort(why); };
  Guard guard(abort, true);
  try {
    py::gil_scoped_release nogil;
    f();
  } catch (const tutti::Error&) {
    guard.finish();
    throw;
  }
  guard.finish();
}

// The same without the GIL (torch's calls release it before calling the
// backend), aborting with `abort`.
template <class F>
void wait_in_nogil(const std::function<void(const std::string&)>& abort, F&& f) {
  Guard guard(abort, false);
  try {
    f();
  } catch (...) {
    guard.finish();
    throw;
  }
  guard.finish();
}

}  // namespace tutti_python::interrupt
