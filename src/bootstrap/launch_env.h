// The job's shape as launchers describe it in the environment: torchrun (and
// Kubeflow's PyTorchJob, and tuttirun), Open MPI's mpirun, MPICH's mpiexec
// (hydra) and Slurm's srun. parse_launch_env is pure: it reads a map of
// variables and says which rank this is, of how many, and where the ranks
// meet; open_rendezvous then does the meeting. docs/launching.md describes
// the rules (precedence, conflicts, derived ports).
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/completion.h"
#include "tutti/store.h"

namespace tutti::detail {

struct Config;

using EnvMap = std::map<std::string, std::string>;

struct LaunchEnv {
  // Who set the rank variables: "torchrun", "Open MPI", "hydra", "Slurm", or
  // "" when none did (a job of one).
  std::string launcher;
  int rank = -1, size = -1;
  int local_rank = -1, local_size = -1;  // -1: not known from the environment
  // A malformed rank variable (a non-number, one of a pair without the
  // other), or rank variables that disagree: the message of the
  // InvalidArgument init throws when it needs the rank or size from the
  // environment, never when the caller passed both. Empty when fine.
  std::string rank_error;
  std::string conflict;

  // Where the ranks meet.
  enum class Rendezvous {
    Master,  // rank 0 serves the store at master_addr:master_port
    Pmi,     // rank 0 serves it on a free port and publishes it through PMI-1 (PMI_FD)
    Pmix,    // ... and publishes it through PMIx (Open MPI's mpirun); rendezvous_file
             // when the PMIx client library is not available here
    File,    // ... and publishes it in a file, rendezvous_file
  };
  Rendezvous rendezvous = Rendezvous::Master;
  std::string master_addr;  // empty: not known (init fails for a world > 1)
  int master_port = -1;     // -1: not known
  std::string master_from;  // how master_addr/master_port were found, for messages
  std::string rendezvous_file;
  int pmi_fd = -1;
  // Under Slurm with a derived port: "slurm-job-<job>.<step>", which init
  // uses as the job secret when none is set, so that a step whose port
  // collides with another's is refused by its store instead of joining it.
  // Not a secret (any user can read it); TUTTI_JOB_SECRET stays the defence.
  std::string job_key;
};

// Reports malformed rank variables in `rank_error` and disagreements in
// `conflict`; throws InvalidArgument for other malformed values (MASTER_PORT,
// Slurm's, TUTTI_PMIX), which only the rendezvous through the environment reads.
LaunchEnv parse_launch_env(const EnvMap& env);

// Expands a Slurm host list ("n[01-04,07],login1", "a[1-2]b[3-4]") in order.
// Throws InvalidArgument when malformed.
std::vector<std::string> expand_slurm_hostlist(const std::string& list);

// The rendezvous port of a Slurm step: 12000 + (job_id * 64 + step_id) mod 20000,
// below Linux's ephemeral range.
int slurm_rendezvous_port(unsigned long long job_id, unsigned long long step_id);

// Tasks on node `node` from SLURM_STEP_TASKS_PER_NODE's form "2(x3),1";
// -1 when malformed or out of range.
int slurm_tasks_on_node(const std::string& tasks_per_node, int node);

// Every variable of this process's environment.
EnvMap current_environment();

// The meeting of the ranks: a store (and, on rank 0, its server) plus the
// host and port that tell which local address peers can reach.
struct Rendezvous {
  std::unique_ptr<TcpStoreServer> server;
  std::shared_ptr<Store> store;
  std::string host;
  int port = -1;
  std::string file_to_remove;  // rank 0's rendezvous file, removed with this object
  Rendezvous() = default;
  Rendezvous(Rendezvous&&) = default;
  Rendezvous& operator=(Rendezvous&&) = default;
  ~Rendezvous();
};

Rendezvous open_rendezvous(const LaunchEnv& launch, const Config& config, int rank, int size, const std::string& secret,
                           std::chrono::milliseconds timeout);

// Publishes this rank's `record` (one line: init's host record) and its
// network transport's `address` (opaque bytes: transport.h,
// TransportFactory) under "tutti/rank/<rank>", and reads every rank's in
// one store request per 65,536 ranks, which waits until all have published.
// Fails with Timeout naming ranks that never published by `deadline`.
void exchange_records(Store& store, int rank, int size, const std::string& record, const std::string& address,
                      std::vector<std::string>& records, std::vector<std::string>& addresses, TimePoint deadline);

}  // namespace tutti::detail
