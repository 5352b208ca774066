// The PMIx client of the rendezvous (pmix.h). Only PMIx's types and
// constants come from its headers; every function is looked up in
// libpmix.so.2 at run time, and none of the headers' macros that call into
// the library is used.
#include "bootstrap/pmix.h"

#include "common/log.h"
#include "tutti/error.h"

#ifdef TUTTI_HAVE_PMIX

#include <dlfcn.h>
#include <pmix.h>

#include <algorithm>
#include <climits>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>

namespace tutti::detail {

namespace {

constexpr const char* kLibrary = "libpmix.so.2";
constexpr const char* kKey = "tutti.store";

struct Api {
  decltype(&::PMIx_Init) init = nullptr;
  decltype(&::PMIx_Finalize) finalize = nullptr;
  decltype(&::PMIx_Put) put = nullptr;
  decltype(&::PMIx_Commit) commit = nullptr;
  decltype(&::PMIx_Fence_nb) fence_nb = nullptr;
  decltype(&::PMIx_Get_nb) get_nb = nullptr;
  decltype(&::PMIx_Error_string) error_string = nullptr;
  std::string unavailable;  // why the library cannot be used; empty when it can
};

template <typename F>
bool lookup(void* lib, const char* name, F& f, std::string& why) {
  f = reinterpret_cast<F>(::dlsym(lib, name));
  if (!f && why.empty()) {
    why = kLibrary;
    why += " has no ";
    why += name;
  }
  return f != nullptr;
}

const Api& api() {
  static const Api loaded = [] {
    Api a;
    // Never closed: the library runs a progress thread while initialized
    // and registers handlers of its own.
    void* lib = ::dlopen(kLibrary, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      const char* e = ::dlerror();
      a.unavailable = e ? e : "dlopen(libpmix.so.2) failed";
      return a;
    }
    std::string why;
    lookup(lib, "PMIx_Init", a.init, why);
    lookup(lib, "PMIx_Finalize", a.finalize, why);
    lookup(lib, "PMIx_Put", a.put, why);
    lookup(lib, "PMIx_Commit", a.commit, why);
    lookup(lib, "PMIx_Fence_nb", a.fence_nb, why);
    lookup(lib, "PMIx_Get_nb", a.get_nb, why);
    lookup(lib, "PMIx_Error_string", a.error_string, why);
    a.unavailable = why;
    return a;
  }();
  return loaded;
}

// The name of a status as pmix_common.h defines it, for the statuses these
// calls return; PMIx_Error_string's words ("UNREACHABLE") and the number.
std::string status_text(pmix_status_t s) {
  const char* name = nullptr;
  switch (s) {
#define TUTTI_PMIX_STATUS(x) \
  case x:                    \
    name = #x;               \
    break;
    TUTTI_PMIX_STATUS(PMIX_ERROR)
    TUTTI_PMIX_STATUS(PMIX_ERR_TIMEOUT)
    TUTTI_PMIX_STATUS(PMIX_ERR_UNREACH)
    TUTTI_PMIX_STATUS(PMIX_ERR_NOT_FOUND)
    TUTTI_PMIX_STATUS(PMIX_ERR_INIT)
    TUTTI_PMIX_STATUS(PMIX_ERR_BAD_PARAM)
    TUTTI_PMIX_STATUS(PMIX_ERR_NOT_SUPPORTED)
    TUTTI_PMIX_STATUS(PMIX_ERR_LOST_CONNECTION)
    TUTTI_PMIX_STATUS(PMIX_ERR_NOMEM)
    TUTTI_PMIX_STATUS(PMIX_ERR_INVALID_NAMESPACE)
    TUTTI_PMIX_STATUS(PMIX_ERR_PROC_ENTRY_NOT_FOUND)
#undef TUTTI_PMIX_STATUS
    default:
      break;
  }
  const char* words = api().error_string ? api().error_string(s) : nullptr;
  std::string out = name ? name : "PMIx status";
  out += " (";
  if (words && (!name || std::strcmp(words, name) != 0)) {
    out += words;
    out += ", ";
  }
  out += std::to_string(s);
  out += ')';
  return out;
}

// One pending non-blocking call: the callback fills it in. Shared with the
// callback, which may come after we gave up waiting.
struct Pending {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  pmix_status_t status = PMIX_SUCCESS;
  std::string value;  // PMIx_Get_nb's string
  bool has_value = false;
  std::string value_problem;  // a value that is not a string
};

void complete(void* cbdata, pmix_status_t status, const pmix_value_t* kv) {
  auto* holder = static_cast<std::shared_ptr<Pending>*>(cbdata);
  {
    std::lock_guard<std::mutex> lock((*holder)->mu);
    Pending& p = **holder;
    p.status = status;
    if (kv) {
      if (kv->type == PMIX_STRING && kv->data.string) {
        p.value = kv->data.string;
        p.has_value = true;
      } else {
        p.value_problem = "a value of PMIx type " + std::to_string(kv->type) + " instead of a string";
      }
    }
    p.done = true;
  }
  (*holder)->cv.notify_all();
  delete holder;
}

void op_done(pmix_status_t status, void* cbdata) { complete(cbdata, status, nullptr); }
void value_done(pmix_status_t status, pmix_value_t* kv, void* cbdata) { complete(cbdata, status, kv); }

// Seconds left until the deadline, rounded up, for PMIX_TIMEOUT; 0 (no
// timeout) when the deadline is "never".
int seconds_left(TimePoint deadline) {
  if (deadline == TimePoint::max()) return 0;
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  if (ms <= 0) return 1;
  return static_cast<int>(std::min<long long>((ms + 999) / 1000, INT_MAX));
}

pmix_info_t info_of(const char* key, pmix_data_type_t type) {
  pmix_info_t i;
  std::memset(&i, 0, sizeof i);
  std::strncpy(i.key, key, PMIX_MAX_KEYLEN);
  i.value.type = type;
  return i;
}

pmix_info_t info_int(const char* key, int v) {
  pmix_info_t i = info_of(key, PMIX_INT);
  i.value.data.integer = v;
  return i;
}

pmix_info_t info_bool(const char* key, bool v) {
  pmix_info_t i = info_of(key, PMIX_BOOL);
  i.value.data.flag = v;
  return i;
}

class Client {
 public:
  explicit Client(TimePoint deadline) : deadline_(deadline) {
    std::memset(&me_, 0, sizeof me_);
    pmix_status_t s = api().init(&me_, nullptr, 0);
    if (s != PMIX_SUCCESS) fail("PMIx_Init", s, "is the mpirun that set PMIX_SERVER_URI* still running?");
    initialized_ = true;
  }
  ~Client() {
    // After a timed-out call the library may still hold it; finalizing
    // could then wait for the server without end.
    if (initialized_ && !abandoned_) api().finalize(nullptr, 0);
  }
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  const pmix_proc_t& me() const { return me_; }

  void put(const std::string& record) {
    pmix_value_t v;
    std::memset(&v, 0, sizeof v);
    v.type = PMIX_STRING;
    v.data.string = const_cast<char*>(record.c_str());  // copied by PMIx_Put
    pmix_status_t s = api().put(PMIX_GLOBAL, kKey, &v);
    if (s != PMIX_SUCCESS) fail("PMIx_Put of rank 0's address", s);
    s = api().commit();
    if (s != PMIX_SUCCESS) fail("PMIx_Commit of rank 0's address", s);
  }

  // A fence over every rank of our namespace, collecting what they put.
  void fence() {
    pmix_proc_t all;
    std::memset(&all, 0, sizeof all);
    std::memcpy(all.nspace, me_.nspace, sizeof all.nspace);
    all.rank = PMIX_RANK_WILDCARD;
    pmix_info_t info[2] = {info_bool(PMIX_COLLECT_DATA, true), info_int(PMIX_TIMEOUT, seconds_left(deadline_))};
    const std::size_t ninfo = info[1].value.data.integer > 0 ? 2 : 1;
    auto p = std::make_shared<Pending>();
    auto* holder = new std::shared_ptr<Pending>(p);
    pmix_status_t s = api().fence_nb(&all, 1, info, ninfo, op_done, holder);
#ifdef PMIX_OPERATION_SUCCEEDED
    if (s == PMIX_OPERATION_SUCCEEDED) {  // done at once, no callback
      delete holder;
      return;
    }
#endif
    if (s != PMIX_SUCCESS) {
      delete holder;
      fail("PMIx_Fence", s);
    }
    wait(*p, "PMIx_Fence (waiting for every rank of the mpirun to reach init)");
    if (p->status != PMIX_SUCCESS) fail("PMIx_Fence", p->status);
  }

  std::string get_from_rank0() {
    pmix_proc_t zero;
    std::memset(&zero, 0, sizeof zero);
    std::memcpy(zero.nspace, me_.nspace, sizeof zero.nspace);
    zero.rank = 0;
    pmix_info_t info[1] = {info_int(PMIX_TIMEOUT, seconds_left(deadline_))};
    const std::size_t ninfo = info[0].value.data.integer > 0 ? 1 : 0;
    auto p = std::make_shared<Pending>();
    auto* holder = new std::shared_ptr<Pending>(p);
    pmix_status_t s = api().get_nb(&zero, kKey, info, ninfo, value_done, holder);
    if (s != PMIX_SUCCESS) {
      delete holder;
      fail("PMIx_Get of rank 0's address", s);
    }
    wait(*p, "PMIx_Get of rank 0's address");
    if (p->status != PMIX_SUCCESS) fail("PMIx_Get of rank 0's address", p->status);
    if (!p->has_value)
      throw Error(ErrorKind::PeerLost, "PMIx_Get of rank 0's address returned " +
                                           (p->value_problem.empty() ? "no value" : p->value_problem));
    return p->value;
  }

 private:
  void wait(Pending& p, const char* what) {
    std::unique_lock<std::mutex> lock(p.mu);
    while (!p.done) {
      const TimePoint now = Clock::now();
      if (now >= deadline_) {
        abandoned_ = true;
        throw Error(ErrorKind::Timeout, std::string(what) +
                                            " failed: Timed out waiting for an answer from the PMIx server within the "
                                            "init timeout (namespace " +
                                            me_.nspace + ", rank " + std::to_string(me_.rank) + ")");
      }
      p.cv.wait_for(lock, std::min<Clock::duration>(deadline_ - now, std::chrono::seconds(1)));
    }
  }
  [[noreturn]] void fail(const std::string& what, pmix_status_t s, const char* hint = nullptr) {
    std::string m = what;
    m += " failed: ";
    m += status_text(s);
    if (initialized_) {
      m += " (namespace ";
      m += me_.nspace;
      m += ", rank ";
      m += std::to_string(me_.rank);
      m += ')';
    }
    if (hint) {
      m += "; ";
      m += hint;
    }
    throw Error(s == PMIX_ERR_TIMEOUT ? ErrorKind::Timeout : ErrorKind::PeerLost, m);
  }

  TimePoint deadline_;
  pmix_proc_t me_;
  bool initialized_ = false;
  bool abandoned_ = false;
};

}  // namespace

std::string pmix_unavailable() { return api().unavailable; }

std::string pmix_exchange(int rank, const std::string& record, TimePoint deadline) {
  if (!pmix_unavailable().empty()) throw Error(ErrorKind::InvalidArgument, "PMIx: " + pmix_unavailable());
  Client client(deadline);
  if (static_cast<long long>(client.me().rank) != rank)
    throw Error(ErrorKind::InvalidArgument,
                "tutti rank " + std::to_string(rank) + " is PMIx rank " + std::to_string(client.me().rank) +
                    " of namespace " + client.me().nspace +
                    ": the rendezvous through PMIx needs them equal (set MASTER_ADDR and MASTER_PORT instead)");
  TUTTI_LOG(Debug, "PMIx: namespace " << client.me().nspace << ", rank " << client.me().rank);
  if (rank == 0) client.put(record);
  client.fence();
  return rank == 0 ? record : client.get_from_rank0();
}

}  // namespace tutti::detail

#else  // !TUTTI_HAVE_PMIX

namespace tutti::detail {

std::string pmix_unavailable() { return "tutti was built without PMIx's headers (pmix.h)"; }

std::string pmix_exchange(int, const std::string&, TimePoint) {
  throw Error(ErrorKind::InvalidArgument, "PMIx: " + pmix_unavailable());
}

}  // namespace tutti::detail

#endif
