// tutti-sim: what tutti's collectives cost on hosts and links this machine
// cannot hold. Every network algorithm's schedule is replayed round by
// round on a model of the hosts' links (sim.h says how a round is timed),
// and the library's own table (plan/registry.cc, plan/planner.cc) picks
// the algorithm, as it would for a communicator of that shape.
//
//   tutti-sim --coll all_reduce --ranks 64 --per-host 8 --sizes 8,1K,1M,64M
//       size, the table's choice (and its timed choice's pick), its time
//   ... --algo all         every algorithm that can run on the shape, the
//                          fastest, and the table's time over the fastest's
//   ... --algo NAME        that algorithm, as TUTTI_ALGO would force it
//   ... --measure M        latency (default: one operation alone), stream
//                          (each of many back-to-back ones), bench (as
//                          tutti-bench times them: stream for broadcast,
//                          reduce, gather and scatter, latency otherwise)
//   ... --copies N         N such communicators at once, sharing each host's
//                          link (a two-level form's cross communicators,
//                          one a local index: --per-host 1 --copies L)
//   ... --tsv              one line per size and algorithm, for scripts:
//                          collective ranks per_host bytes algorithm
//                          seconds table(1: the table's choice) what
//   tutti-sim --check FILE [--tolerance 0.15] [--min-bytes N] [--except LIST] [--tsv]
//       measured points ("collective ranks per_host bytes microseconds
//       [algorithm]" a line, # comments), each against the model's time
//       in the bench measure; exit status 1 if any is off by more than the
//       tolerance (|predicted / measured - 1|); with --tsv one line a point:
//       collective ranks per_host bytes forced(- or the algorithm) what
//       measured_seconds predicted_seconds ratio
//   tutti-sim --print-params
//
// Sizes are bytes as tutti-bench counts them: the buffer of all_reduce,
// broadcast and reduce, a rank's block of all_gather, gather, scatter and
// reduce_scatter, a rank's whole send buffer of all_to_all (the table sees
// that over the rank count: the block a peer); 8, 1K, 1M (powers of 1024).
// Elements are float32.
//
// The model's parameters (sim.h, Params): --params FILE ("name = value"
// lines; tools/tutti-sim/netbed_1gbit.params is the fit to the network
// test-bed's measurements, tools/tutti-sim/fit.py), then --param NAME=VALUE
// for single ones. The TUTTI_* settings of the environment apply as they
// would to the library (TUTTI_ALGO, TUTTI_SMALL_BYTES, TUTTI_CHUNK_BYTES,
// TUTTI_ALGO_TUNING, ...).
//
// Around it:
//   tools/tutti-sim/fit.py    the parameters fitted to the network test-bed's
//                             runs (docs/perf/netbed/): netbed_points.txt,
//                             netbed_1gbit.params, every point's agreement
//   tools/tutti-sim/scale.py  64 to 16,384 ranks: where the table picks
//                             wrongly, docs/perf/sim/
//   ctest -R sim.netbed_agreement   the points from 64 KiB within 15%
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/config.h"
#include "plan/registry.h"
#include "sim.h"
#include "tutti/error.h"

namespace {

using tutti::detail::Algorithm;
using tutti::detail::Collective;
using tutti::sim::Measure;
using tutti::sim::Result;
using tutti::sim::Simulator;

int usage() {
  std::fputs(
      "usage: tutti-sim --coll NAME --ranks N --per-host L [--copies N] --sizes LIST [--algo NAME|all]\n"
      "                 [--measure latency|stream|bench] [--tsv] [--params FILE] [--param NAME=VALUE]...\n"
      "       tutti-sim --check FILE [--tolerance F] [--min-bytes N] [--except COLL:HxL,...] [--tsv] [--params FILE]\n"
      "                 [--param NAME=VALUE]...\n"
      "       tutti-sim --print-params [--params FILE]\n",
      stderr);
  return 2;
}

std::string human_bytes(double b) {
  char out[32];
  if (b >= 1 << 20 && std::fmod(b, 1 << 20) == 0) {
    std::snprintf(out, sizeof out, "%.0f MiB", b / (1 << 20));
  } else if (b >= 1 << 10 && std::fmod(b, 1 << 10) == 0) {
    std::snprintf(out, sizeof out, "%.0f KiB", b / (1 << 10));
  } else {
    std::snprintf(out, sizeof out, "%.0f B", b);
  }
  return out;
}

std::string human_time(double s) {
  char out[32];
  if (s < 1e-3) {
    std::snprintf(out, sizeof out, "%.1f us", s * 1e6);
  } else if (s < 1) {
    std::snprintf(out, sizeof out, "%.2f ms", s * 1e3);
  } else {
    std::snprintf(out, sizeof out, "%.3f s", s);
  }
  return out;
}

bool parse_measure(const std::string& s, Measure* m) {
  if (s == "latency") {
    *m = Measure::Latency;
  } else if (s == "stream") {
    *m = Measure::Stream;
  } else if (s == "bench") {
    *m = Measure::Bench;
  } else {
    return false;
  }
  return true;
}

// The table for one collective and shape.
int table(Simulator& sim, Collective c, int ranks, int per_host, int copies, const std::vector<std::size_t>& sizes,
          const std::string& algo, Measure m, bool tsv) {
  std::vector<const Algorithm*> algos;
  if (algo == "all") {
    algos = sim.candidates(c, ranks, per_host);
  } else if (!algo.empty()) {
    const Algorithm* a = tutti::detail::find_algorithm(c, algo);
    if (!a) {
      std::fprintf(stderr, "tutti-sim: no algorithm '%s' for %s (known: %s)\n", algo.c_str(),
                   tutti::detail::collective_name(c), tutti::detail::algorithm_names(c).c_str());
      return 2;
    }
    algos.push_back(a);
  }
  const int L = std::min(ranks, per_host), hosts = (ranks + L - 1) / L;
  const char* cname = tutti::detail::collective_name(c);
  if (!tsv) {
    std::printf("%s on %d ranks, %d a host (%d host%s)\n", cname, ranks, L, hosts, hosts == 1 ? "" : "s");
    std::printf("%-9s  %-48s %11s", "size", "table's choice", "time");
    for (const Algorithm* a : algos) std::printf(" %19s", a->name);
    if (algos.size() > 1) std::printf("  %-19s %s", "fastest", "table/fastest");
    std::printf("\n");
  }
  for (std::size_t bytes : sizes) {
    const Result t = sim.run(c, bytes, ranks, per_host, nullptr, m, copies);
    if (tsv) {
      std::printf("%s\t%d\t%d\t%zu\ttable\t%.9g\t1\t%s\n", cname, ranks, L, bytes, t.modeled ? t.seconds : NAN,
                  t.what.c_str());
    } else {
      std::printf("%-9s  %-48s %11s", human_bytes(static_cast<double>(bytes)).c_str(), t.what.c_str(),
                  t.modeled ? human_time(t.seconds).c_str() : "-");
    }
    const Algorithm* best = nullptr;
    double best_s = 0;
    for (const Algorithm* a : algos) {
      const Result r = sim.run(c, bytes, ranks, per_host, a, m, copies);
      if (tsv) {
        const bool picked = t.what.rfind(a->name, 0) == 0;
        std::printf("%s\t%d\t%d\t%zu\t%s\t%.9g\t%d\t%s\n", cname, ranks, L, bytes, a->name, r.modeled ? r.seconds : NAN,
                    picked ? 1 : 0, r.what.c_str());
      } else {
        std::printf(" %19s", r.modeled ? human_time(r.seconds).c_str() : "-");
      }
      if (r.modeled && (!best || r.seconds < best_s)) {
        best = a;
        best_s = r.seconds;
      }
    }
    if (!tsv && algos.size() > 1 && best)
      std::printf("  %-19s %.2f", best->name, t.modeled && best_s > 0 ? t.seconds / best_s : NAN);
    if (!tsv) std::printf("\n");
  }
  return 0;
}

// Measured points against the model.
// `except`: "collective HxL" keys whose points are shown, not counted.
int check(Simulator& sim, const std::string& path, double tolerance, std::size_t min_bytes,
          const std::set<std::string>& except, bool tsv) {
  std::ifstream in(path);
  if (!in) {
    std::fprintf(stderr, "tutti-sim: cannot read %s\n", path.c_str());
    return 2;
  }
  struct Worst {
    double err = 0;
    int points = 0;
  };
  std::map<std::string, Worst> worst;  // by collective and shape
  int bad = 0, points = 0;
  if (!tsv)
    std::printf("%-15s %-6s %-9s %-20s %12s %12s %7s\n", "collective", "shape", "size", "algorithm", "measured",
                "predicted", "ratio");
  std::string line;
  for (int no = 1; std::getline(in, line); ++no) {
    line = line.substr(0, line.find('#'));
    std::istringstream fields(line);
    std::string cname, algo;
    int ranks = 0, per_host = 0;
    double bytes = 0, us = 0;
    if (!(fields >> cname)) continue;
    Collective c;
    if (!(fields >> ranks >> per_host >> bytes >> us) || !tutti::detail::find_collective(cname, &c) || ranks < 1 ||
        per_host < 1) {
      std::fprintf(stderr, "tutti-sim: %s:%d: expected 'collective ranks per_host bytes microseconds [algorithm]'\n",
                   path.c_str(), no);
      return 2;
    }
    fields >> algo;
    if (bytes < static_cast<double>(min_bytes)) continue;
    const Algorithm* a = algo.empty() ? nullptr : tutti::detail::find_algorithm(c, algo);
    if (!algo.empty() && !a) {
      std::fprintf(stderr, "tutti-sim: %s:%d: no algorithm '%s' for %s\n", path.c_str(), no, algo.c_str(),
                   cname.c_str());
      return 2;
    }
    const Result r = sim.run(c, static_cast<std::size_t>(bytes), ranks, per_host, a, Measure::Bench);
    const double ratio = r.modeled ? r.seconds * 1e6 / us : NAN;
    const std::string shape = std::to_string(ranks / per_host) + "x" + std::to_string(per_host);
    const bool counted = !except.count(cname + " " + shape);
    const bool off = !(std::fabs(ratio - 1) <= tolerance);
    bad += off && counted ? 1 : 0;
    points += counted ? 1 : 0;
    Worst& w = worst[cname + (algo.empty() ? "" : ":" + algo) + " " + shape];
    w.err = std::max(w.err, std::fabs(ratio - 1));
    ++w.points;
    if (tsv) {
      std::printf("%s\t%d\t%d\t%.0f\t%s\t%s\t%.9g\t%.9g\t%.6f\n", cname.c_str(), ranks, per_host, bytes,
                  (algo.empty() ? "-" : algo.c_str()), r.what.c_str(), us * 1e-6, r.modeled ? r.seconds : NAN, ratio);
      continue;
    }
    std::printf("%-15s %-6s %-9s %-20.20s %12s %12s %7.3f%s\n", cname.c_str(), shape.c_str(),
                human_bytes(bytes).c_str(), (algo.empty() ? r.what : algo).c_str(), human_time(us * 1e-6).c_str(),
                r.modeled ? human_time(r.seconds).c_str() : "-", ratio,
                !counted ? "  (not counted)"
                : off    ? "  off"
                         : "");
  }
  if (tsv) return bad ? 1 : 0;
  std::printf("\nlargest error (|predicted/measured - 1|) by collective and shape:\n");
  for (const auto& [key, w] : worst) std::printf("  %-36s %5.1f%%  (%d points)\n", key.c_str(), 100 * w.err, w.points);
  std::printf("%d of %d points within %.0f%%\n", points - bad, points, 100 * tolerance);
  return bad ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string coll, sizes_text, algo, params_path, check_path, measure_text = "latency";
  int ranks = 0, per_host = 1, copies = 1;
  double tolerance = 0.15;
  std::size_t min_bytes = 0;
  std::set<std::string> except;
  bool tsv = false, print_params = false;
  std::vector<std::string> param_sets;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "tutti-sim: %s needs a value\n", a.c_str());
        std::exit(usage());
      }
      return argv[++i];
    };
    try {
      if (a == "--coll") {
        coll = value();
      } else if (a == "--ranks") {
        ranks = std::stoi(value());
      } else if (a == "--per-host") {
        per_host = std::stoi(value());
      } else if (a == "--copies") {
        copies = std::stoi(value());
      } else if (a == "--sizes") {
        sizes_text = value();
      } else if (a == "--algo") {
        algo = value();
      } else if (a == "--measure") {
        measure_text = value();
      } else if (a == "--params") {
        params_path = value();
      } else if (a == "--param") {
        param_sets.push_back(value());
      } else if (a == "--check") {
        check_path = value();
      } else if (a == "--tolerance") {
        tolerance = std::stod(value());
      } else if (a == "--except") {
        std::stringstream list(value());
        for (std::string item; std::getline(list, item, ',');) {
          const auto colon = item.find(':');
          if (colon == std::string::npos)
            throw std::invalid_argument("expected COLLECTIVE:HOSTSxRANKS, got '" + item + "'");
          except.insert(item.substr(0, colon) + " " + item.substr(colon + 1));
        }
      } else if (a == "--min-bytes") {
        min_bytes = tutti::detail::parse_bytes(value(), "--min-bytes");
      } else if (a == "--tsv") {
        tsv = true;
      } else if (a == "--print-params") {
        print_params = true;
      } else {
        std::fprintf(stderr, "tutti-sim: unknown argument '%s'\n", a.c_str());
        return usage();
      }
    } catch (const std::exception& e) {
      std::fprintf(stderr, "tutti-sim: %s: %s\n", a.c_str(), e.what());
      return usage();
    }
  }

  tutti::sim::Params params;
  std::string error;
  if (!params_path.empty() && !params.read(params_path, &error)) {
    std::fprintf(stderr, "tutti-sim: %s\n", error.c_str());
    return 2;
  }
  for (const std::string& s : param_sets) {
    const auto eq = s.find('=');
    char* end = nullptr;
    const double v = eq == std::string::npos ? 0 : std::strtod(s.c_str() + eq + 1, &end);
    if (eq == std::string::npos || end == s.c_str() + eq + 1 || *end || !params.set(s.substr(0, eq), v)) {
      std::fprintf(stderr, "tutti-sim: --param %s: expected NAME=VALUE, NAME one of the names --print-params shows\n",
                   s.c_str());
      return 2;
    }
  }
  if (print_params) {
    std::fputs(params.text().c_str(), stdout);
    return 0;
  }
  try {
    Simulator sim(params);
    if (!check_path.empty()) return check(sim, check_path, tolerance, min_bytes, except, tsv);

    Collective c;
    Measure m;
    if (coll.empty() || !tutti::detail::find_collective(coll, &c) || ranks < 1 || per_host < 1 || copies < 1 ||
        (copies > 1 && per_host > 1) || sizes_text.empty() || !parse_measure(measure_text, &m))
      return usage();
    std::vector<std::size_t> sizes;
    std::stringstream list(sizes_text);
    for (std::string item; std::getline(list, item, ',');) sizes.push_back(tutti::detail::parse_bytes(item, "--sizes"));
    return table(sim, c, ranks, per_host, copies, sizes, algo, m, tsv);
  } catch (const tutti::Error& e) {
    std::fprintf(stderr, "tutti-sim: %s\n", e.what());
    return 2;
  }
}
