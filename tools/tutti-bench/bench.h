#pragma once
// tutti-bench internals: the collectives it knows, the sizes of one row, and
// the buffers, the operation and the correctness check of one row.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "tutti/communicator.h"
#include "tutti/types.h"

namespace tutti_bench {

enum class Coll {
  AllReduce,
  Broadcast,
  Reduce,
  AllGather,
  Gather,
  Scatter,
  ReduceScatter,
  AllToAll,
  Barrier,
  SendRecv
};

struct CollInfo {
  const char* name;
  Coll coll;
  bool reduces;      // takes a reduction operator
  bool rooted;       // takes a root
  bool blocked;      // sizes are n equal per-rank blocks (rounded to n * dtype size)
  bool has_inplace;  // tutti has an in-place form
};

const std::vector<CollInfo>& collectives();
// Null when `name` is not a collective.
const CollInfo* find_collective(const std::string& name);
// nccl-tests' bus bandwidth factor for n ranks.
double bus_factor(Coll c, int n);

struct Options {
  const CollInfo* coll = nullptr;
  std::size_t min_bytes = 8;
  std::size_t max_bytes = std::size_t{64} << 20;
  int factor = 2;
  int iters = 20;
  int warmup = 5;
  bool check = true;
  tutti::DataType dtype = tutti::DataType::Float32;
  tutti::ReduceOp op;
  int root = 0;
  bool inplace = false;
  std::string json_path;
  // Also measure the cross-process copy bandwidth at each size (ranks 0, 1).
  bool xcopy = false;
  // Buffers from Communicator::alloc_shared instead of the heap.
  bool shared_buffers = false;
};

// The size of one row. bytes: the message size as nccl-tests defines it,
// rounded down; count: bytes / dtype size; block: the per-rank count of the
// blocked collectives (count / n), else count.
struct Shape {
  std::size_t bytes = 0;
  std::size_t count = 0;
  std::size_t block = 0;
};
// False when `requested` bytes round to nothing (the row is skipped).
bool make_shape(Coll c, std::size_t requested, tutti::DataType dtype, int nranks, Shape* out);

// The buffers and the operation of one row. Buffers grow and are kept
// between rows (Case objects share one Arena).
struct Arena {
  std::vector<char> a, b, scratch;
  // With --shared-buffers: two buffers of `shared_bytes` each from
  // Communicator::alloc_shared, used in place of a and b.
  char* shared_a = nullptr;
  char* shared_b = nullptr;
  std::size_t shared_bytes = 0;
};

class Case {
 public:
  Case(tutti::Communicator& comm, const Options& opt, const Shape& shape, Arena& arena);

  // Writes the inputs of iteration `iter` (data that depends on rank,
  // iteration and size) and poisons the outputs.
  void fill(std::uint64_t iter);
  // One operation, blocking.
  void run();
  // Number of wrong output elements on this rank after running the op on
  // fill(iter)'s inputs; the first mismatch is described in *first.
  std::uint64_t check(std::uint64_t iter, std::string* first);

 private:
  // A run of output elements: out[out_off, out_off+len) equals the input of
  // rank src (or the reduction over every rank when src < 0) at src_off.
  struct Segment {
    std::size_t out_off;
    int src;
    std::size_t src_off;
    std::size_t len;
  };
  // Elements [off, off+m) of rank `rank`'s input vector of iteration `iter`.
  void generate(char* dst, int rank, std::uint64_t iter, std::size_t off, std::size_t m);
  std::vector<Segment> expected_layout() const;

  tutti::Communicator& comm_;
  const Options& opt_;
  Shape shape_;
  Arena& arena_;
  int rank_, n_;
  std::size_t es_;
  bool for_product_;
  char* send_ = nullptr;  // this rank's input
  std::size_t send_len_ = 0;
  char* recv_ = nullptr;  // this rank's output
  std::size_t recv_len_ = 0;
  bool writes_input_ = true;  // whether this rank's input matters (false: non-roots of broadcast/scatter)
};

}  // namespace tutti_bench
