#include "sparse_all_reduce.h"

#include <string>
#include <vector>

namespace tutti_torch {

namespace {

std::string sizes_string(const std::int64_t* sizes, std::int64_t dim) {
  std::string s = "[";
  for (std::int64_t i = 0; i < dim; ++i) s.append(i ? ", " : "").append(std::to_string(sizes[i]));
  return s + "]";
}

// Every rank's block of `mine` (count elements of type dt, `counts[r]` from
// rank r) into `out`, in rank order.
void all_gather_v(tutti::Communicator& comm, const void* mine, std::size_t count, void* out,
                  const std::vector<std::size_t>& counts, tutti::DataType dt) {
  const std::size_t n = counts.size();
  std::vector<std::size_t> send_counts(n, count), send_displs(n, 0), recv_displs(n, 0);
  for (std::size_t r = 1; r < n; ++r) recv_displs[r] = recv_displs[r - 1] + counts[r - 1];
  comm.all_to_all_v(mine, send_counts, send_displs, out, counts, recv_displs, dt);
}

}  // namespace

at::Tensor sparse_all_reduce(tutti::Communicator& comm, const at::Tensor& input, tutti::DataType values, bool average) {
  using tutti::DataType;
  const int n = comm.size(), me = comm.rank();
  at::Tensor in = input.coalesce();
  const std::int64_t nnz = in._nnz();
  // Header: nnz, sparse dims, dense dims, dims, dtype.
  constexpr int kHeader = 5;
  std::vector<std::int64_t> head = {nnz, in.sparse_dim(), in.dense_dim(), in.dim(),
                                    static_cast<std::int64_t>(in.scalar_type())};
  std::vector<std::int64_t> heads(static_cast<std::size_t>(kHeader) * n);
  comm.all_gather(head.data(), heads.data(), kHeader, DataType::Int64);
  auto mismatch = [&](int r, const std::string& what, const std::string& mine, const std::string& theirs) {
    throw tutti::Error(tutti::ErrorKind::Mismatch, "rank " + std::to_string(me) + ": sparse all_reduce: rank " +
                                                       std::to_string(r) + "'s tensor has " + what + " " + theirs +
                                                       ", this rank's " + mine);
  };
  for (int r = 0; r < n; ++r) {
    const std::int64_t* h = &heads[static_cast<std::size_t>(kHeader) * r];
    if (h[1] != head[1] || h[2] != head[2] || h[3] != head[3])
      mismatch(r, "sparse/dense/all dimensions",
               std::to_string(head[1]) + "/" + std::to_string(head[2]) + "/" + std::to_string(head[3]),
               std::to_string(h[1]) + "/" + std::to_string(h[2]) + "/" + std::to_string(h[3]));
    if (h[4] != head[4])
      mismatch(r, "dtype", c10::toString(in.scalar_type()), c10::toString(static_cast<at::ScalarType>(h[4])));
  }
  // Every rank agrees on the dimensions: the sizes have one length.
  const std::int64_t dim = in.dim();
  std::vector<std::int64_t> sizes(in.sizes().begin(), in.sizes().end());
  std::vector<std::int64_t> all_sizes(static_cast<std::size_t>(dim) * n);
  if (dim > 0) comm.all_gather(sizes.data(), all_sizes.data(), static_cast<std::size_t>(dim), DataType::Int64);
  for (int r = 0; r < n; ++r) {
    const std::int64_t* s = &all_sizes[static_cast<std::size_t>(dim) * r];
    if (!std::equal(sizes.begin(), sizes.end(), s))
      mismatch(r, "sizes", sizes_string(sizes.data(), dim), sizes_string(s, dim));
  }

  const std::int64_t sparse_dim = in.sparse_dim();
  std::int64_t row = 1;  // elements of one value (the dense dimensions)
  for (std::int64_t d = sparse_dim; d < dim; ++d) row *= sizes[static_cast<std::size_t>(d)];
  std::int64_t total = 0;
  std::vector<std::size_t> index_counts(n), value_counts(n);
  for (int r = 0; r < n; ++r) {
    const std::int64_t k = heads[static_cast<std::size_t>(kHeader) * r];
    total += k;
    index_counts[r] = static_cast<std::size_t>(k * sparse_dim);
    value_counts[r] = static_cast<std::size_t>(k * row);
  }
  // Indices travel as nnz x sparse_dim rows, so that the blocks concatenate.
  at::Tensor my_index = in._indices().t().contiguous();
  at::Tensor my_values = in._values().contiguous();
  at::Tensor all_index = at::empty({total, sparse_dim}, at::kLong);
  std::vector<std::int64_t> value_shape = {total};
  for (std::int64_t d = sparse_dim; d < dim; ++d) value_shape.push_back(sizes[static_cast<std::size_t>(d)]);
  at::Tensor all_values = at::empty(value_shape, my_values.options());
  all_gather_v(comm, my_index.data_ptr(), static_cast<std::size_t>(nnz * sparse_dim), all_index.data_ptr(),
               index_counts, DataType::Int64);
  all_gather_v(comm, my_values.data_ptr(), static_cast<std::size_t>(nnz * row), all_values.data_ptr(), value_counts,
               values);
  at::Tensor sum = at::sparse_coo_tensor(all_index.t(), all_values, sizes, in.options()).coalesce();
  if (!average) return sum;
  at::Tensor v = sum._values();
  at::Tensor avg =
      at::isFloatingType(v.scalar_type()) || at::isComplexType(v.scalar_type()) ? v / n : at::div(v, n, "trunc");
  return at::sparse_coo_tensor(sum._indices(), avg, sizes, in.options())._coalesced_(true);
}

}  // namespace tutti_torch
