// Sub-communicators: new_group (every member of the parent calls it with the
// same list; or, named, only the group's members), and split
// (MPI_Comm_split). A child's id is derived from the parent's id, the
// parent's count of groups created (or the name) and the membership, so
// every member computes the same id without talking, and ranks that pass
// different lists get different ids (and time out) instead of mixing traffic;
// and the two-level medium's children.
#include <algorithm>
#include <cstring>

#include "common/log.h"
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
  child->reproducible.store(parent.reproducible.load());
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

// The two-level medium's children (media/two_level.h): the members on this
// host, and those of this rank's local index across hosts.
detail::Hierarchy& detail::CommunicatorImpl::hierarchy() {
  if (hier_) return *hier_;
  const auto& host_of = job->host_of;
  auto h = std::make_unique<Hierarchy>();
  std::vector<int> host_ids;
  h->host_of_rank.resize(size);
  h->local_of_rank.resize(size);
  std::vector<int> per_host_count;
  for (int r = 0; r < size; ++r) {
    const int id = host_of[world[r]];
    auto it = std::find(host_ids.begin(), host_ids.end(), id);
    const int hi = static_cast<int>(it - host_ids.begin());
    if (it == host_ids.end()) {
      host_ids.push_back(id);
      per_host_count.push_back(0);
    }
    h->host_of_rank[r] = hi;
    h->local_of_rank[r] = per_host_count[hi]++;
  }
  h->hosts = static_cast<int>(host_ids.size());
  h->per_host = per_host_count[0];
  h->host_major = true;
  for (int r = 0; r < size; ++r)
    h->host_major = h->host_major && r == h->host_of_rank[r] * h->per_host + h->local_of_rank[r];
  const int my_host = h->host_of_rank[rank], my_local = h->local_of_rank[rank];
  std::vector<int> local_members, cross_members;
  for (int r = 0; r < size; ++r)
    if (h->host_of_rank[r] == my_host) local_members.push_back(r);
  for (int hi = 0; hi < h->hosts; ++hi)
    for (int r = 0; r < size; ++r)
      if (h->host_of_rank[r] == hi && h->local_of_rank[r] == my_local) cross_members.push_back(r);
  // Ids every member derives alike, apart from the user's groups (whose
  // ids count groups_created).
  const std::uint64_t local_id =
      mix64(comm_id ^ 0x6c6f63616c2d3263ull ^ mix64(static_cast<std::uint64_t>(my_host) + 1));
  const std::uint64_t cross_id =
      mix64(comm_id ^ 0x63726f73732d3263ull ^ mix64(static_cast<std::uint64_t>(my_local) + 1));
  // They run the parts of this communicator's operations: never
  // reproducible sums of their own (this one's phases sum integers).
  std::shared_ptr<CommunicatorImpl> local = make_child_impl(*this, local_id, local_members);
  local->reproducible.store(false);
  h->local = Communicator(std::move(local));
  // The L cross communicators share each host's link (all_to_all's
  // rules count that).
  std::shared_ptr<CommunicatorImpl> cross = make_child_impl(*this, cross_id, cross_members);
  cross->set_topology(h->per_host);
  cross->reproducible.store(false);
  h->cross = Communicator(std::move(cross));
  h->leader_bytes = job->config.two_level_leader_bytes;
  h->thresholds = planner.thresholds().two_level;
  TwoLevelChoices choices = planner.two_level_choices(h->per_host);
  h->forms = std::move(choices.forms);
  h->pieces = std::move(choices.pieces);
  h->piece_size = std::move(choices.piece_size);
  h->flat = std::move(choices.flat);
  TUTTI_LOG(Debug, "two-level collectives on " << h->hosts << " hosts x " << h->per_host
                                               << " ranks: all_reduce through one leader per host up to "
                                               << h->leader_bytes << " bytes");
  hier_ = std::move(h);
  hier_published_.store(hier_.get(), std::memory_order_release);
  return *hier_;
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
