#pragma once
// Communicator: a group of ranks and every operation among them.

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tutti/error.h"
#include "tutti/store.h"
#include "tutti/types.h"
#include "tutti/work.h"

namespace tutti {
namespace detail {
struct CommunicatorImpl;  // tutti's own (src/core/communicator_impl.h): hidden
}
}  // namespace tutti

// What the public headers declare is libtutti.so's interface: exported,
// while everything else in the library is hidden (-fvisibility=hidden).
#pragma GCC visibility push(default)

namespace tutti {

inline constexpr int kAnySource = -1;

struct InitOptions;

// Thread rules. A Communicator is a cheap value handle (copies share one
// implementation). Operations on one communicator must be issued in the same
// order on every rank, and from one thread at a time (as in MPI and NCCL);
// different communicators may be used from different threads concurrently.
// Waiting on Works and abort() are allowed from any thread.
//
// Buffer rules. A blocking call owns its buffers until it returns. An
// asynchronous call (i*) owns them until its Work completes. Send buffers are
// never written; in-place operation means passing the same pointer as send
// and receive buffer where the signature has both.
//
// Errors. Every call throws tutti::Error. InvalidArgument is raised before
// anything is sent. After any other error the communicator is aborted: every
// pending and later operation fails with Error(Aborted) naming the root cause.
class Communicator {
 public:
  Communicator() = default;  // an invalid handle; valid() is false
  // Handles share one communicator, which goes with the last of them. In a
  // child forked from its process the last handle leaves it alone (its
  // threads and connections are the parent's).
  ~Communicator();
  Communicator(const Communicator&) = default;
  Communicator(Communicator&&) noexcept = default;
  Communicator& operator=(Communicator other) noexcept {
    impl_.swap(other.impl_);
    return *this;
  }

  bool valid() const { return impl_ != nullptr; }
  int rank() const;
  int size() const;
  // The rank of this process in the world communicator the group came from.
  int global_rank() const;
  // comm rank -> world rank, for every member.
  const std::vector<int>& world_ranks() const;
  // This rank's index among the members on its host, and how many members
  // share the host. Hosts are told apart by hostname, boot id and IPC
  // namespace, exchanged at init; on the world communicator LOCAL_RANK and
  // LOCAL_WORLD_SIZE take precedence when the launcher set them.
  int local_rank() const;
  int local_size() const;
  // Default deadline of every operation.
  std::chrono::milliseconds timeout() const;
  void set_timeout(std::chrono::milliseconds t);
  // Reproducible sums (TUTTI_REPRODUCIBLE=1 sets it on every communicator
  // at its start; a split one starts as its parent is): all_reduce, reduce
  // and reduce_scatter of float16, bfloat16, float32, float64, complex64
  // and complex128 with SUM and AVG, submitted while it is on, give bits
  // that depend on the multiset of the ranks' contributions alone, not on
  // the algorithm, medium, chunking, arrival or rank order
  // (docs/algorithms.md, "Reproducible sums": the method, its error bound
  // and its cost). Every member must set it alike before the same
  // operations. Other types and ops are exact already and run as before.
  void set_reproducible(bool on);
  bool reproducible() const;

  // ---- point to point. `tag` must be in [0, 2^31). ------------------------
  void send(const void* buf, std::size_t count, DataType dtype, int dst, int tag = 0);
  Work isend(const void* buf, std::size_t count, DataType dtype, int dst, int tag = 0);
  // `src` may be kAnySource; returns the rank the message came from. The
  // message must hold exactly count elements of dtype (else Mismatch).
  int recv(void* buf, std::size_t count, DataType dtype, int src, int tag = 0);
  Work irecv(void* buf, std::size_t count, DataType dtype, int src, int tag = 0);

  // ---- collectives --------------------------------------------------------
  // `count` is per rank (the size of each rank's contribution / block).
  void broadcast(void* buf, std::size_t count, DataType dtype, int root);
  Work ibroadcast(void* buf, std::size_t count, DataType dtype, int root);

  // recvbuf is used on root only (may be null elsewhere).
  void reduce(const void* sendbuf, void* recvbuf, std::size_t count, DataType dtype, ReduceOp op, int root);
  Work ireduce(const void* sendbuf, void* recvbuf, std::size_t count, DataType dtype, ReduceOp op, int root);

  void all_reduce(const void* sendbuf, void* recvbuf, std::size_t count, DataType dtype, ReduceOp op);
  Work iall_reduce(const void* sendbuf, void* recvbuf, std::size_t count, DataType dtype, ReduceOp op);

  // Root receives size()*count elements, rank r's at offset r*count.
  void gather(const void* sendbuf, void* recvbuf, std::size_t count, DataType dtype, int root);
  Work igather(const void* sendbuf, void* recvbuf, std::size_t count, DataType dtype, int root);
  // List form: recvbufs has size() entries on root (ignored elsewhere).
  void gather(const void* sendbuf, std::span<void* const> recvbufs, std::size_t count, DataType dtype, int root);
  Work igather(const void* sendbuf, std::span<void* const> recvbufs, std::size_t count, DataType dtype, int root);

  void all_gather(const void* sendbuf, void* recvbuf, std::size_t count, DataType dtype);
  Work iall_gather(const void* sendbuf, void* recvbuf, std::size_t count, DataType dtype);
  void all_gather(const void* sendbuf, std::span<void* const> recvbufs, std::size_t count, DataType dtype);
  Work iall_gather(const void* sendbuf, std::span<void* const> recvbufs, std::size_t count, DataType dtype);

  // Root sends size()*count elements; rank r receives the block at r*count.
  void scatter(const void* sendbuf, void* recvbuf, std::size_t count, DataType dtype, int root);
  Work iscatter(const void* sendbuf, void* recvbuf, std::size_t count, DataType dtype, int root);
  void scatter(std::span<const void* const> sendbufs, void* recvbuf, std::size_t count, DataType dtype, int root);
  Work iscatter(std::span<const void* const> sendbufs, void* recvbuf, std::size_t count, DataType dtype, int root);

  // sendbuf holds size()*count elements; rank r receives the reduction of
  // block r. In place: recvbuf == sendbuf + rank()*count*dtype_size.
  void reduce_scatter(const void* sendbuf, void* recvbuf, std::size_t count, DataType dtype, ReduceOp op);
  Work ireduce_scatter(const void* sendbuf, void* recvbuf, std::size_t count, DataType dtype, ReduceOp op);
  void reduce_scatter(std::span<const void* const> sendbufs, void* recvbuf, std::size_t count, DataType dtype,
                      ReduceOp op);
  Work ireduce_scatter(std::span<const void* const> sendbufs, void* recvbuf, std::size_t count, DataType dtype,
                       ReduceOp op);

  // Equal splits: block r of sendbuf (count elements) goes to rank r.
  void all_to_all(const void* sendbuf, void* recvbuf, std::size_t count, DataType dtype);
  Work iall_to_all(const void* sendbuf, void* recvbuf, std::size_t count, DataType dtype);
  // Per-rank counts and displacements, in elements (MPI_Alltoallv).
  void all_to_all_v(const void* sendbuf, std::span<const std::size_t> sendcounts, std::span<const std::size_t> sdispls,
                    void* recvbuf, std::span<const std::size_t> recvcounts, std::span<const std::size_t> rdispls,
                    DataType dtype);
  Work iall_to_all_v(const void* sendbuf, std::span<const std::size_t> sendcounts, std::span<const std::size_t> sdispls,
                     void* recvbuf, std::span<const std::size_t> recvcounts, std::span<const std::size_t> rdispls,
                     DataType dtype);

  void barrier();
  Work ibarrier();

  // ---- memory the ranks of a host share ------------------------------------
  // Collective (every rank calls it, in the same order relative to other
  // operations; the sizes may differ): `bytes` of memory, page-aligned, that
  // the other ranks of this communicator can address too when they all share
  // a host. all_reduce and reduce whose send and receive buffers lie in such
  // memory (of this communicator) on every rank read the peers' inputs and
  // write their outputs directly instead of copying through a segment (above
  // TUTTI_SHM_ONESHOT_BYTES; docs/architecture.md "Shared buffers"). Where
  // collectives of this communicator do not use shared memory (ranks on
  // several hosts, TUTTI_TRANSPORT=tcp, one rank) it is ordinary memory. Valid until
  // free_shared or the communicator's end.
  void* alloc_shared(std::size_t bytes);
  // The same, but each rank lets go of its part on its own, at any time and
  // from any thread, by dropping the returned pointer (and its copies): the
  // memory stays valid while the pointer lives, also after the
  // communicator's end, and a rank keeps the peers' parts mapped until every
  // rank has let go (torch tensors in shared memory, tutti.torch.empty).
  // Not for free_shared.
  std::shared_ptr<void> alloc_shared_owned(std::size_t bytes);
  // Collective: every rank passes what the same alloc_shared call returned it.
  // Ranks that pass pointers of different calls, or one alloc_shared did not
  // return, all fail with InvalidArgument naming what each passed, and
  // nothing is freed.
  void free_shared(void* ptr);

  // ---- groups -------------------------------------------------------------
  // Every member of this communicator must call new_group with the same
  // list, in the same order relative to other operations. Returns the new
  // communicator (ranks numbered in list order) on members, and nothing on
  // the others, which get no traffic from it.
  std::optional<Communicator> new_group(std::span<const int> ranks);
  // A group made by its members alone (MPI_Comm_create_group): the others
  // need not call it, and it sends nothing. The members pass the same list
  // and a `name` that no other group made from this communicator has (as
  // torch's group names are); the child's id comes from this
  // communicator's id, the name and the list. Works on a failed or revoked
  // communicator too: members known lost stay lost in the child. Returns
  // nothing where this rank is not in the list.
  std::optional<Communicator> new_group(std::span<const int> ranks, std::string_view name);
  // MPI_Comm_split: ranks with the same color form a communicator, ordered by
  // (key, old rank). color < 0 means "no communicator" (MPI_UNDEFINED).
  std::optional<Communicator> split(int color, int key);

  // Aborts this communicator: pending and later operations fail with
  // Error(Aborted). Safe from any thread.
  void abort(const std::string& reason = "abort() called");

  // ---- carrying on after a failure (docs/architecture.md, "Failure model") --
  // The members known to be lost (their process died or left, the
  // connection to it broke, or the survivors declared it lost because it
  // stopped answering), in this communicator's numbering, ascending. Safe
  // from any thread.
  std::vector<int> failed_ranks() const;
  // The error this communicator failed with (what later calls throw), or
  // nothing while it works. Safe from any thread.
  std::optional<Error> error() const;
  // Revokes this communicator on every member (MPIX_Comm_revoke): every
  // pending and later operation on it fails with Error(Revoked), wherever
  // it waits, so that no survivor waits for a rank that will never come.
  // agree and shrink still work on it. Safe from any thread.
  void revoke();
  // Fault-tolerant agreement (MPIX_Comm_agree), collective over the members
  // that are alive, on a failed or revoked communicator too: returns the
  // AND of `flag` over the members that took part, and puts into *failed
  // (when given) the members agreed lost, ascending. Every survivor gets
  // the same two answers, even when members die during the agreement; a
  // member that does not take part within timeout() is declared lost, and
  // one that was declared lost gets Error(PeerLost) instead. From then on
  // every survivor counts the agreed losses in failed_ranks().
  bool agree(bool flag, std::vector<int>* failed = nullptr);
  // Collective over the survivors (MPIX_Comm_shrink): a new communicator of
  // exactly the members alive, ordered by their rank here, usable at once,
  // with shared memory and connections of its own. Members that die during
  // the shrink are left out, not waited for; the others agree on who is
  // left as agree() does. Works on a failed or revoked communicator.
  Communicator shrink();

  // The flight recorder (TUTTI_TRACE_BUFFER): this communicator's last
  // operations as JSON (sequence number, kind, sizes, peers, state,
  // timestamps), and a dump of every communicator of this process into
  // $TUTTI_TRACE_DIR/tutti-trace-<job>-<rank>.json, whose path it returns
  // ("" when tracing is off or the file cannot be written). tutti-trace
  // reads the dumps of all ranks. A failed or timed-out operation and
  // SIGUSR1 write the same dump.
  std::string trace_json() const;
  std::string dump_trace() const;

  // Typed conveniences.
  template <class T>
  void all_reduce(std::span<T> buf, ReduceOp op) {
    all_reduce(buf.data(), buf.data(), buf.size(), dtype_of_v<T>, op);
  }
  template <class T>
  void broadcast(std::span<T> buf, int root) {
    broadcast(buf.data(), buf.size(), dtype_of_v<T>, root);
  }

 private:
  // The implementation (src/core/communicator_impl.h) is tutti's own: not
  // part of the API, and not exported from libtutti.so.
  using Impl = detail::CommunicatorImpl;
  explicit Communicator(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
  friend Communicator init(const InitOptions& options);
  friend struct detail::CommunicatorImpl;
  std::shared_ptr<Impl> impl_;
};

struct InitOptions {
  int rank = -1;        // -1: from the environment
  int world_size = -1;  // -1: from the environment
  // Where rank 0 serves the store; "": MASTER_ADDR. With `store` set, only
  // a hint of the route peers use (the host the caller's store is on).
  std::string master_addr;
  int master_port = -1;  // -1: MASTER_PORT
  // Rendezvous through this store instead of a TCP store at master_addr.
  // With store, rank and world_size all set, the launcher variables of the
  // environment (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT,
  // OMPI_*, PMI_*, SLURM_*) are not read at all.
  std::shared_ptr<Store> store;
  // Deadline of init and default of every operation; 0: TUTTI_TIMEOUT.
  std::chrono::milliseconds timeout{0};
  // The job secret every store and peer connection proves it holds;
  // "": TUTTI_JOB_SECRET (tuttirun sets one per job).
  std::string job_secret;
};

// Joins the job and returns the world communicator. Blocks until every rank
// has joined, or fails with Error(Timeout) naming the ranks that never did.
// Rank and size come from RANK/WORLD_SIZE, else from what Open MPI's mpirun
// (OMPI_COMM_WORLD_*), MPICH's hydra (PMI_*) or Slurm (SLURM_PROCID,
// SLURM_NTASKS) set; the store from MASTER_ADDR/MASTER_PORT, served by rank 0.
Communicator init();
Communicator init(const InitOptions& options);

}  // namespace tutti

#pragma GCC visibility pop
