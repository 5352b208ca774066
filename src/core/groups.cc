// Sub-communicators: new_group (every member of the parent calls it with the
// same list; or, named, only the group's members), and split
// (MPI_Comm_split). A child's id is derived from the parent's id, the
// parent's count of groups created (or the name) and the membership, so
// every member computes the same id without talking, and ranks that pass
// different lists get different ids (and time out) instead of mixing traffic.
#include <algorithm>
#include <cstring>

#include "common/tags.h"
#include "core/communicator_impl.h"
#include "core/validate.h"

namespace tutti {

using namespace detail;

std::shared_ptr<detail::CommunicatorImpl> make_child_impl(detail::CommunicatorImpl& parent, std::uint64_t id,
                                                          const std::vector<int>& members_parent_ranks) {
  auto child = std::make_shared<detail::CommunicatorImpl>();
  child->job = parent.job;
  child->comm_id = id;
  child->size = static_cast<int>(members_parent_ranks.size());
  child->timeout.store(parent.timeout.load());
  auto map = std::make_shared<std::vector<int>>(parent.job->transport->size(), -1);
  for (int i = 0; i < child->size; ++i) {
    int w = parent.world[members_parent_ranks[i]];
    child->world.push_back(w);
    (*map)[w] = i;
    if (members_parent_ranks[i] == parent.rank) child->rank = i;
  }
  child->world_to_comm = map;
  child->recorder.set_capacity(parent.job->config.trace_buffer);
  child->set_topology();
  register_trace_source(child.get());
  child->job->add_comm(child.get());
  return child;
}

namespace {
// The list of a new group, checked: every rank once, each in the parent.
std::vector<int> checked_members(const detail::CommunicatorImpl& parent, std::span<const int> ranks,
                                 std::vector<bool>& seen) {
  Validator v{parent.rank, parent.size, "new_group"};
  std::vector<int> members(ranks.begin(), ranks.end());
  seen.assign(static_cast<std::size_t>(parent.size), false);
  if (members.empty()) v.fail("the rank list is empty");
  for (int r : members) {
    if (r < 0 || r >= parent.size)
      v.fail("rank " + std::to_string(r) + " is not in this communicator (size " + std::to_string(parent.size) + ")");
    if (seen[static_cast<std::size_t>(r)]) v.fail("rank " + std::to_string(r) + " is listed twice");
    seen[static_cast<std::size_t>(r)] = true;
  }
  return members;
}
}  // namespace

std::optional<Communicator> Communicator::new_group(std::span<const int> ranks) {
  std::vector<bool> seen;
  std::vector<int> members = checked_members(*impl_, ranks, seen);
  impl_->throw_if_aborted();
  std::uint64_t id = mix64(impl_->comm_id ^ mix64(++impl_->groups_created));
  for (int r : members) id = mix64(id ^ static_cast<std::uint64_t>(r));
  if (!seen[static_cast<std::size_t>(impl_->rank)]) return std::nullopt;
  return Communicator(make_child_impl(*impl_, id, members));
}

std::optional<Communicator> Communicator::new_group(std::span<const int> ranks, std::string_view name) {
  std::vector<bool> seen;
  std::vector<int> members = checked_members(*impl_, ranks, seen);
  if (!seen[static_cast<std::size_t>(impl_->rank)]) return std::nullopt;
  // FNV-1a of the name, then the members: no counter, so that ranks outside
  // the group (which do not call this) leave nothing out of step.
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : name) h = (h ^ c) * 0x100000001b3ULL;
  std::uint64_t id = mix64(impl_->comm_id ^ mix64(h ^ 0x6e616d6564ULL));  // "named"
  for (int r : members) id = mix64(id ^ static_cast<std::uint64_t>(r));
  return Communicator(make_child_impl(*impl_, id, members));
}

std::optional<Communicator> Communicator::split(int color, int key) {
  const int n = impl_->size;
  std::int64_t mine[2] = {color, key};
  std::vector<std::int64_t> all(2 * n);
  all_gather(mine, all.data(), 2, DataType::Int64);
  std::uint64_t counter = ++impl_->groups_created;
  if (color < 0) return std::nullopt;
  std::vector<int> members;
  for (int r = 0; r < n; ++r)
    if (all[2 * r] == color) members.push_back(r);
  std::stable_sort(members.begin(), members.end(), [&](int a, int b) { return all[2 * a + 1] < all[2 * b + 1]; });
  std::uint64_t id = mix64(impl_->comm_id ^ mix64(counter) ^ mix64(static_cast<std::uint64_t>(color) + 0x51));
  return Communicator(make_child_impl(*impl_, id, members));
}

}  // namespace tutti
