#include "algorithms/shm_collectives.h"

#include <algorithm>
#include <cstring>

#include "reduce/reduce.h"
#include "tutti/error.h"

namespace tutti::detail {
namespace {

ReduceOpKind base_kind(const ReduceOp& op) {
  return (op.kind == ReduceOpKind::Avg || op.kind == ReduceOpKind::PremulSum) ? ReduceOpKind::Sum : op.kind;
}

// Copies `count` elements of this rank's input into shared memory, scaled
// for PremulSum.
void copy_in(char* dst, const char* src, std::size_t count, DataType dtype, const ReduceOp& op) {
  if (op.kind == ReduceOpKind::PremulSum) {
    scale(dst, src, count, dtype, op.scalar);
  } else if (count) {
    std::memcpy(dst, src, count * dtype_size(dtype));
  }
}

// Where rank p's input of round k is: its inline line or its input slot.
const char* input_of(const ShmGroup& g, int p, std::uint64_t k, bool inline_data, std::size_t offset_bytes) {
  return inline_data ? g.inline_slot(p, k) : g.in_slot(p, k) + offset_bytes;
}

// out = in[0] op in[1] op ... op in[n-1], waiting for each peer's input.
void reduce_all_inputs(ShmGroup& g, std::uint64_t k, std::size_t offset_bytes, char* out, std::size_t count,
                       DataType dtype, ReduceOpKind op, bool inline_data = false) {
  const int n = g.size();
  if (count == 0) return;
  g.wait_input(0, k);
  if (n == 1) {
    std::memcpy(out, input_of(g, 0, k, inline_data, offset_bytes), count * dtype_size(dtype));
    return;
  }
  g.wait_input(1, k);
  reduce_pair(out, input_of(g, 0, k, inline_data, offset_bytes), input_of(g, 1, k, inline_data, offset_bytes), count,
              dtype, op);
  for (int p = 2; p < n; ++p) {
    g.wait_input(p, k);
    reduce_inplace(out, input_of(g, p, k, inline_data, offset_bytes), count, dtype, op);
  }
}

struct Slice {
  std::size_t lo, count;  // elements
};
Slice slice_of(std::size_t count, int n, int r) {
  std::size_t base = count / n, extra = count % n;
  std::size_t lo = r * base + std::min<std::size_t>(r, extra);
  return {lo, base + (static_cast<std::size_t>(r) < extra ? 1 : 0)};
}

// The reduction over all ranks of [off, off+count) of every input, left in
// `out` on every rank (all_reduce) or on `root` only (root >= 0).
void reduce_rounds(ShmGroup& g, const char* send, char* out, std::size_t count, DataType dtype, const ReduceOp& op,
                   int root, std::size_t one_shot_bytes) {
  const int n = g.size(), r = g.rank();
  const std::size_t es = dtype_size(dtype);
  const std::size_t per_round = std::max<std::size_t>(1, g.slot_bytes() / es);
  const ReduceOpKind kind = base_kind(op);
  const bool one_shot = count * es <= one_shot_bytes;
  for (std::size_t off = 0; off < count; off += per_round) {
    const std::size_t c = std::min(per_round, count - off);
    const bool inline_data = one_shot && c * es <= ShmGroup::kInlineBytes;
    const std::uint64_t k = g.begin_round(!inline_data);
    copy_in(inline_data ? g.inline_slot(r, k) : g.in_slot(r, k), send + off * es, c, dtype, op);
    g.publish_input(k);
    if (one_shot) {
      if (root < 0 || root == r) reduce_all_inputs(g, k, 0, out + off * es, c, dtype, kind, inline_data);
    } else {
      Slice mine = slice_of(c, n, r);
      reduce_all_inputs(g, k, mine.lo * es, g.out_slot(r, k) + mine.lo * es, mine.count, dtype, kind);
      g.publish_output(k);
      if (root < 0 || root == r) {
        for (int i = 0; i < n; ++i) {
          int p = (r + i) % n;  // start with our own slice, then the next ranks'
          Slice s = slice_of(c, n, p);
          if (p != r) g.wait_output(p, k);
          if (s.count) std::memcpy(out + (off + s.lo) * es, g.out_slot(p, k) + s.lo * es, s.count * es);
        }
      }
    }
  }
  if (op.kind == ReduceOpKind::Avg && (root < 0 || root == r)) divide_by(out, count, dtype, n);
}

// Per-destination share of a slot (scatter, reduce_scatter, all_to_all):
// a multiple of 16 bytes, so any element size divides it.
std::size_t piece_bytes(const ShmGroup& g) { return g.slot_bytes() / g.size() / 16 * 16; }

}  // namespace

void shm_all_reduce(ShmGroup& g, const void* send, void* recv, std::size_t count, DataType dtype, const ReduceOp& op,
                    std::size_t one_shot_bytes) {
  reduce_rounds(g, static_cast<const char*>(send), static_cast<char*>(recv), count, dtype, op, -1, one_shot_bytes);
}

void shm_reduce(ShmGroup& g, const void* send, void* recv, std::size_t count, DataType dtype, const ReduceOp& op,
                int root, std::size_t one_shot_bytes) {
  reduce_rounds(g, static_cast<const char*>(send), static_cast<char*>(recv), count, dtype, op, root, one_shot_bytes);
}

void shm_broadcast(ShmGroup& g, void* buf, std::size_t bytes, int root) {
  const int r = g.rank();
  char* p = static_cast<char*>(buf);
  const std::size_t S = g.slot_bytes();
  for (std::size_t off = 0; off < bytes; off += S) {
    const std::size_t c = std::min(S, bytes - off);
    const bool inline_data = c <= ShmGroup::kInlineBytes;
    const std::uint64_t k = g.begin_round(!inline_data);
    if (r == root) std::memcpy(inline_data ? g.inline_slot(r, k) : g.in_slot(r, k), p + off, c);
    g.publish_input(k);
    if (r != root) {
      g.wait_input(root, k);
      std::memcpy(p + off, inline_data ? g.inline_slot(root, k) : g.in_slot(root, k), c);
    }
  }
}

void shm_gather(ShmGroup& g, const void* send, const std::vector<char*>& out, std::size_t bytes, int root) {
  const int n = g.size(), r = g.rank();
  const char* s = static_cast<const char*>(send);
  const std::size_t S = g.slot_bytes();
  for (std::size_t off = 0; off < bytes; off += S) {
    const std::size_t c = std::min(S, bytes - off);
    const std::uint64_t k = g.begin_round();
    if (r != root) std::memcpy(g.in_slot(r, k), s + off, c);
    g.publish_input(k);
    if (r == root) {
      for (int i = 1; i < n; ++i) {
        int p = (r + i) % n;
        g.wait_input(p, k);
        std::memcpy(out[p] + off, g.in_slot(p, k), c);
      }
    }
  }
}

void shm_all_gather(ShmGroup& g, const void* send, const std::vector<char*>& out, std::size_t bytes) {
  const int n = g.size(), r = g.rank();
  const char* s = static_cast<const char*>(send);
  const std::size_t S = g.slot_bytes();
  for (std::size_t off = 0; off < bytes; off += S) {
    const std::size_t c = std::min(S, bytes - off);
    const bool inline_data = c <= ShmGroup::kInlineBytes;
    const std::uint64_t k = g.begin_round(!inline_data);
    std::memcpy(inline_data ? g.inline_slot(r, k) : g.in_slot(r, k), s + off, c);
    g.publish_input(k);
    for (int i = 1; i < n; ++i) {
      int p = (r + i) % n;
      g.wait_input(p, k);
      std::memcpy(out[p] + off, inline_data ? g.inline_slot(p, k) : g.in_slot(p, k), c);
    }
  }
}

void shm_scatter(ShmGroup& g, const std::vector<const char*>& in, void* recv, std::size_t bytes, int root) {
  const int n = g.size(), r = g.rank();
  char* out = static_cast<char*>(recv);
  const std::size_t P = piece_bytes(g);
  for (std::size_t off = 0; off < bytes; off += P) {
    const std::size_t c = std::min(P, bytes - off);
    const std::uint64_t k = g.begin_round();
    if (r == root)
      for (int p = 0; p < n; ++p)
        if (p != root) std::memcpy(g.in_slot(r, k) + p * P, in[p] + off, c);
    g.publish_input(k);
    if (r != root) {
      g.wait_input(root, k);
      std::memcpy(out + off, g.in_slot(root, k) + r * P, c);
    }
  }
}

void shm_reduce_scatter(ShmGroup& g, const std::vector<const char*>& in, void* recv, std::size_t count, DataType dtype,
                        const ReduceOp& op) {
  const int n = g.size(), r = g.rank();
  const std::size_t es = dtype_size(dtype);
  const std::size_t per = std::max<std::size_t>(1, piece_bytes(g) / es);
  const std::size_t P = per * es;
  const ReduceOpKind kind = base_kind(op);
  char* out = static_cast<char*>(recv);
  for (std::size_t off = 0; off < count; off += per) {
    const std::size_t c = std::min(per, count - off);
    const std::uint64_t k = g.begin_round();
    for (int p = 0; p < n; ++p) copy_in(g.in_slot(r, k) + p * P, in[p] + off * es, c, dtype, op);
    g.publish_input(k);
    reduce_all_inputs(g, k, r * P, out + off * es, c, dtype, kind);
  }
  if (op.kind == ReduceOpKind::Avg) divide_by(out, count, dtype, n);
}

void shm_all_to_all(ShmGroup& g, const char* send, const std::vector<std::size_t>& send_bytes,
                    const std::vector<std::size_t>& send_displs, char* recv, const std::vector<std::size_t>& recv_bytes,
                    const std::vector<std::size_t>& recv_displs, std::size_t uniform_block_bytes) {
  const int n = g.size(), r = g.rank();
  const std::size_t P = piece_bytes(g);
  if (send_bytes[r] != recv_bytes[r])
    throw Error(ErrorKind::InvalidArgument, "rank " + std::to_string(r) + ": all_to_all sends " +
                                                std::to_string(send_bytes[r]) + " bytes to itself but expects " +
                                                std::to_string(recv_bytes[r]));
  std::uint64_t k;
  std::size_t global_max = uniform_block_bytes;
  if (global_max == ~std::size_t(0)) {
    // A first round publishes every rank's largest outgoing block, so that
    // all agree on the number of rounds.
    std::size_t my_max = *std::max_element(send_bytes.begin(), send_bytes.end());
    k = g.begin_round(false);
    std::memcpy(g.inline_slot(r, k), &my_max, sizeof my_max);
    g.publish_input(k);
    global_max = 0;
    for (int p = 0; p < n; ++p) {
      g.wait_input(p, k);
      std::size_t v;
      std::memcpy(&v, g.inline_slot(p, k), sizeof v);
      global_max = std::max(global_max, v);
    }
  }
  // Small exchanges fit one control line: one inline round, pieces packed
  // at a stride of global_max bytes.
  const bool inline_data = global_max > 0 && global_max * n <= ShmGroup::kInlineBytes;
  const std::size_t stride = inline_data ? global_max : P;
  for (std::size_t off = 0; off < global_max; off += stride) {
    k = g.begin_round(!inline_data);
    char* mine = inline_data ? g.inline_slot(r, k) : g.in_slot(r, k);
    for (int p = 0; p < n; ++p) {
      if (p == r || off >= send_bytes[p]) continue;
      std::memcpy(mine + p * stride, send + send_displs[p] + off, std::min(stride, send_bytes[p] - off));
    }
    g.publish_input(k);
    for (int i = 0; i < n; ++i) {
      int p = (r + i) % n;
      if (off >= recv_bytes[p]) continue;
      const std::size_t c = std::min(stride, recv_bytes[p] - off);
      if (p == r) {
        std::memmove(recv + recv_displs[r] + off, send + send_displs[r] + off, c);
        continue;
      }
      g.wait_input(p, k);
      const char* theirs = inline_data ? g.inline_slot(p, k) : g.in_slot(p, k);
      std::memcpy(recv + recv_displs[p] + off, theirs + r * stride, c);
    }
  }
}

void shm_barrier(ShmGroup& g) {
  const std::uint64_t k = g.begin_round(false);
  g.publish_input(k);
  for (int p = 0; p < g.size(); ++p)
    if (p != g.rank()) g.wait_input(p, k);
}

}  // namespace tutti::detail
