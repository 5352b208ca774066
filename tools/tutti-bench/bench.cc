// tutti-bench: buffers, operation and correctness check of one row.
//
// Input data. Every rank's input is a vector of elements drawn by
// tests/common/reference.h's fill_random, cut into blocks of kGenBlock
// elements; block b of rank r's input for iteration i of a row of `bytes`
// bytes is seeded from (r, i, bytes, b). So any rank can regenerate any part
// of any other rank's input, and the check works chunk by chunk in bounded
// memory however large the row is.
#include "bench.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "common/reference.h"

namespace tutti_bench {

using tutti::DataType;
using tutti::ReduceOpKind;

namespace {

constexpr std::size_t kGenBlock = 4096;     // elements per seeded block
constexpr std::size_t kCheckChunk = 65536;  // elements checked at a time

std::uint64_t mix(std::uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

std::uint64_t block_seed(int rank, std::uint64_t iter, std::size_t bytes, std::size_t block) {
  std::uint64_t h = mix(0x7475747469ull ^ static_cast<std::uint64_t>(rank));
  h = mix(h ^ iter);
  h = mix(h ^ bytes);
  return mix(h ^ block);
}

// Output poison: bytes alternate 0x00 / 0xa5, so that a stale output is
// neither all false nor all true for bool, and no plausible value elsewhere.
void poison(char* p, std::size_t bytes) {
  for (std::size_t i = 0; i < bytes; ++i) p[i] = static_cast<char>((i & 1) ? 0xa5 : 0x00);
}

}  // namespace

const std::vector<CollInfo>& collectives() {
  //                                  name              coll                 reduces rooted blocked inplace
  static const std::vector<CollInfo> list = {
      {"all_reduce", Coll::AllReduce, true, false, false, true},
      {"broadcast", Coll::Broadcast, false, true, false, true},
      {"reduce", Coll::Reduce, true, true, false, true},
      {"all_gather", Coll::AllGather, false, false, true, true},
      {"gather", Coll::Gather, false, true, true, true},
      {"scatter", Coll::Scatter, false, true, true, true},
      {"reduce_scatter", Coll::ReduceScatter, true, false, true, true},
      {"all_to_all", Coll::AllToAll, false, false, true, false},
      {"barrier", Coll::Barrier, false, false, false, true},
      {"sendrecv", Coll::SendRecv, false, false, false, false},
  };
  return list;
}

const CollInfo* find_collective(const std::string& name) {
  for (const CollInfo& c : collectives())
    if (name == c.name) return &c;
  return nullptr;
}

double bus_factor(Coll c, int n) {
  const double dn = n;
  switch (c) {
    case Coll::AllReduce:
      return 2.0 * (dn - 1) / dn;
    case Coll::AllGather:
    case Coll::ReduceScatter:
    case Coll::AllToAll:
    case Coll::Gather:
    case Coll::Scatter:
      return (dn - 1) / dn;
    case Coll::Broadcast:
    case Coll::Reduce:
    case Coll::SendRecv:
    case Coll::Barrier:
      return 1.0;
  }
  return 1.0;
}

bool make_shape(Coll c, std::size_t requested, DataType dtype, int nranks, Shape* out) {
  const std::size_t es = tutti::dtype_size(dtype);
  Shape s;
  if (c == Coll::Barrier) {
    *out = s;
    return true;
  }
  const CollInfo* info = nullptr;
  for (const CollInfo& ci : collectives())
    if (ci.coll == c) info = &ci;
  if (info->blocked) {
    const std::size_t unit = es * static_cast<std::size_t>(nranks);
    s.block = requested / unit;
    s.count = s.block * static_cast<std::size_t>(nranks);
  } else {
    s.count = requested / es;
    s.block = s.count;
  }
  s.bytes = s.count * es;
  *out = s;
  return s.count > 0;
}

Case::Case(tutti::Communicator& comm, const Options& opt, const Shape& shape, Arena& arena)
    : comm_(comm),
      opt_(opt),
      shape_(shape),
      arena_(arena),
      rank_(comm.rank()),
      n_(comm.size()),
      es_(tutti::dtype_size(opt.dtype)),
      for_product_(opt.coll->reduces && opt.op.kind == ReduceOpKind::Product) {
  const std::size_t count = shape.count, block = shape.block, es = es_;
  const std::size_t r = static_cast<std::size_t>(rank_);
  auto grow = [&arena](std::vector<char>& v, std::size_t elems, std::size_t elem_size) {
    if (arena.shared_a) {
      if (elems * elem_size > arena.shared_bytes) throw std::runtime_error("shared buffers too small");
      return &v == &arena.a ? arena.shared_a : arena.shared_b;
    }
    if (v.size() < elems * elem_size) v.resize(elems * elem_size);
    return v.data();
  };
  switch (opt.coll->coll) {
    case Coll::AllReduce:
    case Coll::Reduce:
      send_len_ = recv_len_ = count;
      send_ = grow(arena.a, count, es);
      recv_ = opt.inplace ? send_ : grow(arena.b, count, es);
      break;
    case Coll::Broadcast:
      send_len_ = recv_len_ = count;
      send_ = recv_ = grow(arena.a, count, es);
      writes_input_ = rank_ == opt.root;
      break;
    case Coll::AllGather:
    case Coll::Gather:
      recv_len_ = count;
      send_len_ = block;
      recv_ = grow(arena.a, count, es);
      send_ = opt.inplace ? recv_ + r * block * es : grow(arena.b, block, es);
      break;
    case Coll::Scatter:
    case Coll::ReduceScatter:
      send_len_ = count;
      recv_len_ = block;
      send_ = grow(arena.a, count, es);
      recv_ = opt.inplace ? send_ + r * block * es : grow(arena.b, block, es);
      if (opt.coll->coll == Coll::Scatter) writes_input_ = rank_ == opt.root;
      break;
    case Coll::AllToAll:
    case Coll::SendRecv:
      send_len_ = recv_len_ = count;
      send_ = grow(arena.a, count, es);
      recv_ = grow(arena.b, count, es);
      break;
    case Coll::Barrier:
      break;
  }
}

void Case::generate(char* dst, int rank, std::uint64_t iter, std::size_t off, std::size_t m) {
  const std::size_t end = off + m;
  if (arena_.scratch.size() < kGenBlock * es_) arena_.scratch.resize(kGenBlock * es_);
  char* scratch = arena_.scratch.data();
  for (std::size_t b = off / kGenBlock; b * kGenBlock < end; ++b) {
    const std::size_t bs = b * kGenBlock, be = bs + kGenBlock;
    const std::size_t lo = std::max(off, bs), hi = std::min(end, be);
    const std::uint64_t seed = block_seed(rank, iter, shape_.bytes, b);
    if (lo == bs && hi == be) {
      tutti::testing::fill_random(dst + (lo - off) * es_, kGenBlock, opt_.dtype, seed, for_product_);
    } else {
      tutti::testing::fill_random(scratch, kGenBlock, opt_.dtype, seed, for_product_);
      std::memcpy(dst + (lo - off) * es_, scratch + (lo - bs) * es_, (hi - lo) * es_);
    }
  }
}

void Case::fill(std::uint64_t iter) {
  if (recv_len_ > 0) poison(recv_, recv_len_ * es_);
  if (writes_input_ && send_len_ > 0) generate(send_, rank_, iter, 0, send_len_);
}

void Case::run() {
  const DataType dt = opt_.dtype;
  const std::size_t count = shape_.count, block = shape_.block;
  const void* s = send_;
  void* r = recv_;
  switch (opt_.coll->coll) {
    case Coll::AllReduce:
      comm_.all_reduce(s, r, count, dt, opt_.op);
      break;
    case Coll::Broadcast:
      comm_.broadcast(r, count, dt, opt_.root);
      break;
    case Coll::Reduce:
      comm_.reduce(s, r, count, dt, opt_.op, opt_.root);
      break;
    case Coll::AllGather:
      comm_.all_gather(s, r, block, dt);
      break;
    case Coll::Gather:
      comm_.gather(s, r, block, dt, opt_.root);
      break;
    case Coll::Scatter:
      comm_.scatter(s, r, block, dt, opt_.root);
      break;
    case Coll::ReduceScatter:
      comm_.reduce_scatter(s, r, block, dt, opt_.op);
      break;
    case Coll::AllToAll:
      comm_.all_to_all(s, r, block, dt);
      break;
    case Coll::Barrier:
      comm_.barrier();
      break;
    case Coll::SendRecv: {
      const int next = (rank_ + 1) % n_, prev = (rank_ - 1 + n_) % n_;
      tutti::Work ws = comm_.isend(s, count, dt, next);
      tutti::Work wr = comm_.irecv(r, count, dt, prev);
      ws.wait();
      wr.wait();
      break;
    }
  }
}

std::vector<Case::Segment> Case::expected_layout() const {
  const std::size_t count = shape_.count, block = shape_.block;
  const std::size_t r = static_cast<std::size_t>(rank_);
  const bool is_root = rank_ == opt_.root;
  std::vector<Segment> out;
  switch (opt_.coll->coll) {
    case Coll::AllReduce:
      out.push_back({0, -1, 0, count});
      break;
    case Coll::Reduce:
      if (is_root) out.push_back({0, -1, 0, count});
      break;
    case Coll::ReduceScatter:
      out.push_back({0, -1, r * block, block});
      break;
    case Coll::Broadcast:
      out.push_back({0, opt_.root, 0, count});
      break;
    case Coll::AllGather:
    case Coll::Gather:
      if (opt_.coll->coll == Coll::Gather && !is_root) break;
      for (int b = 0; b < n_; ++b) out.push_back({static_cast<std::size_t>(b) * block, b, 0, block});
      break;
    case Coll::Scatter:
      out.push_back({0, opt_.root, r * block, block});
      break;
    case Coll::AllToAll:
      for (int b = 0; b < n_; ++b) out.push_back({static_cast<std::size_t>(b) * block, b, r * block, block});
      break;
    case Coll::SendRecv:
      out.push_back({0, (rank_ - 1 + n_) % n_, 0, count});
      break;
    case Coll::Barrier:
      break;
  }
  return out;
}

std::uint64_t Case::check(std::uint64_t iter, std::string* first) {
  using namespace tutti::testing;
  const std::size_t es = es_;
  const DataType dt = opt_.dtype;
  std::uint64_t wrong = 0;
  std::vector<char> expected(kCheckChunk * es);
  std::vector<char> inputs;
  std::vector<double> magnitude;
  auto note = [&](std::size_t index, const std::string& what) {
    if (first != nullptr && first->empty()) *first = "output element " + std::to_string(index) + what;
  };
  for (const Segment& seg : expected_layout()) {
    for (std::size_t k = 0; k < seg.len; k += kCheckChunk) {
      const std::size_t m = std::min(kCheckChunk, seg.len - k);
      const char* got = recv_ + (seg.out_off + k) * es;
      if (seg.src >= 0) {  // data movement: bit-exact copies of rank src's input
        generate(expected.data(), seg.src, iter, seg.src_off + k, m);
        if (std::memcmp(got, expected.data(), m * es) == 0) continue;
        for (std::size_t i = 0; i < m; ++i) {
          if (std::memcmp(got + i * es, expected.data() + i * es, es) == 0) continue;
          ++wrong;
          note(seg.out_off + k + i, ": got " + format_element(got, i, dt) + ", expected " +
                                        format_element(expected.data(), i, dt) + " (from rank " +
                                        std::to_string(seg.src) + ")");
        }
        continue;
      }
      // Reduction over every rank's input.
      inputs.resize(static_cast<std::size_t>(n_) * kCheckChunk * es);
      magnitude.resize(kCheckChunk);
      std::vector<const void*> in(static_cast<std::size_t>(n_));
      for (int s = 0; s < n_; ++s) {
        char* p = inputs.data() + static_cast<std::size_t>(s) * kCheckChunk * es;
        generate(p, s, iter, seg.src_off + k, m);
        in[static_cast<std::size_t>(s)] = p;
      }
      reference_reduce(expected.data(), in, m, dt, opt_.op);
      reference_magnitude(magnitude.data(), in, m, dt, opt_.op);
      if (compare(got, expected.data(), m, dt, opt_.op, n_, nullptr, magnitude.data())) continue;
      for (std::size_t i = 0; i < m; ++i) {
        std::string why;
        if (compare(got + i * es, expected.data() + i * es, 1, dt, opt_.op, n_, &why, magnitude.data() + i)) continue;
        ++wrong;
        // compare() describes element 0 of a 1-element call: keep the rest.
        const std::string prefix = "element 0 of 1";
        if (why.compare(0, prefix.size(), prefix) == 0) why.erase(0, prefix.size());
        note(seg.out_off + k + i, why);
      }
    }
  }
  return wrong;
}

}  // namespace tutti_bench
