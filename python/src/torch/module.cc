// tutti.torch._C: the factory torch.distributed calls for backend "tutti".
#include <pybind11/chrono.h>
#include <pybind11/pybind11.h>
#include <torch/csrc/utils/pybind.h>

#include "process_group.h"

namespace py = pybind11;

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
      "work_exception",
      [](const c10::intrusive_ptr<c10d::Work>& work) -> py::object {
        std::exception_ptr e = work->exception();
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
      },
      py::arg("work"));
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
