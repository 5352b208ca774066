// tutti-bench: nccl-tests-style bandwidth and correctness benchmark of every
// tutti collective. Run under a launcher:
//
//   tuttirun -n N tutti-bench COLL [-b MINBYTES] [-e MAXBYTES] [-f FACTOR] [-n ITERS] [-w WARMUP]
//                             [-c 0|1] [-d DTYPE] [-o OP] [-r ROOT] [--inplace] [--shared-buffers]
//                             [--xcopy] [--json FILE]
//
// One row per message size: warmup iterations, a barrier, ITERS timed
// iterations back to back; the time of a row is the slowest rank's mean.
// With -c 1 one more iteration runs after the timed ones on fresh data and
// every output element is checked against tests/common/reference.h.
// Exit status: 0 all rows correct, 1 wrong elements or a communication
// error, 2 bad options or an invalid argument reported by tutti.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "bench.h"
#include "tutti/tutti.h"
#include "xcopy.h"

namespace {

using tutti_bench::Coll;
using tutti_bench::CollInfo;
using tutti_bench::Options;

constexpr int kExitWrong = 1;
constexpr int kExitUsage = 2;

// This process's rank before init(): what the launcher set, else 0.
int launcher_rank() {
  for (const char* name : {"RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"}) {
    if (const char* v = std::getenv(name)) return std::atoi(v);
  }
  return 0;
}

int g_rank = -1;  // rank once known (-1 before init)
int current_rank() { return g_rank >= 0 ? g_rank : launcher_rank(); }

// Every rank meets the same usage error. Rank 0 reports it; the others wait a
// moment so that the launcher, seeing rank 0 exit first, stops them quietly
// (and report it themselves if it was theirs alone).
[[noreturn]] void usage_exit(const std::string& message, bool hint = true) {
  if (current_rank() != 0) std::this_thread::sleep_for(std::chrono::milliseconds(300));
  std::fprintf(stderr, "tutti-bench: error: %s\n", message.c_str());
  if (hint) std::fprintf(stderr, "Run 'tutti-bench --help' for usage.\n");
  std::fflush(stderr);
  std::exit(kExitUsage);
}

// "64M" -> 67108864: an integer with an optional K, M or G suffix (powers of
// 1024, either case). Empty string on success, else the reason.
std::string parse_size(const std::string& text, std::size_t* out) {
  std::size_t i = 0;
  unsigned long long v = 0;
  while (i < text.size() && text[i] >= '0' && text[i] <= '9') {
    const unsigned d = static_cast<unsigned>(text[i] - '0');
    if (v > (~0ull - d) / 10) return "'" + text + "' is too large";
    v = v * 10 + d;
    ++i;
  }
  if (i == 0) return "'" + text + "' is not a size (a number of bytes with an optional K, M or G suffix)";
  int shift = 0;
  if (i < text.size()) {
    switch (text[i]) {
      case 'k':
      case 'K':
        shift = 10;
        break;
      case 'm':
      case 'M':
        shift = 20;
        break;
      case 'g':
      case 'G':
        shift = 30;
        break;
      default:
        return "'" + text + "' has an unknown suffix (use K, M or G)";
    }
    ++i;
  }
  if (i != text.size()) return "'" + text + "' is not a size (a number of bytes with an optional K, M or G suffix)";
  if (v > (~0ull >> shift) || (v << shift) > (std::size_t{1} << 50)) return "'" + text + "' is too large";
  *out = static_cast<std::size_t>(v << shift);
  return "";
}

std::string join_names(const std::vector<std::string>& names) {
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
}
std::vector<std::string> dtype_names() {
  std::vector<std::string> v;
  for (int i = 0; i < tutti::kNumDataTypes; ++i) v.push_back(tutti::dtype_name(static_cast<tutti::DataType>(i)));
  return v;
}
std::vector<std::string> op_names() {
  std::vector<std::string> v;
  for (int i = 0; i < tutti::kNumReduceOps; ++i)
    v.push_back(tutti::reduce_op_name(static_cast<tutti::ReduceOpKind>(i)));
  return v;
}
std::vector<std::string> coll_names() {
  std::vector<std::string> v;
  for (const CollInfo& c : tutti_bench::collectives()) v.push_back(c.name);
  return v;
}
// A CLI11 check that `value` is one of `names`, listing them otherwise.
CLI::Validator one_of(const std::vector<std::string>& names, const std::string& what) {
  return CLI::Validator(
      [names, what](std::string& value) -> std::string {
        for (const auto& n : names)
          if (value == n) return "";
        return "unknown " + what + " '" + value + "'; valid: " + join_names(names);
      },
      "", what);
}

std::string human_bytes(std::size_t b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB"};
  int u = 0;
  while (u < 3 && b >= 1024 && b % 1024 == 0) {
    b /= 1024;
    ++u;
  }
  return std::to_string(b) + " " + units[u];
}

Options parse_options(int argc, char** argv) {
  Options opt;
  CLI::App app{
      "Measures the time and bandwidth of one tutti collective over a range of message sizes and checks "
      "every result, like nccl-tests. Run it under a launcher: tuttirun -n N tutti-bench COLL ...",
      "tutti-bench"};
  app.set_version_flag("--version", std::string(tutti::version()));
  std::string coll, min_text = "8", max_text = "64M", dtype = "float32", op = "sum";
  int check = 1;
  double scalar = 2.0;
  app.add_option("COLL", coll, "the collective: " + join_names(coll_names()))
      ->required()
      ->type_name("")
      ->check(one_of(coll_names(), "collective"));
  app.add_option("-b,--minbytes", min_text, "smallest message size in bytes (K, M, G suffixes)")
      ->type_name("BYTES")
      ->capture_default_str();
  app.add_option("-e,--maxbytes", max_text, "largest message size in bytes (K, M, G suffixes)")
      ->type_name("BYTES")
      ->capture_default_str();
  app.add_option("-f,--stepfactor", opt.factor, "multiply the size by this between rows")
      ->check(CLI::Range(2, 1 << 20))
      ->capture_default_str();
  app.add_option("-n,--iters", opt.iters, "timed iterations per size")
      ->check(CLI::Range(1, 1 << 30))
      ->capture_default_str();
  app.add_option("-w,--warmup_iters", opt.warmup, "untimed iterations before the timed ones")
      ->check(CLI::Range(0, 1 << 30))
      ->capture_default_str();
  app.add_option("-c,--check", check, "check every result (1) or not (0)")
      ->check(CLI::Range(0, 1))
      ->capture_default_str();
  app.add_option("-d,--datatype", dtype, "element type: " + join_names(dtype_names()))
      ->type_name("DTYPE")
      ->check(one_of(dtype_names(), "data type"))
      ->capture_default_str();
  app.add_option("-o,--op", op, "reduction operator: " + join_names(op_names()))
      ->type_name("OP")
      ->check(one_of(op_names(), "reduction operator"))
      ->capture_default_str();
  app.add_option("--scalar", scalar, "the scalar of premul_sum")->capture_default_str();
  app.add_option("-r,--root", opt.root, "root rank of broadcast, reduce, gather and scatter")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_flag("--inplace", opt.inplace, "run the in-place form (output buffer overlapping the input)");
  app.add_flag(
      "--xcopy", opt.xcopy,
      "also measure, at each size, how fast rank 1 copies out a shared-memory buffer rank 0 has just "
      "written (the physical limit of one-host collectives), and how fast ranks 0 and 1 copy at once "
      "each the other's (what a 2-rank all_reduce must move at least); printed as a comment line per row and as "
      "xcopy_gbps and xexchange_gbps in --json");
  app.add_flag("--shared-buffers", opt.shared_buffers,
               "take the buffers from Communicator::alloc_shared (memory the ranks of a host share, which "
               "all_reduce and reduce read and write directly)");
  app.add_option("--json", opt.json_path, "rank 0 writes one JSON object per row to FILE (JSON lines)")
      ->type_name("FILE");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) {  // --help, --version
      if (current_rank() != 0) std::exit(0);
      std::exit(app.exit(e));
    }
    usage_exit(e.what());
  }

  opt.coll = tutti_bench::find_collective(coll);
  if (std::string err = parse_size(min_text, &opt.min_bytes); !err.empty()) usage_exit("-b: " + err);
  if (std::string err = parse_size(max_text, &opt.max_bytes); !err.empty()) usage_exit("-e: " + err);
  if (opt.min_bytes > opt.max_bytes)
    usage_exit("-b (" + std::to_string(opt.min_bytes) + ") is larger than -e (" + std::to_string(opt.max_bytes) + ")");
  if (opt.min_bytes == 0 && opt.coll->coll != Coll::Barrier) usage_exit("-b must be at least 1 byte");
  opt.check = check == 1;
  for (int i = 0; i < tutti::kNumDataTypes; ++i)
    if (dtype == tutti::dtype_name(static_cast<tutti::DataType>(i))) opt.dtype = static_cast<tutti::DataType>(i);
  for (int i = 0; i < tutti::kNumReduceOps; ++i)
    if (op == tutti::reduce_op_name(static_cast<tutti::ReduceOpKind>(i)))
      opt.op = tutti::ReduceOp(static_cast<tutti::ReduceOpKind>(i));
  if (opt.op.kind == tutti::ReduceOpKind::PremulSum) opt.op.scalar = scalar;
  if (opt.inplace && !opt.coll->has_inplace)
    usage_exit(std::string(opt.coll->name) + " has no in-place form (its send and receive buffers must not overlap)");
  return opt;
}

// Message sizes of the sweep: min, min*f, ... <= max (barrier: one row).
std::vector<std::size_t> sweep(const Options& opt) {
  if (opt.coll->coll == Coll::Barrier) return {0};
  std::vector<std::size_t> sizes;
  for (std::size_t s = opt.min_bytes;;) {
    sizes.push_back(s);
    if (s > opt.max_bytes / static_cast<std::size_t>(opt.factor)) break;
    s *= static_cast<std::size_t>(opt.factor);
  }
  return sizes;
}

struct Row {
  std::size_t bytes, count;
  double time_us, algbw, busbw;
  std::uint64_t wrong;
};

constexpr const char* kRowFormat = "%12s  %12s  %10s  %10s  %6s  %10s  %8s  %8s  %8s";

// One line of the table, without trailing blanks.
void print_line(const char* size, const char* count, const char* type, const char* redop, const char* root,
                const char* time, const char* algbw, const char* busbw, const char* wrong) {
  char line[256];
  std::snprintf(line, sizeof line, kRowFormat, size, count, type, redop, root, time, algbw, busbw, wrong);
  std::string s(line);
  s.erase(s.find_last_not_of(' ') + 1);
  std::printf("%s\n", s.c_str());
}

void print_header(const Options& opt, int n) {
  const CollInfo& c = *opt.coll;
  std::printf("# tutti-bench %s: %s, world size %d, dtype %s", tutti::version(), c.name, n,
              tutti::dtype_name(opt.dtype));
  if (c.reduces) std::printf(", op %s", tutti::reduce_op_name(opt.op.kind));
  if (c.reduces && opt.op.kind == tutti::ReduceOpKind::PremulSum) std::printf(" (scalar %g)", opt.op.scalar);
  if (c.rooted) std::printf(", root %d", opt.root);
  std::printf(", %s%s\n", opt.inplace ? "in-place" : "out-of-place", opt.shared_buffers ? ", shared buffers" : "");
  if (c.coll == Coll::Barrier)
    std::printf("# iters %d, warmup %d\n", opt.iters, opt.warmup);
  else
    std::printf("# sizes %s .. %s (factor %d), iters %d, warmup %d, check %s\n", human_bytes(opt.min_bytes).c_str(),
                human_bytes(opt.max_bytes).c_str(), opt.factor, opt.iters, opt.warmup, opt.check ? "on" : "off");
  std::printf("#\n");
  print_line("#       size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong");
  print_line("#        (B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "");
  std::fflush(stdout);
}

void print_row(const Options& opt, const Row& row) {
  char time[32], algbw[32], busbw[32];
  std::snprintf(time, sizeof time, "%.2f", row.time_us);
  std::snprintf(algbw, sizeof algbw, "%.2f", row.algbw);
  std::snprintf(busbw, sizeof busbw, "%.2f", row.busbw);
  const std::string wrong = opt.check ? std::to_string(row.wrong) : "N/A";
  const char* redop = opt.coll->reduces ? tutti::reduce_op_name(opt.op.kind) : "none";
  const int root = opt.coll->rooted ? opt.root : -1;
  print_line(std::to_string(row.bytes).c_str(), std::to_string(row.count).c_str(), tutti::dtype_name(opt.dtype), redop,
             std::to_string(root).c_str(), time, algbw, busbw, wrong.c_str());
  std::fflush(stdout);
}

nlohmann::json row_json(const Options& opt, int n, const Row& row) {
  nlohmann::json j;
  j["collective"] = opt.coll->name;
  j["bytes"] = row.bytes;
  j["count"] = row.count;
  j["dtype"] = tutti::dtype_name(opt.dtype);
  j["op"] = opt.coll->reduces ? tutti::reduce_op_name(opt.op.kind) : "none";
  j["root"] = opt.coll->rooted ? opt.root : -1;
  j["world_size"] = n;
  j["time_us"] = row.time_us;
  j["algbw"] = row.algbw;
  j["busbw"] = row.busbw;
  if (opt.check)
    j["wrong"] = row.wrong;
  else
    j["wrong"] = nullptr;
  j["inplace"] = opt.inplace;
  if (opt.shared_buffers) j["shared_buffers"] = true;
  return j;
}

int run(int argc, char** argv) {
  const Options opt = parse_options(argc, argv);
  tutti::Communicator comm = tutti::init();
  g_rank = comm.rank();
  const int n = comm.size();
  const bool printer = comm.rank() == 0;

  // Rank 0 opens the JSON file; every rank learns whether that worked.
  std::ofstream json;
  std::int32_t json_failed = 0;
  if (printer && !opt.json_path.empty()) {
    json.open(opt.json_path, std::ios::out | std::ios::trunc);
    if (!json) {
      std::fprintf(stderr, "tutti-bench: error: cannot open --json file '%s' for writing\n", opt.json_path.c_str());
      json_failed = 1;
    }
  }
  comm.all_reduce(&json_failed, &json_failed, 1, tutti::DataType::Int32, tutti::ReduceOpKind::Max);
  if (json_failed) return kExitUsage;

  if (printer) print_header(opt, n);
  tutti_bench::Arena arena;
  if (opt.shared_buffers) {
    // The largest row's buffers (blocked collectives round down).
    arena.shared_bytes = opt.max_bytes + 64;
    arena.shared_a = static_cast<char*>(comm.alloc_shared(arena.shared_bytes));
    arena.shared_b = static_cast<char*>(comm.alloc_shared(arena.shared_bytes));
  }
  std::uint64_t total_wrong = 0;
  double busbw_sum = 0;
  int rows = 0;
  for (std::size_t requested : sweep(opt)) {
    tutti_bench::Shape shape;
    if (!tutti_bench::make_shape(opt.coll->coll, requested, opt.dtype, n, &shape)) continue;
    tutti_bench::Case c(comm, opt, shape, arena);
    c.fill(0);
    for (int i = 0; i < opt.warmup; ++i) c.run();
    comm.barrier();
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < opt.iters; ++i) c.run();
    const auto t1 = std::chrono::steady_clock::now();
    double time_us = std::chrono::duration<double, std::micro>(t1 - t0).count() / opt.iters;
    comm.all_reduce(&time_us, &time_us, 1, tutti::DataType::Float64, tutti::ReduceOpKind::Max);

    std::uint64_t wrong = 0;
    if (opt.check) {
      // One extra iteration, outside the timing, on data of its own.
      const std::uint64_t iter = 1 + static_cast<std::uint64_t>(opt.warmup) + static_cast<std::uint64_t>(opt.iters);
      c.fill(iter);
      c.run();
      std::string first;
      wrong = c.check(iter, &first);
      if (wrong > 0) {
        std::fprintf(stderr, "tutti-bench: rank %d: %s of %zu bytes: %llu wrong elements; first: %s\n", comm.rank(),
                     opt.coll->name, shape.bytes, static_cast<unsigned long long>(wrong), first.c_str());
        std::fflush(stderr);
      }
      comm.all_reduce(&wrong, &wrong, 1, tutti::DataType::UInt64, tutti::ReduceOpKind::Sum);
    }
    total_wrong += wrong;

    Row row{shape.bytes, shape.count, time_us, 0, 0, wrong};
    if (time_us > 0) row.algbw = static_cast<double>(shape.bytes) / (time_us * 1e3);  // bytes/us -> GB/s
    row.busbw = row.algbw * tutti_bench::bus_factor(opt.coll->coll, n);
    busbw_sum += row.busbw;
    ++rows;
    tutti_bench::CrossCopy xcopy;
    if (opt.xcopy && n >= 2) xcopy = tutti_bench::cross_process_copy(comm, shape.bytes, opt.iters);
    if (printer) {
      print_row(opt, row);
      if (opt.xcopy && n >= 2)
        std::printf(
            "#   cross-process copy of %zu B: %.2f GB/s; busbw / copy = %.2f; both ways at once: %.2f GB/s per rank "
            "(%.2f of the copy)\n",
            shape.bytes, xcopy.copy_gbps, xcopy.copy_gbps > 0 ? row.busbw / xcopy.copy_gbps : 0.0, xcopy.exchange_gbps,
            xcopy.copy_gbps > 0 ? xcopy.exchange_gbps / xcopy.copy_gbps : 0.0);
      if (json.is_open()) {
        nlohmann::json j = row_json(opt, n, row);
        if (opt.xcopy && n >= 2) {
          j["xcopy_gbps"] = xcopy.copy_gbps;
          j["xexchange_gbps"] = xcopy.exchange_gbps;
        }
        json << j.dump() << '\n' << std::flush;
      }
    }
  }
  if (arena.shared_a) {
    comm.free_shared(arena.shared_b);
    comm.free_shared(arena.shared_a);
  }
  if (printer) {
    if (opt.check)
      std::printf("# Wrong elements total: %llu %s\n", static_cast<unsigned long long>(total_wrong),
                  total_wrong == 0 ? "OK" : "FAILED");
    std::printf("# Avg bus bandwidth    : %.4f GB/s\n", rows > 0 ? busbw_sum / rows : 0.0);
    std::fflush(stdout);
    if (json.is_open() && !json.good()) {
      std::fprintf(stderr, "tutti-bench: error: writing '%s' failed\n", opt.json_path.c_str());
      return kExitWrong;
    }
  }
  // Nobody leaves before rank 0 has printed everything: the launcher stops
  // every rank as soon as one exits non-zero.
  comm.barrier();
  return total_wrong > 0 ? kExitWrong : 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const tutti::Error& e) {
    if (e.kind() == tutti::ErrorKind::InvalidArgument) usage_exit(e.what(), false);
    std::fprintf(stderr, "tutti-bench: rank %d: error: %s\n", current_rank(), e.what());
    return kExitWrong;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tutti-bench: rank %d: error: %s\n", current_rank(), e.what());
    return kExitWrong;
  }
}
