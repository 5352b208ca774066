#pragma once
// Every collective algorithm of the library, declared once: its collective,
// name, one-line description, the medium it runs on, the function that runs
// it and when the table chooses it. The planner (plan/planner.h) picks from
// here; TUTTI_ALGO, the flight recorder, error messages and
// docs/algorithms.md (`tutti-config --algorithms`) take their names from here.
//
// Each medium declares its own algorithms (src/media/: shm_medium.cc's
// kShm, two_level.cc's kTwoLevel, network.cc's kNetwork, with their
// `chosen` rules); registry.cc puts them in one table. To add an algorithm:
// write it in src/algorithms/ (against OpContext, or ShmGroup in
// shm_collectives.cc), then add one entry to its medium's table with the
// function that runs it against that medium's context. Nothing else names it.

#include <span>
#include <string>
#include <string_view>

#include "algorithms/algorithm.h"

namespace tutti::detail {

// Every algorithm, collective by collective.
std::span<const Algorithm> algorithms();
// The table's copy of a medium's entry (a pointer into its medium's table).
const Algorithm& registered(const Algorithm& entry);
// The algorithm of `collective` called `name`, or null (TUTTI_ALGO, tools).
const Algorithm* find_algorithm(Collective collective, std::string_view name);
// The network algorithm chosen where no rule holds (runs for every size and shape).
const Algorithm& fallback_algorithm(Collective collective);
// "recursive_doubling, rabenseifner, ring, shm, two_level", for errors and docs.
std::string algorithm_names(Collective collective);
// docs/algorithms.md's table of every algorithm (`tutti-config --algorithms`).
std::string algorithms_markdown();

}  // namespace tutti::detail
