// The table of algorithms (registry.h): every medium's entries, collective
// by collective, and what is looked up in it.
#include "plan/registry.h"

#include <vector>

#include "media/network.h"
#include "media/shm_medium.h"
#include "media/two_level.h"
#include "tutti/error.h"

namespace tutti::detail {
namespace {

constexpr std::size_t K = 1024;

// Each collective's algorithms in the order its rules are tried: shared
// memory, two levels, then the network's in their medium's order; beside
// each, the medium's own entry it copies.
struct Table {
  std::vector<Algorithm> all;
  std::vector<const Algorithm*> source;
};
const Table& tables() {
  static const Table t = [] {
    Table out;
    for (int c = 0; c < kCollectives; ++c)
      for (const std::span<const Algorithm> medium : {shm_algorithms(), two_level_algorithms(), network_algorithms()})
        for (const Algorithm& a : medium)
          if (a.collective == static_cast<Collective>(c)) {
            out.all.push_back(a);
            out.source.push_back(&a);
          }
    return out;
  }();
  return t;
}
const std::vector<Algorithm>& table() { return tables().all; }

std::string bytes_text(std::size_t b) {
  if (b == kSmallBytes) return "TUTTI_SMALL_BYTES";
  if (b == kAboveSmall) return "TUTTI_SMALL_BYTES + 1";
  if (b >= K * K && b % (K * K) == 0) return std::to_string(b / K / K) + " MiB";
  if (b >= K && b % K == 0) return std::to_string(b / K) + " KiB";
  if (b > K && (b - 1) % K == 0) return std::to_string((b - 1) / K) + " KiB + 1";
  return std::to_string(b) + " B";
}

std::string describe_rule(const When& w) {
  std::vector<std::string> parts;
  if (w.min_bytes && w.max_bytes != kNoLimit) {
    parts.push_back(bytes_text(w.min_bytes) + " to " + bytes_text(w.max_bytes));
  } else if (w.min_bytes) {
    parts.push_back("from " + bytes_text(w.min_bytes));
  } else if (w.max_bytes != kNoLimit) {
    parts.push_back("up to " + bytes_text(w.max_bytes));
  }
  if (w.min_ranks && w.max_ranks != INT_MAX) {
    parts.push_back(std::to_string(w.min_ranks) + " to " + std::to_string(w.max_ranks) + " ranks");
  } else if (w.min_ranks) {
    parts.push_back("at least " + std::to_string(w.min_ranks) + " ranks");
  } else if (w.max_ranks != INT_MAX) {
    parts.push_back("at most " + std::to_string(w.max_ranks) + " ranks");
  }
  if (w.min_hosts && w.max_hosts != INT_MAX) {
    parts.push_back(std::to_string(w.min_hosts) + " to " + std::to_string(w.max_hosts) + " hosts");
  } else if (w.min_hosts) {
    parts.push_back("at least " + std::to_string(w.min_hosts) + " hosts");
  } else if (w.max_hosts == 1) {
    parts.push_back("one host");
  } else if (w.max_hosts != INT_MAX) {
    parts.push_back("at most " + std::to_string(w.max_hosts) + " hosts");
  }
  if (w.max_ranks_per_host != INT_MAX) parts.push_back("at most " + std::to_string(w.max_ranks_per_host) + " a host");
  if (w.pow2_ranks) parts.push_back("ranks a power of two");
  if (w.min_bytes_per_rank) parts.push_back("at least " + bytes_text(w.min_bytes_per_rank) + " a rank");
  std::string out;
  for (const auto& p : parts) out += (out.empty() ? "" : ", ") + p;
  return out.empty() ? "always" : out;
}

}  // namespace

std::span<const Algorithm> algorithms() { return table(); }

const Algorithm& fallback_algorithm(Collective collective) {
  for (const Algorithm& a : table())
    if (a.collective == collective && a.fallback) return a;
  throw Error(ErrorKind::Internal, std::string("no fallback algorithm for ") + collective_name(collective));
}

const Algorithm& registered(const Algorithm& entry) {
  const Table& t = tables();
  for (std::size_t i = 0; i < t.source.size(); ++i)
    if (t.source[i] == &entry) return t.all[i];
  throw Error(ErrorKind::Internal, std::string("the ") + collective_name(entry.collective) + " algorithm '" +
                                       entry.name + "' is in no medium's table");
}

const Algorithm* find_algorithm(Collective collective, std::string_view name) {
  for (const Algorithm& a : table())
    if (a.collective == collective && name == a.name) return &a;
  return nullptr;
}

std::string algorithm_names(Collective collective) {
  std::string out;
  for (bool two_level : {false, true})
    for (const Algorithm& a : table())
      if (a.collective == collective && (a.medium == Medium::TwoLevel) == two_level)
        out += (out.empty() ? "" : ", ") + std::string(a.name);
  return out;
}

std::string algorithms_markdown() {
  std::string out =
      "| collective | algorithm | medium | chosen by default | steps |\n"
      "|---|---|---|---|---|\n";
  for (const Algorithm& a : table()) {
    std::string when;
    if (a.medium == Medium::SharedMemory) {
      when = "every member on one host (unless TUTTI_TRANSPORT=tcp)";
    } else if (a.medium == Medium::TwoLevel) {
      when = "spanning hosts with the same number (>= 2) of members on each";
      for (const When& w : a.chosen) when += (&w == a.chosen.data() ? ", " : "; or ") + describe_rule(w);
    } else {
      for (const When& w : a.chosen) when += (when.empty() ? "" : "; or ") + describe_rule(w);
      if (a.fallback) when += when.empty() ? "where no other rule holds" : "; or where no other rule holds";
      if (when.empty()) when = "never (TUTTI_ALGO only)";
    }
    out += std::string("| ") + collective_name(a.collective) + " | `" + a.name + "` | " + medium_name(a.medium) +
           " | " + when + " | " + a.summary + " |\n";
  }
  return out;
}

}  // namespace tutti::detail
