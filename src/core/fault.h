#pragma once
// Fault-tolerant agreement among the survivors of a communicator: what
// Communicator::agree and Communicator::shrink run (docs/architecture.md,
// "Failure model").
//
// One service per process (FaultService, started at the first agreement)
// owns a channel of its own on the job's transport, so that agreements work
// on communicators that failed or were revoked. Its thread answers the other
// ranks also after this rank's agree returned: a rank that takes over as
// coordinator asks every survivor, and one that already decided answers
// with the decision.
//
// The protocol, per agreement (communicator, instance):
// - The coordinator is the lowest member this rank does not know lost. Each
//   other member sends it a contribution (its flag and the members it knows
//   lost) and so promises to accept no decision from a lower coordinator.
// - The coordinator waits for a contribution from every member it does not
//   know lost; one that has not sent its own within the communicator's
//   timeout is declared lost (Transport::declare_lost: every rank treats it
//   as lost from then on, and it is cut off). It then decides: the AND of
//   the flags and the union of the losses, sent to every member.
// - A member whose coordinator is lost moves to the next one. A coordinator
//   that is not the lowest member first asks every survivor (request): a
//   member that already decided answers with that decision, which the new
//   coordinator then adopts and passes on, so that no two survivors decide
//   differently; the others answer with a contribution. A member waits for
//   its coordinator at most twice the timeout (the coordinator itself may
//   wait a timeout for a stopped member) before it declares it lost.
// - Quorum. A member declared lost may still be running (stopped, or cut off
//   by the network while its connections stay open): the coordinator
//   decides only when the members that took part are more than half of
//   those not known dead for certain (their connection broke, or an earlier
//   agreement left them out). Otherwise it decides "no majority", and every
//   member fails with Timeout: of two sides that cannot hear each other at
//   most one carries on.

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <list>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "transport/transport.h"

namespace tutti::detail {

struct JobState;

struct Agreement {
  bool flag = true;         // the AND of the flags of the members that took part
  std::vector<int> failed;  // the members agreed lost (member numbers, ascending)
};

class FaultService {
 public:
  explicit FaultService(JobState& job);
  ~FaultService();
  FaultService(const FaultService&) = delete;
  FaultService& operator=(const FaultService&) = delete;

  // Agreement number `instance` of communicator `comm_id`, whose members are
  // the world ranks `members`; this rank is member `me`. Blocks until the
  // survivors decide. Throws Error(PeerLost) when the others declared this
  // rank lost (`where` prefixes the message).
  Agreement agree(std::uint64_t comm_id, std::uint64_t instance, const std::vector<int>& members, int me, bool flag,
                  std::chrono::milliseconds timeout, const std::string& where);
  // The job's set of lost ranks grew (JobState::fail_peer).
  void poke();

 private:
  enum class Type : std::uint8_t { Wake = 0, Contribution = 1, Request = 2, Decision = 3 };
  // What a message carries besides its header.
  struct Report {
    bool flag = true;
    bool no_quorum = false;       // a decision that no majority took part
    std::vector<char> lost;       // per world rank
    std::vector<char> suspected;  // per world rank: declared lost during this agreement
  };
  struct Instance {
    bool joined = false;
    std::vector<int> members;  // world ranks
    std::vector<int> index;    // world rank -> member number, or -1
    int me = -1;
    bool flag = true;
    std::chrono::milliseconds timeout{};
    std::vector<char> failed;     // per member: known lost here
    std::vector<char> suspected;  // per member: declared lost during this agreement (by any member)
    // Contributions addressed to this rank, by world rank (also those that
    // came before this rank joined).
    std::map<int, Report> reports;
    // Requests of coordinators not answered yet: (world rank, ballot).
    std::vector<std::pair<int, int>> requests;
    int promised = -1;  // the highest coordinator (member number) this rank contributed to
    int sent_to = -1;   // the coordinator it last contributed to
    bool coordinating = false;
    TimePoint deadline{};
    bool early = false;  // a decision that came before this rank joined
    int early_from = -1, early_ballot = -1;
    Report early_decision;
    bool decided = false;
    bool excluded = false;  // this rank was declared lost
    std::string why;        // ...by whom
    Report result;          // the decision
  };
  using Key = std::pair<std::uint64_t, std::uint64_t>;

  void run();
  void handle(const std::vector<char>& msg, int from);
  void step(const Key& key, Instance& in);
  // lost_ from the job's losses (under mu_; takes JobState::comms_mu).
  void update_lost();
  void refresh(Instance& in);
  void decide(const Key& key, Instance& in);
  void accept(const Key& key, Instance& in, int from, int ballot, const Report& d);
  void answer_request(const Key& key, Instance& in, int from, int ballot);
  void send(int to, Type type, const Key& key, int ballot, const Report* r);
  Report report_of(const Instance& in) const;  // this rank's contribution
  void send_decision(const Key& key, const Instance& in, int to, int ballot);
  void declare(Instance& in, int member, const std::string& why);
  TimePoint next_deadline() const;

  JobState& job_;
  const int world_rank_, world_size_;
  const std::uint64_t channel_;
  const std::size_t bytes_;  // every message: header and two bits per world rank

  std::mutex mu_;  // guards everything below
  std::condition_variable decided_;
  std::map<Key, Instance> instances_;
  std::vector<char> lost_;  // per world rank: lost, as the job last knew
  // Per world rank: declared lost by some agreement (it did not answer),
  // rather than known dead; it counts in every later quorum of the
  // communicators it was a member of.
  std::vector<char> suspected_;
  bool stop_ = false;
  std::mutex sends_mu_;  // guards sends_ (poke() sends from other threads)
  std::list<std::pair<std::vector<char>, RequestPtr>> sends_;
  std::thread thread_;
};

}  // namespace tutti::detail
