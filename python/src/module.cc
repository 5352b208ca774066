// tutti._tutti: the C++ API for Python, on any object with the buffer
// protocol (numpy arrays, bytearray, memoryview, array.array, ...).
//
// Every call that may wait releases the GIL while tutti works. Buffers must
// be C-contiguous; their element type comes from the buffer's format unless a
// dtype= argument says otherwise (bfloat16 has no buffer format: pass uint16
// or int16 data with dtype=tutti.bfloat16).
//
// An asynchronous call returns a Work that keeps its buffers (and the Python
// objects owning them) alive until the operation completes; a Work dropped
// before completion hands them to a list of orphans, freed once the operation
// is over.
#include <pthread.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "interrupt.h"
#include "tutti/tutti.h"

namespace py = pybind11;
using namespace tutti;

namespace {

// ---- errors -------------------------------------------------------------------

// Every kind of tutti::Error, each raised as its own subclass of tutti.Error.
// A new ErrorKind needs one line here.
constexpr ErrorKind kErrorKinds[] = {
    ErrorKind::InvalidArgument, ErrorKind::Timeout,  ErrorKind::PeerLost,        ErrorKind::Mismatch,
    ErrorKind::Aborted,         ErrorKind::Internal, ErrorKind::Unauthenticated, ErrorKind::Revoked,
};

PyObject* g_error_base = nullptr;
std::vector<std::pair<ErrorKind, PyObject*>> g_error_classes;

PyObject* error_class(ErrorKind k) {
  for (auto& [kind, cls] : g_error_classes)
    if (kind == k) return cls;
  return g_error_base;
}

// The Python exception object for a tutti::Error (kind and message as attributes).
py::object make_error(const Error& e) {
  py::object cls = py::reinterpret_borrow<py::object>(error_class(e.kind()));
  py::object exc = cls(py::str(e.what()));
  exc.attr("kind") = py::str(error_kind_name(e.kind()));
  exc.attr("message") = py::str(e.message());
  return exc;
}

[[noreturn]] void invalid(const std::string& what) { throw Error(ErrorKind::InvalidArgument, what); }

// ---- buffers --------------------------------------------------------------------

std::optional<DataType> dtype_of_format(std::string f, py::ssize_t itemsize) {
  if (!f.empty() && (f[0] == '@' || f[0] == '=' || f[0] == '<')) f = f.substr(1);
  if (f == "b") return DataType::Int8;
  if (f == "B" || f == "c") return DataType::UInt8;
  if (f == "?") return DataType::Bool;
  if (f == "e") return DataType::Float16;
  if (f == "f") return DataType::Float32;
  if (f == "d") return DataType::Float64;
  if (f == "Zf") return DataType::Complex64;
  if (f == "Zd") return DataType::Complex128;
  if (f == "h" && itemsize == 2) return DataType::Int16;
  if (f == "h" || f == "i" || f == "l" || f == "q" || f == "n") {
    if (itemsize == 4) return DataType::Int32;
    if (itemsize == 8) return DataType::Int64;
  }
  if (f == "I" || f == "L" || f == "Q" || f == "N") {
    if (itemsize == 4) return DataType::UInt32;
    if (itemsize == 8) return DataType::UInt64;
  }
  return std::nullopt;
}

// Whether a buffer format holds plain numbers (one struct-module code, with
// an optional byte-order prefix), whatever their type in tutti.
bool plain_format(std::string f) {
  if (!f.empty() && (f[0] == '@' || f[0] == '=' || f[0] == '<' || f[0] == '>' || f[0] == '!')) f = f.substr(1);
  if (f.size() == 2 && f[0] == 'Z') f = f.substr(1);
  return f.size() == 1 && std::string_view("bBc?ehHiIlLqQnNfd").find(f[0]) != std::string_view::npos;
}

// One buffer held for the duration of an operation. Must be released with
// the GIL held (py::buffer_info's destructor releases the Py_buffer).
struct Buf {
  std::unique_ptr<py::buffer_info> info;
  py::object owner;
  void* ptr = nullptr;
  std::size_t count = 0;  // elements of dtype
  DataType dtype = DataType::UInt8;
  std::size_t nbytes() const { return count * dtype_size(dtype); }
};

Buf get_buf(const py::handle& obj, bool writable, std::optional<DataType> dtype, const char* name) {
  if (!PyObject_CheckBuffer(obj.ptr()))
    invalid(std::string(name) + ": a " + std::string(py::str(py::type::handle_of(obj).attr("__name__"))) +
            " does not support the buffer protocol");
  Buf b;
  b.owner = py::reinterpret_borrow<py::object>(obj);
  try {
    b.info = std::make_unique<py::buffer_info>(py::reinterpret_borrow<py::buffer>(obj).request(writable));
  } catch (py::error_already_set& e) {
    invalid(std::string(name) + ": " + (writable ? "not a writable buffer: " : "not a readable buffer: ") + e.what());
  }
  const py::buffer_info& in = *b.info;
  // C-contiguous: strides are the products of the later dimensions.
  py::ssize_t expect = in.itemsize;
  for (py::ssize_t d = in.ndim - 1; d >= 0; --d) {
    if (in.shape[d] > 1 && in.strides[d] != expect)
      invalid(std::string(name) +
              ": the buffer is not C-contiguous (make a contiguous copy, e.g. numpy.ascontiguousarray)");
    expect *= in.shape[d];
  }
  const std::size_t nbytes = static_cast<std::size_t>(in.size) * static_cast<std::size_t>(in.itemsize);
  b.ptr = in.ptr;
  // Only plain numbers: a format of objects (numpy's 'O': pointers to Python
  // objects), records or padding is never read or written as data, whatever
  // dtype= says.
  const auto own = dtype_of_format(in.format, in.itemsize);
  if (!own && !plain_format(in.format))
    invalid(std::string(name) + ": buffer format '" + in.format + "' (item size " + std::to_string(in.itemsize) +
            ") is not plain numeric data; tutti reads and writes only numbers (e.g. a numpy array of a numeric "
            "dtype)");
  if (dtype) {
    // dtype= names the elements of same-size storage (bfloat16 data in an
    // int16 or uint16 array) or of raw bytes; it never re-reads elements of
    // another size.
    if (in.itemsize != 1 && static_cast<std::size_t>(in.itemsize) != dtype_size(*dtype))
      invalid(std::string(name) + " holds " + (own ? std::string(dtype_name(*own)) : "'" + in.format + "'") +
              " elements (" + std::to_string(in.itemsize) + " bytes each), but dtype= says " + dtype_name(*dtype) +
              " (" + std::to_string(dtype_size(*dtype)) + " bytes)");
    b.dtype = *dtype;
  } else {
    if (!own)
      invalid(std::string(name) + ": buffer format '" + in.format + "' (item size " + std::to_string(in.itemsize) +
              ") has no tutti data type; pass dtype=");
    b.dtype = *own;
  }
  const std::size_t es = dtype_size(b.dtype);
  if (nbytes % es != 0)
    invalid(std::string(name) + ": " + std::to_string(nbytes) + " bytes are not a whole number of " +
            dtype_name(b.dtype) + " elements");
  b.count = nbytes / es;
  return b;
}

void same_type(const Buf& a, const Buf& b, const char* an, const char* bn) {
  if (a.dtype != b.dtype)
    invalid(std::string(an) + " holds " + dtype_name(a.dtype) + " but " + bn + " holds " + dtype_name(b.dtype));
}

void need_count(const Buf& b, std::size_t count, const char* name, const char* why) {
  if (b.count != count)
    invalid(std::string(name) + " holds " + std::to_string(b.count) + " elements, " + why + " needs " +
            std::to_string(count));
}

bool is_list(const py::handle& h) { return py::isinstance<py::list>(h) || py::isinstance<py::tuple>(h); }

// ---- Work -------------------------------------------------------------------------

struct Held {
  std::vector<Buf> bufs;
};

// Works dropped before completion: their buffers stay here until the
// operation is over. Touched with the GIL held only.
std::vector<std::pair<Work, std::shared_ptr<Held>>>* g_orphans = nullptr;

void prune_orphans() {
  if (!g_orphans) return;
  auto& v = *g_orphans;
  for (std::size_t i = 0; i < v.size();) {
    if (v[i].first.test()) {
      v[i] = std::move(v.back());
      v.pop_back();
    } else {
      ++i;
    }
  }
}

class PyWork {
 public:
  PyWork(Work w, std::shared_ptr<Held> held, Communicator comm)
      : w_(std::move(w)), held_(std::move(held)), comm_(std::move(comm)) {}
  ~PyWork() {
    if (held_ && !w_.test()) {
      if (!g_orphans) g_orphans = new std::vector<std::pair<Work, std::shared_ptr<Held>>>();
      g_orphans->emplace_back(w_, std::move(held_));
    }
  }
  PyWork(const PyWork&) = delete;
  PyWork& operator=(const PyWork&) = delete;

  bool wait(std::optional<double> timeout_s) {
    if (timeout_s && std::isnan(*timeout_s)) invalid("Work.wait: timeout is NaN");
    bool done = true;
    tutti_python::interrupt::wait_in(comm_, [&] {
      // inf, or a limit past what milliseconds hold, waits as long as None
      // does (the operation's own deadline); NaN was refused above.
      if (timeout_s && *timeout_s * 1e3 < 1e15) {
        auto ms = std::chrono::milliseconds(static_cast<std::int64_t>(std::ceil(std::max(0.0, *timeout_s) * 1e3)));
        done = w_.wait(ms);
      } else {
        w_.wait();
      }
    });
    if (done) held_.reset();
    return done;
  }
  bool test() {
    bool done = w_.test();
    if (done && w_.exception() == nullptr) held_.reset();
    return done;
  }
  py::object exception() const {
    auto e = w_.exception();
    if (!e) return py::none();
    try {
      std::rethrow_exception(e);
    } catch (const Error& err) {
      return make_error(err);
    }
  }
  int source() const { return w_.source(); }
  std::size_t bytes() const { return w_.bytes(); }

 private:
  Work w_;
  std::shared_ptr<Held> held_;
  Communicator comm_;  // what a Ctrl-C during wait() aborts
};

std::unique_ptr<PyWork> make_work(Work w, std::vector<Buf>&& bufs, const Communicator& comm) {
  prune_orphans();
  auto held = std::make_shared<Held>();
  held->bufs = std::move(bufs);
  return std::make_unique<PyWork>(std::move(w), std::move(held), comm);
}

// ---- Communicator ------------------------------------------------------------------

using OptDtype = std::optional<DataType>;

// A communicator handle for Python; point-to-point posting (the collectives are in Ops).
// Memory from Communicator::alloc_shared_owned, held while Python holds it
// (numpy.frombuffer keeps the object, so an array over it keeps it mapped).
struct SharedMemory {
  std::shared_ptr<void> mem;
  std::size_t bytes = 0;
};

struct PyComm {
  Communicator c;

  // --- point to point
  std::pair<Work, std::vector<Buf>> isend_(const py::object& buf, int dst, int tag, OptDtype dt) {
    std::vector<Buf> b;
    b.push_back(get_buf(buf, false, dt, "send buffer"));
    Work w = c.isend(b[0].ptr, b[0].count, b[0].dtype, dst, tag);
    return {std::move(w), std::move(b)};
  }
  std::pair<Work, std::vector<Buf>> irecv_(const py::object& buf, int src, int tag, OptDtype dt) {
    std::vector<Buf> b;
    b.push_back(get_buf(buf, true, dt, "receive buffer"));
    Work w = c.irecv(b[0].ptr, b[0].count, b[0].dtype, src, tag);
    return {std::move(w), std::move(b)};
  }
};

// Buffers of a list argument (gather/all_gather/scatter/reduce_scatter).
std::vector<Buf> get_list(const py::handle& lst, bool writable, OptDtype dt, const char* name, int n) {
  py::sequence seq = py::reinterpret_borrow<py::sequence>(lst);
  if (static_cast<int>(seq.size()) != n)
    invalid(std::string(name) + " has " + std::to_string(seq.size()) + " buffers, the communicator has " +
            std::to_string(n) + " ranks");
  std::vector<Buf> out;
  for (auto item : seq) out.push_back(get_buf(item, writable, dt, name));
  return out;
}

ReduceOp to_op(const py::handle& h) {
  if (py::isinstance<ReduceOp>(h)) return h.cast<ReduceOp>();
  if (py::isinstance<ReduceOpKind>(h)) return ReduceOp(h.cast<ReduceOpKind>());
  invalid("op must be a tutti.ReduceOp or tutti.ReduceOpKind, not " +
          std::string(py::str(py::type::handle_of(h).attr("__name__"))));
}

// Every operation, in one place for its blocking and async forms. `async`
// selects the i* call; the blocking form waits with the GIL released.
struct Ops {
  Communicator& c;
  bool async;

  // Blocking forms call the blocking API (inline on an idle communicator);
  // async forms call the i* API.
  template <class Blocking, class Async>
  py::object run(std::vector<Buf>&& bufs, Blocking&& b, Async&& a) {
    if (async) {
      Work w = a();
      return py::cast(make_work(std::move(w), std::move(bufs), c));
    }
    tutti_python::interrupt::wait_in(c, b);
    return py::none();
  }

  py::object broadcast(const py::object& buf, int root, OptDtype dt) {
    std::vector<Buf> v;
    v.push_back(get_buf(buf, true, dt, "buffer"));
    Buf& b = v[0];
    return run(
        std::move(v), [&] { c.broadcast(b.ptr, b.count, b.dtype, root); },
        [&] { return c.ibroadcast(b.ptr, b.count, b.dtype, root); });
  }

  py::object all_reduce(const py::object& send, const py::object& recv, const py::handle& oph, OptDtype dt) {
    ReduceOp op = to_op(oph);
    std::vector<Buf> v;
    v.push_back(get_buf(send, recv.is_none(), dt, recv.is_none() ? "buffer" : "sendbuf"));
    if (!recv.is_none()) {
      v.push_back(get_buf(recv, true, dt, "recvbuf"));
      same_type(v[0], v[1], "sendbuf", "recvbuf");
      need_count(v[1], v[0].count, "recvbuf", "all_reduce");
    }
    const void* s = v[0].ptr;
    void* r = v.back().ptr;
    std::size_t n = v[0].count;
    DataType d = v[0].dtype;
    return run(
        std::move(v), [&] { c.all_reduce(s, r, n, d, op); }, [&] { return c.iall_reduce(s, r, n, d, op); });
  }

  py::object reduce(const py::object& send, const py::object& recv, const py::handle& oph, int root, OptDtype dt) {
    ReduceOp op = to_op(oph);
    std::vector<Buf> v;
    const bool inplace = recv.is_none();
    v.push_back(get_buf(send, inplace && c.rank() == root, dt, inplace ? "buffer" : "sendbuf"));
    if (!inplace) {
      v.push_back(get_buf(recv, true, dt, "recvbuf"));
      same_type(v[0], v[1], "sendbuf", "recvbuf");
      need_count(v[1], v[0].count, "recvbuf", "reduce");
    }
    const void* s = v[0].ptr;
    void* r = inplace ? v[0].ptr : v[1].ptr;
    if (c.rank() != root && inplace) r = nullptr;
    std::size_t n = v[0].count;
    DataType d = v[0].dtype;
    return run(
        std::move(v), [&] { c.reduce(s, r, n, d, op, root); }, [&] { return c.ireduce(s, r, n, d, op, root); });
  }

  // gather(sendbuf, recvbuf, root): recvbuf on root is one buffer of
  // size*count elements or a list of size buffers; elsewhere it may be None.
  py::object gather(const py::object& send, const py::object& recv, int root, OptDtype dt) {
    std::vector<Buf> v;
    v.push_back(get_buf(send, false, dt, "sendbuf"));
    const std::size_t n = v[0].count;
    const DataType d = v[0].dtype;
    const bool at_root = c.rank() == root;
    if (root < 0 || root >= c.size())
      invalid("gather: root " + std::to_string(root) + " is not a rank of this communicator (size " +
              std::to_string(c.size()) + ")");
    if (at_root && recv.is_none()) invalid("gather: the root needs a recvbuf");
    if (at_root && is_list(recv)) {
      auto list = get_list(recv, true, dt, "recvbuf", c.size());
      std::vector<void*> ptrs;
      for (auto& b : list) {
        same_type(v[0], b, "sendbuf", "a recvbuf entry");
        need_count(b, n, "a recvbuf entry", "gather");
        ptrs.push_back(b.ptr);
      }
      const void* s = v[0].ptr;
      for (auto& b : list) v.push_back(std::move(b));
      auto p = std::make_shared<std::vector<void*>>(std::move(ptrs));
      return run(
          std::move(v), [&] { c.gather(s, std::span<void* const>(*p), n, d, root); },
          [&] { return c.igather(s, std::span<void* const>(*p), n, d, root); });
    }
    void* r = nullptr;
    if (at_root) {
      v.push_back(get_buf(recv, true, dt, "recvbuf"));
      same_type(v[0], v[1], "sendbuf", "recvbuf");
      need_count(v[1], n * c.size(), "recvbuf", "gather (size x sendbuf)");
      r = v[1].ptr;
    }
    const void* s = v[0].ptr;
    return run(
        std::move(v), [&] { c.gather(s, r, n, d, root); }, [&] { return c.igather(s, r, n, d, root); });
  }

  py::object all_gather(const py::object& send, const py::object& recv, OptDtype dt) {
    std::vector<Buf> v;
    v.push_back(get_buf(send, false, dt, "sendbuf"));
    const std::size_t n = v[0].count;
    const DataType d = v[0].dtype;
    const void* s = v[0].ptr;
    if (is_list(recv)) {
      auto list = get_list(recv, true, dt, "recvbuf", c.size());
      auto ptrs = std::make_shared<std::vector<void*>>();
      for (auto& b : list) {
        same_type(v[0], b, "sendbuf", "a recvbuf entry");
        need_count(b, n, "a recvbuf entry", "all_gather");
        ptrs->push_back(b.ptr);
      }
      for (auto& b : list) v.push_back(std::move(b));
      return run(
          std::move(v), [&] { c.all_gather(s, std::span<void* const>(*ptrs), n, d); },
          [&] { return c.iall_gather(s, std::span<void* const>(*ptrs), n, d); });
    }
    v.push_back(get_buf(recv, true, dt, "recvbuf"));
    same_type(v[0], v[1], "sendbuf", "recvbuf");
    need_count(v[1], n * c.size(), "recvbuf", "all_gather (size x sendbuf)");
    void* r = v[1].ptr;
    return run(
        std::move(v), [&] { c.all_gather(s, r, n, d); }, [&] { return c.iall_gather(s, r, n, d); });
  }

  // scatter(sendbuf, recvbuf, root): sendbuf on root is one buffer of
  // size*count elements or a list of size buffers; elsewhere it may be None.
  py::object scatter(const py::object& send, const py::object& recv, int root, OptDtype dt) {
    std::vector<Buf> v;
    v.push_back(get_buf(recv, true, dt, "recvbuf"));
    const std::size_t n = v[0].count;
    const DataType d = v[0].dtype;
    void* r = v[0].ptr;
    if (root < 0 || root >= c.size())
      invalid("scatter: root " + std::to_string(root) + " is not a rank of this communicator (size " +
              std::to_string(c.size()) + ")");
    const bool at_root = c.rank() == root;
    if (at_root && send.is_none()) invalid("scatter: the root needs a sendbuf");
    if (at_root && is_list(send)) {
      auto list = get_list(send, false, dt, "sendbuf", c.size());
      auto ptrs = std::make_shared<std::vector<const void*>>();
      for (auto& b : list) {
        same_type(b, v[0], "a sendbuf entry", "recvbuf");
        need_count(b, n, "a sendbuf entry", "scatter");
        ptrs->push_back(b.ptr);
      }
      for (auto& b : list) v.push_back(std::move(b));
      return run(
          std::move(v), [&] { c.scatter(std::span<const void* const>(*ptrs), r, n, d, root); },
          [&] { return c.iscatter(std::span<const void* const>(*ptrs), r, n, d, root); });
    }
    const void* s = nullptr;
    if (at_root) {
      v.push_back(get_buf(send, false, dt, "sendbuf"));
      same_type(v[1], v[0], "sendbuf", "recvbuf");
      need_count(v[1], n * c.size(), "sendbuf", "scatter (size x recvbuf)");
      s = v[1].ptr;
    }
    return run(
        std::move(v), [&] { c.scatter(s, r, n, d, root); }, [&] { return c.iscatter(s, r, n, d, root); });
  }

  py::object reduce_scatter(const py::object& send, const py::object& recv, const py::handle& oph, OptDtype dt) {
    ReduceOp op = to_op(oph);
    std::vector<Buf> v;
    v.push_back(get_buf(recv, true, dt, "recvbuf"));
    const std::size_t n = v[0].count;
    const DataType d = v[0].dtype;
    void* r = v[0].ptr;
    if (is_list(send)) {
      auto list = get_list(send, false, dt, "sendbuf", c.size());
      auto ptrs = std::make_shared<std::vector<const void*>>();
      for (auto& b : list) {
        same_type(b, v[0], "a sendbuf entry", "recvbuf");
        need_count(b, n, "a sendbuf entry", "reduce_scatter");
        ptrs->push_back(b.ptr);
      }
      for (auto& b : list) v.push_back(std::move(b));
      return run(
          std::move(v), [&] { c.reduce_scatter(std::span<const void* const>(*ptrs), r, n, d, op); },
          [&] { return c.ireduce_scatter(std::span<const void* const>(*ptrs), r, n, d, op); });
    }
    v.push_back(get_buf(send, false, dt, "sendbuf"));
    same_type(v[1], v[0], "sendbuf", "recvbuf");
    need_count(v[1], n * c.size(), "sendbuf", "reduce_scatter (size x recvbuf)");
    const void* s = v[1].ptr;
    return run(
        std::move(v), [&] { c.reduce_scatter(s, r, n, d, op); }, [&] { return c.ireduce_scatter(s, r, n, d, op); });
  }

  py::object all_to_all(const py::object& send, const py::object& recv, OptDtype dt) {
    std::vector<Buf> v;
    v.push_back(get_buf(send, false, dt, "sendbuf"));
    v.push_back(get_buf(recv, true, dt, "recvbuf"));
    same_type(v[0], v[1], "sendbuf", "recvbuf");
    need_count(v[1], v[0].count, "recvbuf", "all_to_all (as many as sendbuf)");
    if (v[0].count % static_cast<std::size_t>(c.size()) != 0)
      invalid("all_to_all: sendbuf holds " + std::to_string(v[0].count) + " elements, not a multiple of the " +
              std::to_string(c.size()) + " ranks");
    const std::size_t n = v[0].count / c.size();
    const DataType d = v[0].dtype;
    const void* s = v[0].ptr;
    void* r = v[1].ptr;
    return run(
        std::move(v), [&] { c.all_to_all(s, r, n, d); }, [&] { return c.iall_to_all(s, r, n, d); });
  }

  py::object all_to_all_v(const py::object& send, const std::vector<std::size_t>& scounts,
                          const std::vector<std::size_t>& sdispls, const py::object& recv,
                          const std::vector<std::size_t>& rcounts, const std::vector<std::size_t>& rdispls,
                          OptDtype dt) {
    std::vector<Buf> v;
    v.push_back(get_buf(send, false, dt, "sendbuf"));
    v.push_back(get_buf(recv, true, dt, "recvbuf"));
    same_type(v[0], v[1], "sendbuf", "recvbuf");
    const std::size_t n = static_cast<std::size_t>(c.size());
    auto check = [&](const std::vector<std::size_t>& counts, const std::vector<std::size_t>& displs, const Buf& b,
                     const char* cn, const char* dn, const char* bn) {
      if (counts.size() != n || displs.size() != n)
        invalid(std::string("all_to_all_v: ") + cn + " and " + dn + " need one entry per rank (" + std::to_string(n) +
                ")");
      for (std::size_t i = 0; i < n; ++i)
        if (displs[i] > b.count || counts[i] > b.count - displs[i])
          invalid(std::string("all_to_all_v: block ") + std::to_string(i) + " (" + dn + " " +
                  std::to_string(displs[i]) + ", " + cn + " " + std::to_string(counts[i]) + ") lies outside " + bn +
                  " (" + std::to_string(b.count) + " elements)");
    };
    check(scounts, sdispls, v[0], "sendcounts", "sdispls", "sendbuf");
    check(rcounts, rdispls, v[1], "recvcounts", "rdispls", "recvbuf");
    auto arr = std::make_shared<std::vector<std::vector<std::size_t>>>(
        std::vector<std::vector<std::size_t>>{scounts, sdispls, rcounts, rdispls});
    const void* s = v[0].ptr;
    void* r = v[1].ptr;
    const DataType d = v[0].dtype;
    auto& a = *arr;
    // The count arrays are copied by tutti at submission.
    return run(
        std::move(v), [&] { c.all_to_all_v(s, a[0], a[1], r, a[2], a[3], d); },
        [&] { return c.iall_to_all_v(s, a[0], a[1], r, a[2], a[3], d); });
  }

  py::object barrier() {
    return run(
        {}, [&] { c.barrier(); }, [&] { return c.ibarrier(); });
  }
};

std::chrono::milliseconds seconds_to_ms(double s) {
  if (!(s > 0)) invalid("timeout must be a positive number of seconds");
  double ms = std::ceil(s * 1e3);
  if (ms > 1e15) ms = 1e15;
  return std::chrono::milliseconds(static_cast<std::int64_t>(ms));
}

// ---- stores ----------------------------------------------------------------------

Bytes to_bytes(const py::handle& h) {
  if (py::isinstance<py::str>(h)) {
    std::string s = h.cast<std::string>();
    return Bytes(s.begin(), s.end());
  }
  std::string s = py::bytes(py::reinterpret_borrow<py::object>(h));
  return Bytes(s.begin(), s.end());
}
py::bytes from_bytes(const Bytes& b) { return py::bytes(reinterpret_cast<const char*>(b.data()), b.size()); }

}  // namespace

PYBIND11_MODULE(_tutti, m) {
  m.doc() = "tutti: collective and point-to-point communication between processes";
  tutti_python::interrupt::setup();

  // Errors: tutti.Error (a RuntimeError) and one subclass per kind.
  {
    PyObject* base = PyErr_NewExceptionWithDoc(
        "tutti.Error", "Every error of tutti; .kind names the kind, .message is the text without the kind.",
        PyExc_RuntimeError, nullptr);
    g_error_base = base;
    m.add_object("Error", py::reinterpret_borrow<py::object>(base));
    for (ErrorKind k : kErrorKinds) {
      std::string name = std::string("tutti.") + error_kind_name(k);
      PyObject* cls = PyErr_NewException(name.c_str(), base, nullptr);
      g_error_classes.emplace_back(k, cls);
      m.add_object(error_kind_name(k), py::reinterpret_borrow<py::object>(cls));
    }
    py::register_exception_translator([](std::exception_ptr p) {
      try {
        if (p) std::rethrow_exception(p);
      } catch (const Error& e) {
        py::object exc = make_error(e);
        PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc.ptr())), exc.ptr());
      }
    });
  }

  py::enum_<DataType> dtypes(m, "DataType", "Element types");
  for (int i = 0; i < kNumDataTypes; ++i) {
    auto t = static_cast<DataType>(i);
    dtypes.value(dtype_name(t), t);
  }
  dtypes.export_values();
  m.def("dtype_size", &dtype_size, "Size in bytes of one element");

  py::enum_<ReduceOpKind> rk(m, "ReduceOpKind", "Reduction operators");
  rk.value("SUM", ReduceOpKind::Sum)
      .value("PRODUCT", ReduceOpKind::Product)
      .value("MIN", ReduceOpKind::Min)
      .value("MAX", ReduceOpKind::Max)
      .value("AVG", ReduceOpKind::Avg)
      .value("BAND", ReduceOpKind::BAnd)
      .value("BOR", ReduceOpKind::BOr)
      .value("BXOR", ReduceOpKind::BXor)
      .value("PREMUL_SUM", ReduceOpKind::PremulSum)
      .export_values();

  py::class_<ReduceOp>(m, "ReduceOp", "A reduction operator; PREMUL_SUM carries its scalar")
      .def(py::init<ReduceOpKind>(), py::arg("kind"))
      .def(py::init([](ReduceOpKind k, double s) {
             ReduceOp op(k);
             op.scalar = s;
             return op;
           }),
           py::arg("kind"), py::arg("scalar"))
      .def_static("premul_sum", &ReduceOp::premul_sum, py::arg("scalar"))
      .def_readonly("kind", &ReduceOp::kind)
      .def_readonly("scalar", &ReduceOp::scalar)
      .def("__repr__", [](const ReduceOp& op) {
        std::string s = std::string("tutti.ReduceOp(") + reduce_op_name(op.kind);
        if (op.kind == ReduceOpKind::PremulSum) s += ", " + std::to_string(op.scalar);
        return s + ")";
      });
  py::implicitly_convertible<ReduceOpKind, ReduceOp>();
  m.def("reduce_op_invalid_reason", &reduce_op_invalid_reason, py::arg("dtype"), py::arg("op"),
        "Why op means nothing on dtype, or '' when it does");

  m.attr("ANY_SOURCE") = kAnySource;

  py::class_<PyWork>(m, "Work", "The handle of an asynchronous operation")
      .def("wait", &PyWork::wait, py::arg("timeout") = py::none(),
           "Waits for the operation (at most `timeout` seconds if given) and raises its error. Returns whether it "
           "finished.")
      .def("test", &PyWork::test, "Whether the operation has finished (never raises)")
      .def("is_completed", &PyWork::test)
      .def("exception", &PyWork::exception, "The operation's error (a tutti.Error), or None")
      .def_property_readonly("source", &PyWork::source, "For receives: the rank the message came from")
      .def_property_readonly("bytes", &PyWork::bytes, "For receives: the number of bytes received");

  py::class_<PyComm>(m, "Communicator", "A group of ranks and every operation among them")
      .def_property_readonly("rank", [](const PyComm& s) { return s.c.rank(); })
      .def_property_readonly("size", [](const PyComm& s) { return s.c.size(); })
      .def_property_readonly("global_rank", [](const PyComm& s) { return s.c.global_rank(); })
      .def_property_readonly("world_ranks", [](const PyComm& s) { return s.c.world_ranks(); })
      .def_property_readonly("local_rank", [](const PyComm& s) { return s.c.local_rank(); })
      .def_property_readonly("local_size", [](const PyComm& s) { return s.c.local_size(); })
      .def_property(
          "timeout", [](const PyComm& s) { return s.c.timeout().count() / 1e3; },
          [](PyComm& s, double t) { s.c.set_timeout(seconds_to_ms(t)); },
          "Default deadline of every operation, in seconds")
      .def_property(
          "reproducible", [](const PyComm& s) { return s.c.reproducible(); },
          [](PyComm& s, bool on) { s.c.set_reproducible(on); },
          "Reproducible sums: all_reduce, reduce and reduce_scatter of floats and complex numbers with SUM and AVG "
          "give the exact sum rounded once, the same bits whatever the algorithm or rank order (every member alike)")
      .def("__repr__",
           [](const PyComm& s) {
             return "<tutti.Communicator rank " + std::to_string(s.c.rank()) + " of " + std::to_string(s.c.size()) +
                    ">";
           })
      // point to point
      .def(
          "send",
          [](PyComm& s, const py::object& buf, int dst, int tag, OptDtype dt) {
            auto [w, b] = s.isend_(buf, dst, tag, dt);
            tutti_python::interrupt::wait_in(s.c, [&w = w] { w.wait(); });
          },
          py::arg("buf"), py::arg("dst"), py::arg("tag") = 0, py::arg("dtype") = py::none())
      .def(
          "isend",
          [](PyComm& s, const py::object& buf, int dst, int tag, OptDtype dt) {
            auto [w, b] = s.isend_(buf, dst, tag, dt);
            return make_work(std::move(w), std::move(b), s.c);
          },
          py::arg("buf"), py::arg("dst"), py::arg("tag") = 0, py::arg("dtype") = py::none())
      .def(
          "recv",
          [](PyComm& s, const py::object& buf, int src, int tag, OptDtype dt) {
            auto [w, b] = s.irecv_(buf, src, tag, dt);
            tutti_python::interrupt::wait_in(s.c, [&w = w] { w.wait(); });
            return w.source();
          },
          py::arg("buf"), py::arg("src") = kAnySource, py::arg("tag") = 0, py::arg("dtype") = py::none(),
          "Receives into buf; returns the rank the message came from")
      .def(
          "irecv",
          [](PyComm& s, const py::object& buf, int src, int tag, OptDtype dt) {
            auto [w, b] = s.irecv_(buf, src, tag, dt);
            return make_work(std::move(w), std::move(b), s.c);
          },
          py::arg("buf"), py::arg("src") = kAnySource, py::arg("tag") = 0, py::arg("dtype") = py::none())
#define TUTTI_BOTH(name, lambda_args, call_args, ...) \
  .def(                                               \
      #name,                                          \
      [](PyComm& s, lambda_args) {                    \
        return Ops{s.c, false}.name call_args;        \
      },                                              \
      __VA_ARGS__)                                    \
      .def(                                           \
          "i" #name,                                  \
          [](PyComm& s, lambda_args) {                \
            return Ops{s.c, true}.name call_args;     \
          },                                          \
          __VA_ARGS__)
#define ARGS(...) __VA_ARGS__
          TUTTI_BOTH(broadcast, ARGS(const py::object& buf, int root, OptDtype dt), ARGS((buf, root, dt)),
                     py::arg("buf"), py::arg("root") = 0, py::arg("dtype") = py::none())
              TUTTI_BOTH(all_reduce,
                         ARGS(const py::object& send, const py::object& recv, const py::object& op, OptDtype dt),
                         ARGS((send, recv, op, dt)), py::arg("sendbuf"), py::arg("recvbuf") = py::none(),
                         py::arg("op") = ReduceOp(ReduceOpKind::Sum), py::arg("dtype") = py::none())
                  TUTTI_BOTH(
                      reduce,
                      ARGS(const py::object& send, const py::object& recv, const py::object& op, int root, OptDtype dt),
                      ARGS((send, recv, op, root, dt)), py::arg("sendbuf"), py::arg("recvbuf") = py::none(),
                      py::arg("op") = ReduceOp(ReduceOpKind::Sum), py::arg("root") = 0, py::arg("dtype") = py::none())
                      TUTTI_BOTH(gather, ARGS(const py::object& send, const py::object& recv, int root, OptDtype dt),
                                 ARGS((send, recv, root, dt)), py::arg("sendbuf"), py::arg("recvbuf") = py::none(),
                                 py::arg("root") = 0, py::arg("dtype") = py::none())
                          TUTTI_BOTH(all_gather, ARGS(const py::object& send, const py::object& recv, OptDtype dt),
                                     ARGS((send, recv, dt)), py::arg("sendbuf"), py::arg("recvbuf"),
                                     py::arg("dtype") = py::none())
                              TUTTI_BOTH(scatter,
                                         ARGS(const py::object& send, const py::object& recv, int root, OptDtype dt),
                                         ARGS((send, recv, root, dt)), py::arg("sendbuf"), py::arg("recvbuf"),
                                         py::arg("root") = 0, py::arg("dtype") = py::none())
                                  TUTTI_BOTH(reduce_scatter,
                                             ARGS(const py::object& send, const py::object& recv, const py::object& op,
                                                  OptDtype dt),
                                             ARGS((send, recv, op, dt)), py::arg("sendbuf"), py::arg("recvbuf"),
                                             py::arg("op") = ReduceOp(ReduceOpKind::Sum), py::arg("dtype") = py::none())
                                      TUTTI_BOTH(all_to_all,
                                                 ARGS(const py::object& send, const py::object& recv, OptDtype dt),
                                                 ARGS((send, recv, dt)), py::arg("sendbuf"), py::arg("recvbuf"),
                                                 py::arg("dtype") = py::none())
                                          TUTTI_BOTH(all_to_all_v,
                                                     ARGS(const py::object& send, const std::vector<std::size_t>& sc,
                                                          const std::vector<std::size_t>& sd, const py::object& recv,
                                                          const std::vector<std::size_t>& rc,
                                                          const std::vector<std::size_t>& rd, OptDtype dt),
                                                     ARGS((send, sc, sd, recv, rc, rd, dt)), py::arg("sendbuf"),
                                                     py::arg("sendcounts"), py::arg("sdispls"), py::arg("recvbuf"),
                                                     py::arg("recvcounts"), py::arg("rdispls"),
                                                     py::arg("dtype") = py::none())
#undef TUTTI_BOTH
#undef ARGS
      .def("barrier",
           [](PyComm& s) {
             return Ops{s.c, false}.barrier();
           })
      .def("ibarrier",
           [](PyComm& s) {
             return Ops{s.c, true}.barrier();
           })
      // groups
      .def(
          "new_group",
          [](PyComm& s, const std::vector<int>& ranks) -> std::
                                                           optional<PyComm> {
                                                             std::optional<Communicator> g;
                                                             {
                                                               py::gil_scoped_release r;
                                                               g = s.c.new_group(ranks);
                                                             }
                                                             if (!g) return std::nullopt;
                                                             return PyComm{*g};
                                                           },
          py::arg("ranks"),
          "Every member calls it with the same list; returns the new communicator on members, None elsewhere")
      .def(
          "split",
          [](PyComm& s, int color, int key) -> std::
                                                optional<PyComm> {
                                                  std::optional<Communicator> g;
                                                  {
                                                    py::gil_scoped_release r;
                                                    g = s.c.split(color, key);
                                                  }
                                                  if (!g) return std::nullopt;
                                                  return PyComm{*g};
                                                },
          py::arg("color"), py::arg("key") = 0, "MPI_Comm_split; color < 0: no communicator (None)")
      .def(
          "abort", [](PyComm& s, const std::string& why) { s.c.abort(why); }, py::arg("reason") = "abort() called")
      .def(
          "failed_ranks", [](const PyComm& s) { return s.c.failed_ranks(); },
          "the members known to be lost, in this communicator's numbering")
      .def(
          "revoke",
          [](PyComm& s) {
            py::gil_scoped_release r;
            s.c.revoke();
          },
          "every member's pending and later operations fail with tutti.Revoked (MPIX_Comm_revoke)")
      .def(
          "agree",
          [](PyComm& s, bool flag, bool return_failed) -> py::object {
            std::vector<int> failed;
            bool out;
            {
              py::gil_scoped_release r;
              out = s.c.agree(flag, &failed);
            }
            if (return_failed) return py::make_tuple(out, failed);
            return py::bool_(out);
          },
          py::arg("flag") = true, py::arg("return_failed") = false,
          "fault-tolerant agreement among the survivors (MPIX_Comm_agree): the AND of the flags, and with "
          "return_failed=True also the members agreed lost, as (flag, failed)")
      .def(
          "shrink",
          [](PyComm& s) {
            py::gil_scoped_release r;
            return PyComm{s.c.shrink()};
          },
          "a new communicator of the survivors, ordered by rank (MPIX_Comm_shrink)")
      .def(
          "alloc_shared",
          [](PyComm& s, std::size_t nbytes) {
            SharedMemory out;
            out.bytes = nbytes;
            py::gil_scoped_release r;
            out.mem = s.c.alloc_shared_owned(nbytes);
            return out;
          },
          py::arg("nbytes"),
          "nbytes of memory every rank of this host maps (collective; sizes may differ per rank), for "
          "collectives that read the peers' buffers where they lie: wrap it, e.g. "
          "numpy.frombuffer(buf, dtype=numpy.float32); it stays mapped while any object holds it")
      .def("trace_json", [](const PyComm& s) { return s.c.trace_json(); })
      .def("dump_trace", [](const PyComm& s) { return s.c.dump_trace(); });

  py::class_<SharedMemory>(m, "SharedMemory", py::buffer_protocol(),
                           "Memory from Communicator.alloc_shared: a writable buffer of bytes")
      .def_buffer([](SharedMemory& sm) {
        return py::buffer_info(sm.mem.get(), 1, py::format_descriptor<std::uint8_t>::format(), 1,
                               {static_cast<py::ssize_t>(sm.bytes)}, {py::ssize_t{1}});
      })
      .def("__len__", [](const SharedMemory& sm) { return sm.bytes; })
      .def("__repr__",
           [](const SharedMemory& sm) { return "<tutti.SharedMemory of " + std::to_string(sm.bytes) + " bytes>"; });

  m.def(
      "init",
      [](std::optional<int> rank, std::optional<int> world_size, std::optional<std::string> master_addr,
         std::optional<int> master_port, std::optional<double> timeout, std::shared_ptr<Store> store,
         std::optional<std::string> job_secret) {
        InitOptions o;
        if (job_secret) o.job_secret = *job_secret;
        if (rank) o.rank = *rank;
        if (world_size) o.world_size = *world_size;
        if (master_addr) o.master_addr = *master_addr;
        if (master_port) o.master_port = *master_port;
        if (timeout) o.timeout = seconds_to_ms(*timeout);
        o.store = std::move(store);
        py::gil_scoped_release r;
        return PyComm{tutti::init(o)};
      },
      py::arg("rank") = py::none(), py::arg("world_size") = py::none(), py::arg("master_addr") = py::none(),
      py::arg("master_port") = py::none(), py::arg("timeout") = py::none(), py::arg("store") = py::none(),
      py::arg("job_secret") = py::none(),
      "Joins the job and returns the world communicator (rank, size, rendezvous and job secret from the "
      "environment unless given)");

  // Stores.
  py::class_<Store, std::shared_ptr<Store>>(m, "Store", "A key-value store (values are bytes)")
      .def("set",
           [](Store& s, const std::string& k, const py::object& v) {
             Bytes b = to_bytes(v);
             py::gil_scoped_release r;
             s.set(k, b);
           })
      .def("get",
           [](Store& s, const std::string& k) {
             Bytes b;
             {
               py::gil_scoped_release r;
               b = s.get(k);
             }
             return from_bytes(b);
           })
      .def("multi_get",
           [](Store& s, const std::vector<std::string>& keys) {
             std::vector<Bytes> values;
             {
               py::gil_scoped_release r;
               values = s.multi_get(keys);
             }
             py::list out;
             for (const Bytes& b : values) out.append(from_bytes(b));
             return out;
           })
      .def("add",
           [](Store& s, const std::string& k, std::int64_t d) {
             py::gil_scoped_release r;
             return s.add(k, d);
           })
      .def("compare_set",
           [](Store& s, const std::string& k, const py::object& expected, const py::object& desired) {
             Bytes e = to_bytes(expected), d = to_bytes(desired), out;
             {
               py::gil_scoped_release r;
               out = s.compare_set(k, e, d);
             }
             return from_bytes(out);
           })
      .def(
          "wait",
          [](Store& s, const std::vector<std::string>& keys, std::optional<double> timeout) {
            py::gil_scoped_release r;
            if (timeout)
              s.wait(keys, seconds_to_ms(*timeout));
            else
              s.wait(keys);
          },
          py::arg("keys"), py::arg("timeout") = py::none())
      .def("check", [](Store& s, const std::vector<std::string>& keys) { return s.check(keys); })
      .def("delete_key", [](Store& s, const std::string& k) { return s.delete_key(k); })
      .def("num_keys", [](Store& s) { return s.num_keys(); })
      .def_property(
          "timeout", [](const Store& s) { return s.timeout().count() / 1e3; },
          [](Store& s, double t) { s.set_timeout(seconds_to_ms(t)); });
  m.def("memory_store", &make_memory_store, "An in-process store");
  m.def("file_store", &make_file_store, py::arg("path"), "A store in a file (flock)");
  m.def("prefix_store", &make_prefix_store, py::arg("prefix"), py::arg("base"));
  m.def(
      "tcp_store_client",
      [](const std::string& host, int port, double timeout, std::optional<std::string> secret) {
        const std::string key = secret ? *secret : job_secret_from_env();
        py::gil_scoped_release r;
        return make_tcp_store_client(host, port, seconds_to_ms(timeout), key);
      },
      py::arg("host"), py::arg("port"), py::arg("timeout") = 300.0, py::arg("secret") = py::none(),
      "A client of a TCP store server; it and the server prove they hold the same job secret "
      "(default: TUTTI_JOB_SECRET), else tutti.Unauthenticated");
  py::class_<TcpStoreServer>(m, "TcpStoreServer", "A TCP store server, serving until closed or collected")
      .def(py::init([](const std::string& host, int port, std::optional<std::string> secret) {
             return std::make_unique<TcpStoreServer>(host, port, secret ? *secret : job_secret_from_env());
           }),
           py::arg("host") = "", py::arg("port") = 0, py::arg("secret") = py::none())
      .def_property_readonly("port", &TcpStoreServer::port);

  m.attr("__version__") = py::str(std::to_string(TUTTI_VERSION_MAJOR) + "." + std::to_string(TUTTI_VERSION_MINOR) +
                                  "." + std::to_string(TUTTI_VERSION_PATCH));
}
