// The coalesced forms of ProcessGroupTutti: the lists of allreduce_coalesced
// and allgather_coalesced, the tensor forms torch's coalescing manager sends
// (allgather_into_tensor_coalesced, reduce_scatter_tensor_coalesced), each
// one collective per dtype over flattened tensors; and start/endCoalescing.
#include <ATen/ATen.h>

#include "process_group.h"
#include "run.h"
#include "tensors.h"

namespace tutti_torch {

using c10d::OpType;
using tutti::DataType;

namespace {
// The two ways run() takes a coalesced call: each part in turn with
// `one(c, part)` (blocking), or every part started with `start(c, part)`.
template <class One, class Start>
auto each_part(const std::vector<Part>& parts, One one, Start start) {
  auto blocking = [&parts, one](tutti::Communicator& c) {
    for (const Part& x : parts) one(c, x);
  };
  auto async = [&parts, start](tutti::Communicator& c) {
    std::vector<tutti::Work> ws;
    for (const Part& x : parts) ws.push_back(start(c, x));
    return ws;
  };
  return std::pair{blocking, async};
}
}  // namespace

c10::intrusive_ptr<c10d::Work> ProcessGroupTutti::coalesce(c10::intrusive_ptr<WorkTutti> w) {
  std::lock_guard<std::mutex> g(mu_);
  if (coalescing_) coalesced_.push_back(w);
  return w;
}

void ProcessGroupTutti::startCoalescing() {
  std::lock_guard<std::mutex> g(mu_);
  if (coalescing_) invalid("startCoalescing", "called twice without endCoalescing between");
  coalescing_ = true;
  coalesced_.clear();
}

c10::intrusive_ptr<c10d::Work> ProcessGroupTutti::endCoalescing() {
  std::vector<c10::intrusive_ptr<WorkTutti>> parts;
  {
    std::lock_guard<std::mutex> g(mu_);
    if (!coalescing_) invalid("endCoalescing", "called without startCoalescing");
    coalescing_ = false;
    parts.swap(coalesced_);
  }
  std::vector<at::Tensor> outputs;
  for (auto& p : parts)
    for (auto& t : p->outputs_) outputs.push_back(t);
  auto w = c10::make_intrusive<WorkTutti>(rank_, OpType::COALESCED, nullptr, std::vector<at::Tensor>{},
                                          std::move(outputs), std::vector<at::Tensor>{}, nullptr, std::nullopt,
                                          seq_.load(std::memory_order_relaxed));
  w->parts_ = std::move(parts);
  w->watcher = watcher_;
  w->on_abort = abort_hook();
  w->poll();
  return w;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupTutti::allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                                      const c10d::AllreduceCoalescedOptions& opts) {
  const char* op = "allreduce_coalesced";
  if (tensors.empty()) invalid(op, "the tensor list is empty");
  const tutti::ReduceOp rop = reduce_op(opts.reduceOp, op);
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    check_tensor(tensors[i], op, "tensor " + std::to_string(i));
    check_op(rop, dtype_of(tensors[i], op), op);
  }
  // Per dtype: the tensors flattened into one buffer, reduced in place.
  Stage st;
  std::vector<Part> parts;
  std::size_t bytes = 0;
  for (auto& [type, idx] : by_dtype(tensors)) {
    std::vector<at::Tensor> g;
    for (auto j : idx) g.push_back(tensors[j]);
    at::Tensor flat;
    if (g.size() == 1 && g[0].is_contiguous()) {
      flat = st.inout(g[0]);
    } else {
      flat = st.flat_in(g);
      st.flat_back(flat, 0, g);
    }
    parts.push_back({flat.data_ptr(), flat.data_ptr(), count_of(flat), dtype_of(flat, op)});
    bytes += bytes_of(flat);
  }
  auto [blocking, async] = each_part(
      parts, [&](tutti::Communicator& c, const Part& x) { c.all_reduce(x.s, x.r, x.n, x.dt, rop); },
      [&](tutti::Communicator& c, const Part& x) { return c.iall_reduce(x.s, x.r, x.n, x.dt, rop); });
  return run(OpType::ALLREDUCE_COALESCED, tensors, bytes, opts.timeout, blocking, async, tensors, std::move(st.keep),
             st.after());
}

c10::intrusive_ptr<c10d::Work> ProcessGroupTutti::allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                                      std::vector<at::Tensor>& inputs,
                                                                      const c10d::AllgatherOptions& opts) {
  const char* op = "allgather_coalesced";
  if (inputs.empty()) invalid(op, "the input list is empty");
  if (static_cast<int>(outputs.size()) != size_)
    invalid(op,
            "expects one output list per rank (" + std::to_string(size_) + "), got " + std::to_string(outputs.size()));
  for (std::size_t j = 0; j < inputs.size(); ++j) {
    check_tensor(inputs[j], op, "input " + std::to_string(j));
    dtype_of(inputs[j], op);
  }
  for (std::size_t r = 0; r < outputs.size(); ++r) {
    if (outputs[r].size() != inputs.size())
      invalid(op, "output list " + std::to_string(r) + " has " + std::to_string(outputs[r].size()) +
                      " tensors, the input list " + std::to_string(inputs.size()));
    for (std::size_t j = 0; j < inputs.size(); ++j) {
      const std::string what = "output " + std::to_string(r) + "/" + std::to_string(j);
      check_tensor(outputs[r][j], op, what);
      same_kind(inputs[j], outputs[r][j], op, what);
      same_numel(count_of(inputs[j]), outputs[r][j], op, what);
    }
  }
  std::vector<at::Tensor> result;
  for (auto& list : outputs)
    for (auto& t : list) result.push_back(t);
  return all_gather_flat(
      OpType::ALLGATHER_COALESCED, inputs, [&](int r, std::size_t j) { return outputs[r][j]; }, {}, std::move(result),
      opts.timeout);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupTutti::allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                                  std::vector<at::Tensor>& inputs,
                                                                                  const c10d::AllgatherOptions& opts) {
  const char* op = "allgather_into_tensor_coalesced";
  if (inputs.empty()) invalid(op, "the input list is empty");
  if (outputs.size() != inputs.size())
    invalid(op, "has " + std::to_string(outputs.size()) + " outputs for " + std::to_string(inputs.size()) + " inputs");
  for (std::size_t j = 0; j < inputs.size(); ++j) {
    check_tensor(inputs[j], op, "input " + std::to_string(j));
    check_tensor(outputs[j], op, "output " + std::to_string(j));
    dtype_of(inputs[j], op);
    same_kind(inputs[j], outputs[j], op, "output " + std::to_string(j));
    same_numel(count_of(inputs[j]) * size_, outputs[j], op, "output " + std::to_string(j) + " (group size x input)");
  }
  // Outputs that are not contiguous get their blocks in a stand-in, copied
  // to them last.
  std::vector<std::pair<at::Tensor, at::Tensor>> staged;
  std::vector<at::Tensor> flat_out(outputs.size());
  for (std::size_t j = 0; j < outputs.size(); ++j) {
    if (outputs[j].is_contiguous()) {
      flat_out[j] = outputs[j].view({-1});
    } else {
      flat_out[j] = at::empty({outputs[j].numel()}, outputs[j].options().memory_format(std::nullopt));
      staged.emplace_back(outputs[j], flat_out[j].view(outputs[j].sizes()));
    }
  }
  return all_gather_flat(
      OpType::ALLGATHER_COALESCED, inputs,
      [&](int r, std::size_t j) { return flat_out[j].narrow(0, r * inputs[j].numel(), inputs[j].numel()); },
      std::move(staged), outputs, opts.timeout);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupTutti::all_gather_flat(
    OpType type, std::vector<at::Tensor>& inputs, const std::function<at::Tensor(int, std::size_t)>& dst,
    std::vector<std::pair<at::Tensor, at::Tensor>> last, std::vector<at::Tensor> outputs,
    std::chrono::milliseconds timeout) {
  Stage st;
  std::vector<Part> parts;
  std::size_t bytes = 0;
  for (auto& [dtype, idx] : by_dtype(inputs)) {
    std::vector<at::Tensor> ins;
    for (auto j : idx) ins.push_back(inputs[j]);
    at::Tensor flat = st.flat_in(ins);
    const std::int64_t m = flat.numel();
    at::Tensor out = at::empty({m * size_}, flat.options());
    st.keep.push_back(out);
    // Rank r's block of input j is at r * m + (j's offset among the dtype's).
    for (int r = 0; r < size_; ++r) {
      std::int64_t off = 0;
      for (auto j : idx) {
        const std::int64_t n = inputs[j].numel();
        at::Tensor d = dst(r, j);
        st.keep.push_back(d);
        if (n) st.back.emplace_back(d, out.narrow(0, r * m + off, n).view(d.sizes()));
        off += n;
      }
    }
    parts.push_back(
        {flat.data_ptr(), out.data_ptr(), static_cast<std::size_t>(m), dtype_of(flat, event_title(type) + 6)});
    bytes += bytes_of(out);
  }
  for (auto& b : last) {
    st.keep.push_back(b.first);
    st.back.push_back(std::move(b));
  }
  auto [blocking, async] = each_part(
      parts, [](tutti::Communicator& c, const Part& x) { c.all_gather(x.s, x.r, x.n, x.dt); },
      [](tutti::Communicator& c, const Part& x) { return c.iall_gather(x.s, x.r, x.n, x.dt); });
  return run(type, inputs, bytes, timeout, blocking, async, std::move(outputs), std::move(st.keep), st.after());
}

// Per dtype: rank r's block holds, in order, block r of every input of that
// dtype; the reduced block is copied out to the outputs.
c10::intrusive_ptr<c10d::Work> ProcessGroupTutti::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs, const c10d::ReduceScatterOptions& opts) {
  const char* op = "reduce_scatter_tensor_coalesced";
  if (inputs.empty()) invalid(op, "the input list is empty");
  if (outputs.size() != inputs.size())
    invalid(op, "has " + std::to_string(outputs.size()) + " outputs for " + std::to_string(inputs.size()) + " inputs");
  const tutti::ReduceOp rop = reduce_op(opts.reduceOp, op);
  for (std::size_t j = 0; j < inputs.size(); ++j) {
    check_tensor(inputs[j], op, "input " + std::to_string(j));
    check_tensor(outputs[j], op, "output " + std::to_string(j));
    check_op(rop, dtype_of(outputs[j], op), op);
    same_kind(outputs[j], inputs[j], op, "input " + std::to_string(j));
    same_numel(count_of(outputs[j]) * size_, inputs[j], op, "input " + std::to_string(j) + " (group size x output)");
  }
  Stage st;
  std::vector<Part> parts;
  std::size_t bytes = 0;
  for (auto& [type, idx] : by_dtype(inputs)) {
    std::int64_t m = 0;  // elements of one rank's block
    for (auto j : idx) m += outputs[j].numel();
    at::Tensor in = at::empty({m * size_}, inputs[idx[0]].options().memory_format(std::nullopt));
    at::Tensor out = at::empty({m}, in.options());
    for (int r = 0; r < size_; ++r) {
      std::int64_t off = 0;
      for (auto j : idx) {
        const std::int64_t n = outputs[j].numel();
        if (n) in.narrow(0, r * m + off, n).copy_(inputs[j].reshape({-1}).narrow(0, r * n, n));
        off += n;
      }
    }
    st.keep.push_back(in);
    st.keep.push_back(out);
    std::vector<at::Tensor> outs;
    for (auto j : idx) outs.push_back(outputs[j]);
    st.flat_back(out, 0, outs);
    parts.push_back({in.data_ptr(), out.data_ptr(), static_cast<std::size_t>(m), dtype_of(in, op)});
    bytes += bytes_of(in);
  }
  auto [blocking, async] = each_part(
      parts, [&](tutti::Communicator& c, const Part& x) { c.reduce_scatter(x.s, x.r, x.n, x.dt, rop); },
      [&](tutti::Communicator& c, const Part& x) { return c.ireduce_scatter(x.s, x.r, x.n, x.dt, rop); });
  return run(OpType::REDUCE_SCATTER_TENSOR_COALESCED, inputs, bytes, opts.timeout, blocking, async, outputs,
             std::move(st.keep), st.after());
}

}  // namespace tutti_torch
