#include "bootstrap/launch_env.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "common/config.h"
#include "net/ifname.h"
#include "tutti/error.h"

extern char** environ;

namespace tutti::detail {

namespace {

Error invalid(const std::string& what) { return Error(ErrorKind::InvalidArgument, what); }

const std::string* get(const EnvMap& env, const char* name) {
  auto it = env.find(name);
  return (it == env.end() || it->second.empty()) ? nullptr : &it->second;
}

long long parse_number(const std::string& name, const std::string& value, long long max) {
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(value.c_str(), &end, 10);
  if (value.empty() || end == value.c_str() || *end != '\0' || errno != 0 || v < 0 || v > max) {
    std::string m = name;
    m += "='";
    m += value;
    m += "' is not a valid non-negative integer";
    throw invalid(m);
  }
  return v;
}

int parse_int(const std::string& name, const std::string& value) {
  return static_cast<int>(parse_number(name, value, 1 << 24));
}

// One launcher's rank and size variables.
struct Source {
  const char* launcher;
  const char* rank_var;
  const char* size_var;
  const char* local_rank_var;
  const char* local_size_var;
};

// In precedence order (docs/launching.md).
const Source kSources[] = {
    {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
    {"Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_LOCAL_SIZE"},
    {"hydra", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"},
    {"Slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", nullptr},
};

struct Found {
  const Source* source;
  int rank, size;
};

std::uint64_t fnv1a(const std::string& s) {
  std::uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

std::string describe(const Found& f) {
  std::string s = f.source->rank_var;
  s += '=';
  s += std::to_string(f.rank);
  s += ", ";
  s += f.source->size_var;
  s += '=';
  s += std::to_string(f.size);
  s += " (";
  s += f.source->launcher;
  s += ')';
  return s;
}

}  // namespace

std::vector<std::string> expand_slurm_hostlist(const std::string& list) {
  std::vector<std::string> out;
  // Split at commas outside brackets.
  std::vector<std::string> items;
  std::string cur;
  int depth = 0;
  for (char c : list) {
    if (c == '[') ++depth;
    if (c == ']') --depth;
    if (depth < 0 || depth > 1) throw invalid("malformed Slurm host list '" + list + "'");
    if (c == ',' && depth == 0) {
      items.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  if (depth != 0) throw invalid("malformed Slurm host list '" + list + "' (unclosed '[')");
  items.push_back(cur);
  for (const std::string& item : items) {
    if (item.empty()) throw invalid("malformed Slurm host list '" + list + "' (empty name)");
    auto open = item.find('[');
    if (open == std::string::npos) {
      out.push_back(item);
      continue;
    }
    auto close = item.find(']', open);
    std::string prefix = item.substr(0, open);
    std::string ranges = item.substr(open + 1, close - open - 1);
    // The rest may hold further brackets: expand it recursively.
    std::vector<std::string> rests{""};
    if (close + 1 < item.size()) rests = expand_slurm_hostlist(item.substr(close + 1));
    std::size_t pos = 0;
    while (pos <= ranges.size()) {
      auto comma = ranges.find(',', pos);
      if (comma == std::string::npos) comma = ranges.size();
      std::string r = ranges.substr(pos, comma - pos);
      pos = comma + 1;
      auto dash = r.find('-');
      std::string lo = r.substr(0, dash), hi = dash == std::string::npos ? lo : r.substr(dash + 1);
      auto digits = [&](const std::string& s) {
        return !s.empty() && s.size() <= 18 && s.find_first_not_of("0123456789") == std::string::npos;
      };
      if (!digits(lo) || !digits(hi)) throw invalid("malformed range '" + r + "' in Slurm host list '" + list + "'");
      long long a = std::stoll(lo), b = std::stoll(hi);
      if (b < a || b - a > 100000) throw invalid("malformed range '" + r + "' in Slurm host list '" + list + "'");
      const std::size_t width = lo.size();  // zero padding of the first bound
      for (long long v = a; v <= b; ++v) {
        std::string num = std::to_string(v);
        if (num.size() < width) num.insert(0, width - num.size(), '0');
        for (const std::string& rest : rests) {
          std::string h = prefix;
          h += num;
          h += rest;
          out.push_back(std::move(h));
        }
      }
    }
  }
  return out;
}

int slurm_rendezvous_port(unsigned long long job_id, unsigned long long step_id) {
  return static_cast<int>(12000 + (job_id * 64 + step_id) % 20000);
}

int slurm_tasks_on_node(const std::string& tasks_per_node, int node) {
  // "2(x3),1": two tasks on each of three nodes, then one.
  int seen = 0;
  std::size_t pos = 0;
  while (pos < tasks_per_node.size()) {
    auto comma = tasks_per_node.find(',', pos);
    if (comma == std::string::npos) comma = tasks_per_node.size();
    std::string item = tasks_per_node.substr(pos, comma - pos);
    pos = comma + 1;
    int count = 0, repeat = 1;
    char tail = 0;
    if (std::sscanf(item.c_str(), "%d(x%d)%c", &count, &repeat, &tail) == 2 ||
        (std::sscanf(item.c_str(), "%d%c", &count, &tail) == 1 && (repeat = 1))) {
      if (count < 0 || repeat < 1) return -1;
      if (node < seen + repeat) return count;
      seen += repeat;
    } else {
      return -1;
    }
  }
  return -1;
}

LaunchEnv parse_launch_env(const EnvMap& env) {
  LaunchEnv out;
  std::vector<Found> found;
  for (const Source& s : kSources) {
    const std::string* r = get(env, s.rank_var);
    const std::string* n = get(env, s.size_var);
    if (!r && !n) continue;
    if (!r || !n) {
      std::string m = r ? s.size_var : s.rank_var;
      m += " is not set but ";
      m += r ? s.rank_var : s.size_var;
      m += " is; set both (or neither)";
      if (out.rank_error.empty()) out.rank_error = m;
      continue;
    }
    try {
      found.push_back({&s, parse_int(s.rank_var, *r), parse_int(s.size_var, *n)});
    } catch (const Error& e) {
      if (out.rank_error.empty()) out.rank_error = e.message();
    }
  }
  if (!out.rank_error.empty()) found.clear();  // nothing about the ranks is trusted
  if (found.empty()) {
    // Nothing says which rank this is: a job of one, unless told otherwise.
    if (const std::string* v = get(env, "LOCAL_RANK")) out.local_rank = parse_int("LOCAL_RANK", *v);
    if (const std::string* v = get(env, "LOCAL_WORLD_SIZE")) out.local_size = parse_int("LOCAL_WORLD_SIZE", *v);
  } else {
    const Found& chosen = found.front();
    const std::string name = chosen.source->launcher;
    out.launcher = name;
    out.rank = chosen.rank;
    out.size = chosen.size;
    // A launcher that starts its ranks inside another's step (torchrun or
    // tuttirun inside srun, mpirun inside an allocation) describes the
    // ranks; the outer launcher's variables then describe the step and
    // are not compared.
    const bool nested_torchrun = name == "torchrun" && (get(env, "TORCHELASTIC_RUN_ID") || get(env, "TUTTI_LAUNCHER"));
    for (std::size_t i = 1; i < found.size(); ++i) {
      const Found& other = found[i];
      const std::string on = other.source->launcher;
      if (nested_torchrun) continue;
      if ((name == "Open MPI" || name == "hydra") && on == "Slurm") continue;
      if (other.rank == chosen.rank && other.size == chosen.size) continue;
      if (!out.conflict.empty()) out.conflict += "; ";
      out.conflict += describe(chosen);
      out.conflict += " disagrees with ";
      out.conflict += describe(other);
    }
    if (!out.conflict.empty())
      out.conflict +=
          ": the environment holds variables of more than one launcher (a stale export?); unset the ones that do not "
          "belong to this launch";
    if (const std::string* v = get(env, chosen.source->local_rank_var))
      out.local_rank = parse_int(chosen.source->local_rank_var, *v);
    if (chosen.source->local_size_var) {
      if (const std::string* v = get(env, chosen.source->local_size_var))
        out.local_size = parse_int(chosen.source->local_size_var, *v);
    } else if (name == "Slurm") {
      const std::string* tpn = get(env, "SLURM_STEP_TASKS_PER_NODE");
      if (!tpn) tpn = get(env, "SLURM_TASKS_PER_NODE");
      const std::string* node = get(env, "SLURM_NODEID");
      if (tpn && node) {
        int n = slurm_tasks_on_node(*tpn, parse_int("SLURM_NODEID", *node));
        if (n > 0) out.local_size = n;
      }
    }
  }

  // The local numbering must fit inside itself and the world: a rank that
  // believed it was local rank 7 of 2 would pick another's device or CPUs.
  {
    const Source* src = found.empty() ? &kSources[0] : found.front().source;
    const std::string lr = src->local_rank_var, ls = src->local_size_var ? src->local_size_var : "the local size";
    std::string bad;
    if (out.local_size == 0)
      bad = ls + " is 0";
    else if (out.local_rank >= 0 && out.local_size > 0 && out.local_rank >= out.local_size)
      bad = lr + " " + std::to_string(out.local_rank) + " is not below " + ls + " " + std::to_string(out.local_size);
    else if (out.size > 0 && out.local_size > out.size)
      bad = ls + " " + std::to_string(out.local_size) + " exceeds " + src->size_var + " " + std::to_string(out.size);
    if (!bad.empty() && out.rank_error.empty()) out.rank_error = bad + ": the launch's variables contradict each other";
  }

  // Where to meet.
  const std::string* addr = get(env, "MASTER_ADDR");
  const std::string* port = get(env, "MASTER_PORT");
  if (port) {
    out.master_port = static_cast<int>(parse_number("MASTER_PORT", *port, 1 << 24));
    out.master_from = "MASTER_PORT";
  }
  auto slurm_port = [&] {
    if (out.master_port >= 0) return;
    const std::string* job = get(env, "SLURM_JOB_ID");
    if (!job) job = get(env, "SLURM_JOBID");
    const std::string* step = get(env, "SLURM_STEP_ID");
    if (!step) step = get(env, "SLURM_STEPID");
    if (!job) return;
    unsigned long long j = static_cast<unsigned long long>(parse_number("SLURM_JOB_ID", *job, 1ll << 40));
    unsigned long long s = step ? static_cast<unsigned long long>(parse_number("SLURM_STEP_ID", *step, 1ll << 40)) : 0;
    out.master_port = slurm_rendezvous_port(j, s);
    out.job_key = "slurm-job-" + std::to_string(j) + "." + std::to_string(s);
    out.master_from = "derived from SLURM_JOB_ID=" + *job + " and SLURM_STEP_ID=" + (step ? *step : std::string("0"));
  };
  if (addr) {
    out.master_addr = *addr;
    if (out.launcher == "Slurm") slurm_port();
  } else if (out.launcher == "Slurm") {
    const char* var = "SLURM_STEP_NODELIST";
    const std::string* list = get(env, var);
    if (!list) list = get(env, var = "SLURM_JOB_NODELIST");
    if (!list) list = get(env, var = "SLURM_NODELIST");
    if (list) {
      auto hosts = expand_slurm_hostlist(*list);
      out.master_addr = hosts.front();
      slurm_port();
      std::string from = "the first host of ";
      from += var;
      from += '=';
      from += *list;
      from += ", port ";
      from += out.master_from;
      out.master_from = from;
    }
  } else if (out.launcher == "hydra" && get(env, "PMI_FD")) {
    out.rendezvous = LaunchEnv::Rendezvous::Pmi;
    out.pmi_fd = parse_int("PMI_FD", *get(env, "PMI_FD"));
  } else if (out.launcher == "Open MPI") {
    // Rank 0 publishes the store through mpirun's PMIx server when it runs
    // one (PMIX_NAMESPACE, PMIX_RANK) and TUTTI_PMIX is not 0; otherwise, and
    // when libpmix cannot be loaded, in a file named after this mpirun (its
    // job id and contact URI), in a directory the ranks share.
    const std::string* pmix = get(env, "TUTTI_PMIX");
    if (pmix && *pmix != "0" && *pmix != "1")
      throw invalid("TUTTI_PMIX='" + *pmix + "' is neither 0 (do not use PMIx) nor 1");
    const bool use_pmix = get(env, "PMIX_NAMESPACE") && get(env, "PMIX_RANK") && !(pmix && *pmix == "0");
    const std::string* jobid = get(env, "OMPI_MCA_ess_base_jobid");
    if (!jobid) jobid = get(env, "PMIX_NAMESPACE");
    if (jobid) {
      std::string key = *jobid;
      key += '|';
      if (const std::string* uri = get(env, "OMPI_MCA_orte_hnp_uri")) key += *uri;
      if (const std::string* ns = get(env, "PMIX_NAMESPACE")) key += *ns;
      const std::string* dir = get(env, "TUTTI_RENDEZVOUS_DIR");
      std::string path = dir ? *dir : std::string("/tmp");
      char name[64];
      std::snprintf(name, sizeof name, "/tutti-rendezvous-%016llx", static_cast<unsigned long long>(fnv1a(key)));
      path += name;
      out.rendezvous = use_pmix ? LaunchEnv::Rendezvous::Pmix : LaunchEnv::Rendezvous::File;
      out.rendezvous_file = path;
    }
  }
  return out;
}

EnvMap current_environment() {
  EnvMap env;
  for (char** e = environ; e && *e; ++e) {
    const char* eq = std::strchr(*e, '=');
    if (!eq) continue;
    env.emplace(std::string(*e, static_cast<std::size_t>(eq - *e)), std::string(eq + 1));
  }
  return env;
}

}  // namespace tutti::detail
