#pragma once
// spawn(world, fn): runs fn on `world` ranks, each a forked process with its
// own communicator, and reports their failures as the calling test's.
//
// The parent runs a TCP store server; every child connects to it, so the
// rendezvous path of init() is exercised. A child that fails (gtest failure,
// exception, crash) fails the test with its rank; a child still running at
// the deadline is killed and named. Children never outlive the call.

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "tutti/communicator.h"

namespace tutti::testing {

// Built with AddressSanitizer or ThreadSanitizer (scripts/test.sh's second
// stage): the same paths run several times slower there, and some tests run
// fewer cases of them.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr bool kSanitized = true;
#else
inline constexpr bool kSanitized = false;
#endif
// ThreadSanitizer checks the threads of one rank (progress thread, callers,
// async work), whose steps do not depend on the dtype or on a reduction's
// kernel: some tests run fewer dtypes and trials there than under
// AddressSanitizer and UndefinedBehaviorSanitizer, which check each kernel.
#if defined(__SANITIZE_THREAD__)
inline constexpr bool kThreadSanitized = true;
#else
inline constexpr bool kThreadSanitized = false;
#endif

struct SpawnOptions {
  std::chrono::seconds timeout{300};
  // Set in every child before init (e.g. TUTTI_CHUNK_BYTES).
  std::vector<std::pair<std::string, std::string>> env;
  // Per-operation timeout of the communicators.
  std::chrono::milliseconds op_timeout{60000};
  // Ranks that are expected to die by a signal (failure tests).
  std::vector<int> may_die;
};

void spawn(int world, const std::function<void(Communicator&)>& fn, const SpawnOptions& options = {});

// A TUTTI_SHM_PREFIX of a test's own ("tutti-test-<name>-<pid>"), so that
// tests running in parallel do not see each other's segments, and the names
// in /dev/shm that begin with it.
std::string shm_prefix_for(const std::string& name);
std::set<std::string> shm_segments(const std::string& prefix);

// Test-name suffix for a transport parameter: "auto" runs over shared
// memory on this host ("shm"), "tcp" over loopback TCP, "striped" over
// loopback TCP with three data connections per pair and every message of
// 4 KiB or more split across them.
inline std::string transport_name(const ::testing::TestParamInfo<std::string>& p) {
  return p.param == "auto" ? std::string("shm") : p.param;
}

// The environment of a transport parameter ("auto", "tcp", "striped").
inline std::vector<std::pair<std::string, std::string>> transport_env(const std::string& mode) {
  if (mode == "striped")
    return {{"TUTTI_TRANSPORT", "tcp"}, {"TUTTI_SOCKETS_PER_PEER", "3"}, {"TUTTI_SOCKET_STRIPE_BYTES", "4096"}};
  return {{"TUTTI_TRANSPORT", mode}};
}

}  // namespace tutti::testing
