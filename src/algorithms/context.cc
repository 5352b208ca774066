#include "algorithms/context.h"

#include "algorithms/signature.h"
#include "common/tags.h"

namespace tutti::detail {

void OpContext::set_algo(const char* name) {
  algo = name;
  if (record_algo) record_algo(recorder, trace, name);
}

std::string OpContext::describe() const {
  std::string d = std::string(op_name) + " #" + std::to_string(seq) + " (";
  if (*algo) d += std::string(algo) + ", ";
  d += std::to_string(bytes) + " B";
  if (dtype_name) d += std::string(", ") + dtype_name;
  if (redop_name) d += std::string(", ") + redop_name;
  if (root >= 0) d += ", root " + std::to_string(root);
  return d + ")";
}

std::uint64_t OpContext::signature() const {
  if (!sign_messages) return 0;
  if (sig_cache == 0) sig_cache = message_signature(*this);
  return sig_cache;
}

std::string OpContext::where() const { return "rank " + std::to_string(rank) + ": " + describe() + ": "; }

Pending OpContext::isend(int peer, std::uint32_t step, const void* buf, std::size_t len) {
  Pending p;
  p.req = transport->post_send((*world)[peer], comm_id, collective_tag(seq, step_base + step), buf, len, signature());
  p.peer = peer;
  p.step = step;
  p.bytes = len;
  return p;
}

Pending OpContext::irecv(int peer, std::uint32_t step, void* buf, std::size_t len) {
  Pending p;
  p.req = transport->post_recv((*world)[peer], comm_id, collective_tag(seq, step_base + step), buf, len, signature());
  p.peer = peer;
  p.is_recv = true;
  p.step = step;
  p.bytes = len;
  return p;
}

// Every failure aborts the communicator in the transport before the
// exception leaves: unwinding frees the algorithm's scratch buffers, and
// requests still posted into them must be gone first.
[[noreturn]] void OpContext::fail(ErrorKind kind, const std::string& message) {
  transport->abort_comm(comm_id, kind, message);
  throw Error(kind, message);
}

void OpContext::wait(const Pending& p) {
  if (!p.req->wait_until(deadline)) {
    fail(ErrorKind::Timeout, where() + "Timed out waiting to " + (p.is_recv ? "receive " : "send ") +
                                 std::to_string(p.bytes) + " bytes " + (p.is_recv ? "from" : "to") + " rank " +
                                 std::to_string(p.peer) + " (step " + std::to_string(p.step) +
                                 "); that rank did not take part in time");
  }
  if (!p.req->ok()) {
    ErrorKind kind = p.req->error_kind();
    std::string msg = p.req->error_message();
    if (kind == ErrorKind::Aborted) fail(kind, msg);  // already carries its context
    fail(kind, where() + (p.is_recv ? "receive from" : "send to") + " rank " + std::to_string(p.peer) + " (step " +
                   std::to_string(p.step) + ") failed: " + msg);
  }
}

void OpContext::wait_all(std::vector<Pending>& ps) {
  for (auto& p : ps) wait(p);
  ps.clear();
}

void OpContext::sendrecv(int dst, const void* sbuf, std::size_t slen, int src, void* rbuf, std::size_t rlen,
                         std::uint32_t step) {
  Pending r = irecv(src, step, rbuf, rlen);
  Pending s = isend(dst, step, sbuf, slen);
  wait(r);
  wait(s);
}

}  // namespace tutti::detail
