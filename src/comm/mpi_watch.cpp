// MpiWatch: the collective watchdog on MPI communicators (an attribute), and the watched calls.
#include "comm/mpi_watch.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <optional>

#include "comm/mpi_attribute.h"
#include "comm/mpi_util.h"
#include "comm/peer_progress.h"
#include "core/check.h"

namespace wmtp {

namespace {

// What the attribute holds: the watchdog, and the deadline of its sections.
struct Held {
  std::shared_ptr<CollectiveWatchdog> dog;
  CollectiveWatchdog::Deadline section;
};

const MpiAttribute<Held> kWatchAttribute;

// The attribute on `comm`, if any.
std::optional<Held> held_by(MPI_Comm comm) { return kWatchAttribute.get(comm); }

}  // namespace

std::shared_ptr<CollectiveWatchdog> watchdog_of(MPI_Comm comm) {
  const std::optional<Held> h = held_by(comm);
  return h ? h->dog : nullptr;
}

void inherit_watch(MPI_Comm parent, MPI_Comm child) {
  if (child == MPI_COMM_NULL) return;
  if (const std::optional<Held> h = held_by(parent)) kWatchAttribute.set(child, *h);
}

MpiWatch::MpiWatch(MPI_Comm world, double timeout_s, double section_timeout_s) : world_(world) {
  if (timeout_s <= 0) return;
  int level = MPI_THREAD_SINGLE;
  MPI_Query_thread(&level);
  const bool multiple = level == MPI_THREAD_MULTIPLE;
  const std::string who = rank_and_host();
  // The side channel is duplicated before the attribute exists: it must not hold the watchdog.
  if (multiple) peers_ = std::make_unique<PeerProgress>(world, all_gather_bytes(world, who));

  CollectiveWatchdog::Options w;
  w.who = who;
  w.backend = "MPI";
  w.timeout_s = timeout_s;
  w.poll_s = std::min(1.0, timeout_s / 10);
  w.on_failure = [who](const std::string& msg) {
    fprintf(stderr, "wmtp: [%s] error: %s\n", who.c_str(), msg.c_str());
    fflush(stderr);
  };
  // The callbacks run on the watchdog's thread, which starts after `self` is set and is stopped
  // before peers_ goes (the destructor).
  auto self = std::make_shared<CollectiveWatchdog*>(nullptr);
  if (peers_) {
    PeerProgress* peers = peers_.get();
    const double wait_s = std::clamp(timeout_s / 2, 1.0, 5.0);
    w.serve = [peers, self] { peers->serve((*self)->progress()); };
    w.peers = [peers, self, wait_s](int64_t seq, const std::string&) {
      return peers->ask(seq, (*self)->progress(), wait_s);
    };
    // MPI_Abort from this thread while the main thread is inside MPI: only with MULTIPLE.
    w.abort.push_back({"MPI_Abort", [] { MPI_Abort(MPI_COMM_WORLD, kWatchdogExitCode); }});
  }
  w.abort_grace_s = 5;
  w.terminate = [] { std::_Exit(kWatchdogExitCode); };
  dog_ = std::make_shared<CollectiveWatchdog>(std::move(w));
  *self = dog_.get();
  kWatchAttribute.set(world_, Held{dog_, {section_timeout_s, "[runtime] checkpoint_write_timeout_s"}});
  dog_->start();
}

MpiWatch::~MpiWatch() {
  if (!dog_) return;
  // Only our own: a later MpiWatch on the same communicator replaced it.
  if (watchdog_of(world_) == dog_) kWatchAttribute.erase(world_);
  dog_->stop();  // before the side channel goes: the thread uses it
}

WatchedMpiCall::WatchedMpiCall(MPI_Comm comm, const char* op) : dog_(watchdog_of(comm)) {
  if (dog_) seq_ = dog_->begin(op);
}

WatchedMpiCall::~WatchedMpiCall() {
  if (dog_) dog_->posted(seq_, [] { return true; });
}

WatchedMpiSection::WatchedMpiSection(MPI_Comm comm, std::string op) {
  if (std::optional<Held> h = held_by(comm)) {
    dog_ = h->dog;
    seq_ = dog_->begin(std::move(op), h->section);
  }
}

WatchedMpiSection::~WatchedMpiSection() {
  if (dog_) dog_->posted(seq_, [] { return true; });
}

std::function<void()> watch_mpi_request(MPI_Comm comm, const char* op) {
  std::shared_ptr<CollectiveWatchdog> dog = watchdog_of(comm);
  if (!dog) return [] {};
  auto done = std::make_shared<std::atomic<bool>>(false);
  dog->track(op, [done] { return done->load(); });
  return [done] { done->store(true); };
}

}  // namespace wmtp
