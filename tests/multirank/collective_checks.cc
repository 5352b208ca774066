#include "multirank/collective_checks.h"

#include <algorithm>
#include <functional>

namespace tutti::testing {
namespace {

bool is_product(const ReduceOp& op) { return op.kind == ReduceOpKind::Product; }

std::uint64_t seed_of(std::uint64_t id, int rank, std::size_t salt) {
  std::uint64_t x = id * 0x9E3779B97F4A7C15ull + static_cast<std::uint64_t>(rank + 1) * 0xC2B2AE3D27D4EB4Full + salt;
  return x ^ (x >> 29);
}

// Runs op in its blocking or async form, as the case says.
void run(const CaseInfo& c, const std::function<void()>& blocking, const std::function<Work()>& async) {
  if (c.async) {
    Work w = async();
    w.wait();
    EXPECT_TRUE(w.test());
  } else {
    blocking();
  }
}

void expect_same(const Buf& got, const Buf& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  if (!got.empty() && std::memcmp(got.data(), want.data(), got.size()) != 0) {
    std::size_t i = 0;
    while (got[i] == want[i]) ++i;
    ADD_FAILURE() << what << ": first differing byte " << i << " of " << got.size();
  }
}

void expect_reduced(const void* got, const void* want, const CaseInfo& c, int n, const std::string& what) {
  std::string why;
  if (!compare(got, want, c.count, c.dtype, c.op, n, &why)) ADD_FAILURE() << what << ": " << why;
}

std::vector<const void*> ptrs(const std::vector<Buf>& v) {
  std::vector<const void*> out;
  for (auto& b : v) out.push_back(b.data());
  return out;
}

}  // namespace

std::string CaseInfo::describe(const char* coll, int rank) const {
  return std::string(coll) + " case " + std::to_string(id) + " on rank " + std::to_string(rank) + ": " +
         dtype_name(dtype) + " " + reduce_op_name(op.kind) + " count " + std::to_string(count) + " root " +
         std::to_string(root) + (inplace ? " in-place" : "") + (async ? " async" : "") + (list_form ? " list" : "");
}

Buf input_of(const CaseInfo& c, int rank, std::size_t salt, std::size_t count_override) {
  std::size_t count = count_override == ~std::size_t(0) ? c.count : count_override;
  Buf b(count * dtype_size(c.dtype));
  fill_random(b.data(), count, c.dtype, seed_of(c.id, rank, salt), is_product(c.op));
  return b;
}

// Runs op(send, out) in c.shared's buffers when set (copying send and out
// in, and back out afterwards), else where they are.
void run_in(const CaseInfo& c, Buf& send, Buf& out, bool inplace,
            const std::function<void(const void*, void*)>& blocking,
            const std::function<Work(const void*, void*)>& async) {
  if (!c.shared[0]) {
    void* dst = inplace ? send.data() : out.data();
    run(
        c, [&] { blocking(send.data(), dst); }, [&] { return async(send.data(), dst); });
    return;
  }
  ASSERT_LE(std::max(send.size(), out.size()), c.shared_bytes);
  char* s = c.shared[0];
  char* d = inplace ? s : c.shared_send_only ? out.data() : c.shared[1];
  std::memcpy(s, send.data(), send.size());
  if (!inplace && d != out.data()) std::memcpy(d, out.data(), out.size());
  run(
      c, [&] { blocking(s, d); }, [&] { return async(s, d); });
  std::memcpy(send.data(), s, send.size());
  if (!inplace && d != out.data()) std::memcpy(out.data(), d, out.size());
}

void check_all_reduce(Communicator& comm, const CaseInfo& c) {
  const int n = comm.size(), r = comm.rank();
  std::vector<Buf> in;
  for (int p = 0; p < n; ++p) in.push_back(input_of(c, p));
  Buf want(in[r].size());
  reference_reduce(want.data(), ptrs(in), c.count, c.dtype, c.op);
  Buf send = in[r];
  Buf out = c.inplace ? send : input_of(c, r, 77);
  run_in(
      c, send, out, c.inplace, [&](const void* s, void* d) { comm.all_reduce(s, d, c.count, c.dtype, c.op); },
      [&](const void* s, void* d) { return comm.iall_reduce(s, d, c.count, c.dtype, c.op); });
  void* dst = c.inplace ? send.data() : out.data();
  expect_reduced(dst, want.data(), c, n, c.describe("all_reduce", r));
  if (!c.inplace) expect_same(send, in[r], c.describe("all_reduce (send buffer changed)", r));
}

void check_reduce(Communicator& comm, const CaseInfo& c) {
  const int n = comm.size(), r = comm.rank();
  std::vector<Buf> in;
  for (int p = 0; p < n; ++p) in.push_back(input_of(c, p));
  Buf want(in[r].size());
  reference_reduce(want.data(), ptrs(in), c.count, c.dtype, c.op);
  Buf send = in[r];
  Buf out = input_of(c, r, 77);
  const Buf sentinel = out;
  run_in(
      c, send, out, c.inplace, [&](const void* s, void* d) { comm.reduce(s, d, c.count, c.dtype, c.op, c.root); },
      [&](const void* s, void* d) { return comm.ireduce(s, d, c.count, c.dtype, c.op, c.root); });
  void* dst = c.inplace ? send.data() : out.data();
  if (r == c.root) {
    expect_reduced(dst, want.data(), c, n, c.describe("reduce", r));
  } else {
    expect_same(out, sentinel, c.describe("reduce (non-root receive buffer written)", r));
  }
  if (!c.inplace) expect_same(send, in[r], c.describe("reduce (send buffer changed)", r));
}

void check_broadcast(Communicator& comm, const CaseInfo& c) {
  const int r = comm.rank();
  Buf want = input_of(c, c.root);
  Buf buf = r == c.root ? want : input_of(c, r, 77);
  run(
      c, [&] { comm.broadcast(buf.data(), c.count, c.dtype, c.root); },
      [&] { return comm.ibroadcast(buf.data(), c.count, c.dtype, c.root); });
  expect_same(buf, want, c.describe("broadcast", r));
}

void check_gather(Communicator& comm, const CaseInfo& c) {
  const int n = comm.size(), r = comm.rank();
  const std::size_t bytes = c.count * dtype_size(c.dtype);
  Buf send = input_of(c, r);
  Buf out = input_of(c, r, 77, c.count * n);
  const Buf sentinel = out;
  const void* src = send.data();
  if (c.inplace && r == c.root) {
    if (bytes) std::memcpy(out.data() + r * bytes, send.data(), bytes);
    src = out.data() + r * bytes;
  }
  std::vector<void*> blocks;
  for (int p = 0; p < n; ++p) blocks.push_back(out.data() + p * bytes);
  if (c.list_form) {
    std::span<void* const> lst = r == c.root ? std::span<void* const>(blocks) : std::span<void* const>();
    run(
        c, [&] { comm.gather(src, lst, c.count, c.dtype, c.root); },
        [&] { return comm.igather(src, lst, c.count, c.dtype, c.root); });
  } else {
    run(
        c, [&] { comm.gather(src, out.data(), c.count, c.dtype, c.root); },
        [&] { return comm.igather(src, out.data(), c.count, c.dtype, c.root); });
  }
  if (r == c.root) {
    Buf want;
    for (int p = 0; p < n; ++p) {
      Buf b = input_of(c, p);
      want.insert(want.end(), b.begin(), b.end());
    }
    expect_same(out, want, c.describe("gather", r));
  } else {
    expect_same(out, sentinel, c.describe("gather (non-root receive buffer written)", r));
  }
}

void check_all_gather(Communicator& comm, const CaseInfo& c) {
  const int n = comm.size(), r = comm.rank();
  const std::size_t bytes = c.count * dtype_size(c.dtype);
  Buf send = input_of(c, r);
  Buf out = input_of(c, r, 77, c.count * n);
  const void* src = send.data();
  if (c.inplace) {
    if (bytes) std::memcpy(out.data() + r * bytes, send.data(), bytes);
    src = out.data() + r * bytes;
  }
  std::vector<void*> blocks;
  for (int p = 0; p < n; ++p) blocks.push_back(out.data() + p * bytes);
  if (c.list_form) {
    run(
        c, [&] { comm.all_gather(src, std::span<void* const>(blocks), c.count, c.dtype); },
        [&] { return comm.iall_gather(src, std::span<void* const>(blocks), c.count, c.dtype); });
  } else {
    run(
        c, [&] { comm.all_gather(src, out.data(), c.count, c.dtype); },
        [&] { return comm.iall_gather(src, out.data(), c.count, c.dtype); });
  }
  Buf want;
  for (int p = 0; p < n; ++p) {
    Buf b = input_of(c, p);
    want.insert(want.end(), b.begin(), b.end());
  }
  expect_same(out, want, c.describe("all_gather", r));
}

void check_scatter(Communicator& comm, const CaseInfo& c) {
  const int n = comm.size(), r = comm.rank();
  const std::size_t bytes = c.count * dtype_size(c.dtype);
  Buf all = input_of(c, c.root, 0, c.count * n);  // the root's send buffer, known to all
  Buf send = r == c.root ? all : Buf();
  Buf out = input_of(c, r, 77);
  void* dst = (c.inplace && r == c.root) ? send.data() + r * bytes : out.data();
  std::vector<const void*> blocks;
  if (r == c.root)
    for (int p = 0; p < n; ++p) blocks.push_back(send.data() + p * bytes);
  if (c.list_form) {
    run(
        c, [&] { comm.scatter(std::span<const void* const>(blocks), dst, c.count, c.dtype, c.root); },
        [&] { return comm.iscatter(std::span<const void* const>(blocks), dst, c.count, c.dtype, c.root); });
  } else {
    const void* src = r == c.root ? send.data() : nullptr;
    run(
        c, [&] { comm.scatter(src, dst, c.count, c.dtype, c.root); },
        [&] { return comm.iscatter(src, dst, c.count, c.dtype, c.root); });
  }
  Buf got(static_cast<char*>(dst), static_cast<char*>(dst) + bytes);
  Buf want(all.begin() + r * bytes, all.begin() + (r + 1) * bytes);
  expect_same(got, want, c.describe("scatter", r));
  if (r == c.root) expect_same(send, all, c.describe("scatter (root send buffer changed)", r));
}

void check_reduce_scatter(Communicator& comm, const CaseInfo& c) {
  const int n = comm.size(), r = comm.rank();
  const std::size_t bytes = c.count * dtype_size(c.dtype);
  std::vector<Buf> in;
  for (int p = 0; p < n; ++p) in.push_back(input_of(c, p, 0, c.count * n));
  // Reference for my block: the reduction of block r of every rank's input.
  std::vector<Buf> mine_of(n);
  for (int p = 0; p < n; ++p) mine_of[p].assign(in[p].begin() + r * bytes, in[p].begin() + (r + 1) * bytes);
  Buf want(bytes);
  reference_reduce(want.data(), ptrs(mine_of), c.count, c.dtype, c.op);
  Buf send = in[r];
  Buf out = input_of(c, r, 77);
  void* dst = c.inplace ? send.data() + r * bytes : out.data();
  std::vector<const void*> blocks;
  for (int p = 0; p < n; ++p) blocks.push_back(send.data() + p * bytes);
  if (c.list_form) {
    run(
        c, [&] { comm.reduce_scatter(std::span<const void* const>(blocks), dst, c.count, c.dtype, c.op); },
        [&] { return comm.ireduce_scatter(std::span<const void* const>(blocks), dst, c.count, c.dtype, c.op); });
  } else {
    run(
        c, [&] { comm.reduce_scatter(send.data(), dst, c.count, c.dtype, c.op); },
        [&] { return comm.ireduce_scatter(send.data(), dst, c.count, c.dtype, c.op); });
  }
  expect_reduced(dst, want.data(), c, n, c.describe("reduce_scatter", r));
  if (!c.inplace) expect_same(send, in[r], c.describe("reduce_scatter (send buffer changed)", r));
}

void check_all_to_all(Communicator& comm, const CaseInfo& c) {
  const int n = comm.size(), r = comm.rank();
  const std::size_t bytes = c.count * dtype_size(c.dtype);
  Buf send = input_of(c, r, 0, c.count * n);
  Buf out = input_of(c, r, 77, c.count * n);
  run(
      c, [&] { comm.all_to_all(send.data(), out.data(), c.count, c.dtype); },
      [&] { return comm.iall_to_all(send.data(), out.data(), c.count, c.dtype); });
  Buf want;
  for (int p = 0; p < n; ++p) {
    Buf theirs = input_of(c, p, 0, c.count * n);
    want.insert(want.end(), theirs.begin() + r * bytes, theirs.begin() + (r + 1) * bytes);
  }
  expect_same(out, want, c.describe("all_to_all", r));
}

void check_all_to_all_v(Communicator& comm, const CaseInfo& c) {
  const int n = comm.size(), r = comm.rank();
  const std::size_t es = dtype_size(c.dtype);
  // counts[a][b]: elements rank a sends to rank b, known to every rank; zeros included.
  auto count_of = [&](int a, int b) { return (seed_of(c.id, a * 131 + b, 5) % (c.count + 2)); };
  auto layout = [&](int a, bool sending, std::vector<std::size_t>& counts, std::vector<std::size_t>& displs) {
    counts.assign(n, 0);
    displs.assign(n, 0);
    std::size_t off = 1;  // a gap before the first block, to test displacements
    for (int p = 0; p < n; ++p) {
      counts[p] = sending ? count_of(a, p) : count_of(p, a);
      displs[p] = off;
      off += counts[p] + 1;
    }
    return off;
  };
  std::vector<std::size_t> sc, sd, rc, rd;
  std::size_t send_len = layout(r, true, sc, sd), recv_len = layout(r, false, rc, rd);
  Buf send = input_of(c, r, 0, send_len);
  Buf out = input_of(c, r, 77, recv_len);
  Buf want = out;
  for (int p = 0; p < n; ++p) {
    std::vector<std::size_t> psc, psd;
    std::size_t plen = layout(p, true, psc, psd);
    Buf theirs = input_of(c, p, 0, plen);
    if (psc[r]) std::memcpy(want.data() + rd[p] * es, theirs.data() + psd[r] * es, psc[r] * es);
  }
  run(
      c, [&] { comm.all_to_all_v(send.data(), sc, sd, out.data(), rc, rd, c.dtype); },
      [&] { return comm.iall_to_all_v(send.data(), sc, sd, out.data(), rc, rd, c.dtype); });
  expect_same(out, want, c.describe("all_to_all_v", r));
}

std::vector<std::string> algorithms_in_trace(const std::string& js, const std::string& op) {
  std::vector<std::string> out;
  const std::string key = "\"op\":\"" + op + "\"";
  for (std::size_t at = js.find(key); at != std::string::npos; at = js.find(key, at + 1)) {
    const std::size_t a = js.find("\"algo\":\"", at), end = js.find('}', at);
    out.push_back(a == std::string::npos || a > end ? "?" : js.substr(a + 8, js.find('"', a + 8) - (a + 8)));
  }
  return out;
}

std::size_t run_collective_sweep(Communicator& comm,
                                 const std::function<std::vector<std::size_t>(DataType)>& counts_for,
                                 std::uint64_t id_base) {
  const int n = comm.size();
  std::uint64_t id = id_base;
  std::size_t cases = 0;
  auto next = [&](DataType dt, std::size_t count) {
    CaseInfo c;
    c.id = ++id;
    c.dtype = dt;
    c.count = count;
    // Alternate the forms so each dtype, count and root sees both.
    c.inplace = (id % 2) == 0;
    c.async = (id % 3) == 0;
    c.list_form = (id % 4) < 2;
    ++cases;
    return c;
  };
  for (int d = 0; d < kNumDataTypes; ++d) {
    const DataType dt = static_cast<DataType>(d);
    for (std::size_t count : counts_for(dt)) {
      for (int k = 0; k < kNumReduceOps; ++k) {
        ReduceOp op(static_cast<ReduceOpKind>(k));
        if (op.kind == ReduceOpKind::PremulSum) op.scalar = dtype_is_integer(dt) ? 3.0 : 0.5;
        if (!reduce_op_invalid_reason(dt, op).empty()) {
          // Meaningless pairs are refused before anything is sent.
          std::vector<char> b(count * dtype_size(dt) + 16);
          try {
            comm.all_reduce(b.data(), b.data(), count, dt, op);
            ADD_FAILURE() << "all_reduce accepted " << reduce_op_name(op.kind) << " on " << dtype_name(dt);
          } catch (const Error& e) {
            EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
            EXPECT_NE(e.message().find(reduce_op_name(op.kind)), std::string::npos) << e.message();
          }
          continue;
        }
        CaseInfo c = next(dt, count);
        c.op = op;
        check_all_reduce(comm, c);
        c = next(dt, count);
        c.op = op;
        check_reduce_scatter(comm, c);
        for (int root = 0; root < n; ++root) {
          c = next(dt, count);
          c.op = op;
          c.root = root;
          check_reduce(comm, c);
        }
      }
      for (int root = 0; root < n; ++root) {
        CaseInfo c = next(dt, count);
        c.root = root;
        check_broadcast(comm, c);
        c = next(dt, count);
        c.root = root;
        check_gather(comm, c);
        c = next(dt, count);
        c.root = root;
        check_scatter(comm, c);
      }
      CaseInfo c = next(dt, count);
      check_all_gather(comm, c);
      c = next(dt, count);
      check_all_to_all(comm, c);
      c = next(dt, count);
      check_all_to_all_v(comm, c);
      if (::testing::Test::HasFailure()) return cases;  // stop at the first broken dtype
    }
  }
  return cases;
}

}  // namespace tutti::testing
