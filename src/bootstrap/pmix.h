// A minimal PMIx client for the rendezvous under Open MPI's mpirun (and
// other PMIx servers): rank 0 puts its store's "host:port", every rank
// fences, the others get it. libpmix is loaded at run time (dlopen of
// libpmix.so.2), so libtutti does not depend on it; it is compiled in only
// when CMake found PMIx's headers (TUTTI_HAVE_PMIX).
#pragma once

#include <string>

#include "common/completion.h"

namespace tutti::detail {

// Empty when the PMIx client library can be used here; otherwise why not
// (tutti built without PMIx's headers, or libpmix.so.2 not loadable). Loads
// the library on first use and keeps it loaded.
std::string pmix_unavailable();

// The exchange of rank 0's record through PMIx: PMIx_Init, rank 0's
// PMIx_Put (PMIX_GLOBAL) and PMIx_Commit, PMIx_Fence over the namespace
// collecting the data, PMIx_Get of rank 0's key on the others,
// PMIx_Finalize. `rank` must be this process's PMIx rank. Returns rank 0's
// record. Throws Error naming the call that failed and its status (Timeout
// when `deadline` passes first).
std::string pmix_exchange(int rank, const std::string& record, TimePoint deadline);

}  // namespace tutti::detail
