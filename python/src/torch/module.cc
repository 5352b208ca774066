// tutti.torch._C: the factory torch.distributed calls for backend "tutti".
#include <pybind11/chrono.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>

#include <algorithm>

#include "process_group.h"

namespace py = pybind11;

namespace {

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

tutti_torch::ProcessGroupTutti& tutti_group(const c10::intrusive_ptr<c10d::ProcessGroup>& pg) {
  auto* t = dynamic_cast<tutti_torch::ProcessGroupTutti*>(pg.get());
  if (!t) throw py::type_error("not a tutti process group (backend " + pg->getBackendName() + ")");
  return *t;
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "tutti as a torch.distributed backend (ProcessGroupTutti)";
  m.def(
      "create_process_group",
      [](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, std::chrono::milliseconds timeout) {
        return tutti_torch::create_process_group(store, rank, size, timeout);
      },
      py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"), py::call_guard<py::gil_scoped_release>(),
      "A ProcessGroup for `size` ranks that meet through `store` (torch's c10d store of the group)");
  // torch 1.13's Work.exception() cannot convert its result (std::exception_ptr
  // has no Python type): this returns the error of a finished Work as a
  // Python exception object (tutti.Error subclasses for tutti's errors), or None.
  m.def(
      "work_exception", [](const c10::intrusive_ptr<c10d::Work>& work) { return exception_object(work->exception()); },
      py::arg("work"));
  m.def(
      "abort",
      [](const c10::intrusive_ptr<c10d::ProcessGroup>& pg, const std::string& reason) {
        tutti_group(pg).abort(reason);
      },
      py::arg("process_group"), py::arg("reason") = "abort() called", py::call_guard<py::gil_scoped_release>(),
      "Fails every pending and later operation of a tutti process group (safe from any thread)");
  m.def(
      "error",
      [](const c10::intrusive_ptr<c10d::ProcessGroup>& pg) { return exception_object(tutti_group(pg).error()); },
      py::arg("process_group"), "The error a tutti process group failed with (an exception object), or None");
  m.def(
      "failed_ranks",
      [](const c10::intrusive_ptr<c10d::ProcessGroup>& pg) { return tutti_group(pg).communicator().failed_ranks(); },
      py::arg("process_group"), "The members of a tutti process group known lost, in its numbering");
  m.def(
      "shrink_group",
      [](const c10::intrusive_ptr<c10d::ProcessGroup>& pg) {
        auto& g = tutti_group(pg);
        c10::intrusive_ptr<tutti_torch::ProcessGroupTutti> s;
        {
          py::gil_scoped_release r;
          s = g.shrink();
        }
        // The survivors, numbered as in the old group.
        const std::vector<int>& before = g.communicator().world_ranks();
        std::vector<int> members;
        for (int w : s->communicator().world_ranks())
          members.push_back(static_cast<int>(std::find(before.begin(), before.end(), w) - before.begin()));
        return py::make_tuple(c10::intrusive_ptr<c10d::ProcessGroup>(s), members);
      },
      py::arg("process_group"),
      "A tutti process group of the members of this one still alive, and their ranks in this one");
  m.def(
      "inline_bytes",
      [](const c10::intrusive_ptr<c10d::ProcessGroup>& pg) -> py::object {
        auto* t = dynamic_cast<tutti_torch::ProcessGroupTutti*>(pg.get());
        if (!t) return py::none();
        return py::int_(t->inline_bytes());
      },
      py::arg("process_group"),
      "Payload size up to which a tutti process group runs operations in the calling thread (None: not tutti)");
}
