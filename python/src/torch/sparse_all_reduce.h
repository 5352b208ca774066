#pragma once
// all_reduce of sparse COO tensors (sparse embedding gradients), as
// ProcessGroupGloo offers it: every rank ends with the coalesced sum (or
// average) of every rank's tensor.

#include <ATen/ATen.h>

#include "tutti/tutti.h"

namespace tutti_torch {

// Blocking, on the calling thread. `input`: a sparse COO tensor of the same
// sizes, sparse and dense dimensions and dtype on every rank (checked: a rank
// that differs fails every rank with Mismatch, naming both); `values`: its
// values' tutti type. Returns a new coalesced sparse tensor.
//
// Steps: all_gather of a fixed header (nnz, dimensions, dtype), then of the
// sizes; then every rank's indices (nnz x sparse_dim, int64) and values
// (nnz x dense elements) by an all_to_all_v in which every rank sends its
// own block to all; the union is coalesced (duplicates summed) locally.
at::Tensor sparse_all_reduce(tutti::Communicator& comm, const at::Tensor& input, tutti::DataType values, bool average);

}  // namespace tutti_torch
