// tutti.torch._C: the backends torch.distributed makes for "tutti", and what
// tutti offers on them beyond torch's Backend API.
#include <pybind11/chrono.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/utils/pybind.h>

#include <algorithm>

#include "../interrupt.h"
#include "process_group.h"
#include "tensors.h"

namespace py = pybind11;

namespace {

using BackendPtr = c10::intrusive_ptr<c10d::Backend>;

// An error as a Python exception object (tutti.Error subclasses for tutti's
// errors), or None.
py::object exception_object(std::exception_ptr e) {
  if (!e) return py::none();
  try {
    std::rethrow_exception(e);
  } catch (const tutti::Error& err) {
    py::object cls = py::module_::import("tutti").attr("error_classes")[tutti::error_kind_name(err.kind())];
    py::object exc = cls(py::str(err.what()));
    exc.attr("kind") = py::str(tutti::error_kind_name(err.kind()));
    exc.attr("message") = py::str(err.message());
    return exc;
  } catch (const std::exception& err) {
    return py::reinterpret_borrow<py::object>(PyExc_RuntimeError)(py::str(err.what()));
  }
}

tutti_torch::ProcessGroupTutti& tutti_backend(const BackendPtr& b) {
  auto* t = dynamic_cast<tutti_torch::ProcessGroupTutti*>(b.get());
  if (!t) throw py::type_error("not a tutti backend (backend " + b->getBackendName() + ")");
  return *t;
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "tutti as a torch.distributed backend (ProcessGroupTutti, a c10d::Backend)";
  tutti_python::interrupt::setup();
  m.def(
      "create_backend",
      [](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, std::chrono::milliseconds timeout,
         const std::string& group_name) -> BackendPtr {
        return c10::make_intrusive<tutti_torch::ProcessGroupTutti>(store, rank, size, timeout, group_name);
      },
      py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"), py::arg("group_name"),
      py::call_guard<py::gil_scoped_release>(),
      "A backend for `size` ranks that meet through `store` (torch's c10d store of the group)");
  m.def(
      "derive_backend",
      [](const BackendPtr& parent, const std::vector<int>& ranks, std::chrono::milliseconds timeout,
         const std::string& group_name) -> BackendPtr {
        return tutti_backend(parent).derive(ranks, timeout, group_name);
      },
      py::arg("parent"), py::arg("ranks"), py::arg("timeout"), py::arg("group_name"),
      py::call_guard<py::gil_scoped_release>(),
      "A backend of the members `ranks` of `parent` (its ranks, in the group's order), made by the members alone "
      "without the store (None where this rank is not a member)");
  m.def(
      "is_tutti", [](const BackendPtr& b) { return dynamic_cast<tutti_torch::ProcessGroupTutti*>(b.get()) != nullptr; },
      py::arg("backend"));
  m.def(
      "abort", [](const BackendPtr& b, const std::string& reason) { tutti_backend(b).abort(reason); },
      py::arg("backend"), py::arg("reason") = "abort() called", py::call_guard<py::gil_scoped_release>(),
      "Fails every pending and later operation of a tutti backend (safe from any thread)");
  m.def(
      "error", [](const BackendPtr& b) { return exception_object(tutti_backend(b).error()); }, py::arg("backend"),
      "The error a tutti backend failed with (an exception object), or None");
  m.def(
      "failed_ranks",
      [](const BackendPtr& b) {
        tutti::Communicator c = tutti_backend(b).communicator();
        return c.valid() ? c.failed_ranks() : std::vector<int>{};
      },
      py::arg("backend"), "The members of a tutti backend known lost, in its numbering");
  m.def(
      "shrink_alive",
      [](const BackendPtr& b) {
        auto& g = tutti_backend(b);
        c10::intrusive_ptr<tutti_torch::ProcessGroupTutti> s;
        {
          py::gil_scoped_release r;
          s = g.shrink_alive();
        }
        // The survivors, numbered as in the old group.
        const std::vector<int> before = g.communicator().world_ranks();
        std::vector<int> members;
        for (int w : s->communicator().world_ranks())
          members.push_back(static_cast<int>(std::find(before.begin(), before.end(), w) - before.begin()));
        return py::make_tuple(BackendPtr(s), members);
      },
      py::arg("backend"), "A tutti backend of the members of this one still alive, and their ranks in this one");
  m.def(
      "empty_shared",
      [](const BackendPtr& b, const std::vector<std::int64_t>& sizes, py::object dtype) -> at::Tensor {
        if (!THPDtype_Check(dtype.ptr())) throw py::type_error("dtype must be a torch.dtype");
        const at::ScalarType type = reinterpret_cast<THPDtype*>(dtype.ptr())->scalar_type;
        std::int64_t count = 1;
        for (std::int64_t d : sizes) {
          if (d < 0) throw py::value_error("tutti.torch.empty: negative dimension " + std::to_string(d));
          count *= d;
        }
        const std::size_t bytes = static_cast<std::size_t>(count) * c10::elementSize(type);
        std::shared_ptr<void> mem;
        {
          py::gil_scoped_release r;
          tutti::Communicator c = tutti_backend(b).communicator();
          if (!c.valid()) throw std::runtime_error("tutti.torch.empty: the group's communicator is gone");
          mem = c.alloc_shared_owned(bytes);
        }
        void* data = mem.get();
        return at::from_blob(
            data, sizes, [keep = std::move(mem)](void*) mutable { keep.reset(); },
            at::TensorOptions().dtype(type).device(at::kCPU));
      },
      py::arg("backend"), py::arg("sizes"), py::arg("dtype"),
      "A CPU tensor in memory every member of the backend's group on this host maps (collective)");
  m.def(
      "all_reduce_",
      [](const BackendPtr& b, at::Tensor& t, const c10d::ReduceOp& op) -> at::Tensor& {
        const char* name = "all_reduce_";
        auto& g = tutti_backend(b);
        tutti_torch::check_tensor(t, name, "the tensor");
        if (!t.is_contiguous()) tutti_torch::invalid(name, "the tensor must be contiguous");
        const tutti::DataType dt = tutti_torch::dtype_of(t, name);
        const tutti::ReduceOp rop = tutti_torch::reduce_op(op, name);
        tutti_torch::check_op(rop, dt, name);
        void* p = t.data_ptr();
        const std::size_t n = tutti_torch::count_of(t);
        std::exception_ptr failed;
        {
          py::gil_scoped_release r;
          try {
            tutti::Communicator c = g.communicator();
            if (!c.valid())
              throw tutti::Error(tutti::ErrorKind::Aborted, std::string(name) + ": the group was shut down");
            g.follow_determinism(c);
            c.all_reduce(p, p, n, dt, rop);
          } catch (...) {
            failed = std::current_exception();
          }
        }
        if (failed) {
          py::object e = exception_object(failed);
          PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(e.ptr())), e.ptr());
          throw py::error_already_set();
        }
        return t;
      },
      py::arg("backend"), py::arg("tensor"), py::arg("op"),
      "all_reduce of a contiguous CPU tensor in place, blocking, without torch.distributed's dispatch");
  m.def(
      "trace_json",
      [](const BackendPtr& b) {
        tutti::Communicator c = tutti_backend(b).communicator();
        return c.valid() ? c.trace_json() : std::string("{}");
      },
      py::arg("backend"), "The flight recorder of a tutti backend's communicator, as JSON");
  m.def(
      "inline_bytes", [](const BackendPtr& b) { return tutti_backend(b).inline_bytes(); }, py::arg("backend"),
      "Payload size up to which a tutti backend runs operations in the calling thread");
}
