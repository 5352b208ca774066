#pragma once
// ProcessGroupTutti::run, which every operation of the backend goes through
// (process_group.cc, coalesced.cc).
#include <type_traits>

#include "../interrupt.h"
#include "process_group.h"
#include "tensors.h"

namespace tutti_torch {

template <class Blocking, class Async>
c10::intrusive_ptr<c10d::Work> ProcessGroupTutti::run(c10d::OpType type, const std::vector<at::Tensor>& inputs,
                                                      std::size_t bytes, std::chrono::milliseconds timeout,
                                                      Blocking&& blocking, Async&& async,
                                                      std::vector<at::Tensor> outputs, std::vector<at::Tensor> keep,
                                                      std::function<void()> after) {
  // The Work exists before the operation starts: its profiler event (begun
  // by c10d::Work) spans the operation, and ends when the Work finishes.
  if constexpr (!std::is_same_v<std::decay_t<Blocking>, std::nullptr_t>) {
    if (bytes <= inline_bytes_) {
      // Runs here; finished when it returns, so nothing is kept alive.
      auto w = make_work(type, inputs, std::move(outputs), {}, std::move(after), std::chrono::milliseconds(0));
      std::exception_ptr err;
      {
        std::lock_guard<std::mutex> g(post_mu_);
        try {
          tutti::Communicator c = live(event_title(type) + 6);
          follow_determinism(c);
          TimeoutScope ts(c, timeout);
          tutti_python::interrupt::wait_in_nogil(w->on_abort, [&] { blocking(c); });
        } catch (const tutti::Error& e) {
          if (e.kind() == tutti::ErrorKind::InvalidArgument) throw;
          err = std::current_exception();
        }
      }
      if (err) {
        w->fail(err);
      } else {
        w->poll();
      }
      return coalesce(std::move(w));
    }
  }
  auto w = make_work(type, inputs, std::move(outputs), std::move(keep), std::move(after), timeout);
  {
    std::lock_guard<std::mutex> g(post_mu_);
    try {
      tutti::Communicator c = live(event_title(type) + 6);
      follow_determinism(c);
      w->works_ = async(c);
    } catch (const tutti::Error& e) {
      if (e.kind() == tutti::ErrorKind::InvalidArgument) throw;
      w->fail(std::current_exception());
    }
  }
  return coalesce(std::move(w));
}

}  // namespace tutti_torch
