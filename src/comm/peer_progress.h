// PeerProgress: the side channel through which an MPI watchdog learns which rank did not arrive at a
// late collective. A blocked MPI_Allreduce says nothing about who is missing; so, after a timeout,
// the watchdog thread asks every other rank how far it got (CollectiveWatchdog::Progress), and each
// rank's watchdog thread answers on its own poll, whatever its main thread is doing. A rank that is
// stopped, dead or cut off does not answer within the wait; one that answers with an older collective
// never arrived; one in the same collective is there too.
//
// Its own duplicate of the world communicator, used only from the watchdog thread, so it needs
// MPI_THREAD_MULTIPLE (the main thread may be inside a collective meanwhile). Every call is
// non-blocking; ask() returns after at most `wait_s`.
#pragma once
#include <mpi.h>

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "comm/watchdog.h"

namespace wmtp {

class PeerProgress {
 public:
  // names: every rank's "rank 1 on host2", in rank order (names the ranks that do not answer).
  PeerProgress(MPI_Comm world, std::vector<std::string> names);
  ~PeerProgress();
  PeerProgress(const PeerProgress&) = delete;
  PeerProgress& operator=(const PeerProgress&) = delete;

  // Answers the questions that have arrived with `mine`.
  void serve(const CollectiveWatchdog::Progress& mine);
  // Asks every other rank about collective `seq` and waits up to `wait_s` for the answers (serving
  // meanwhile). Returns one sentence: who did not answer, who never arrived, who is there.
  std::string ask(int64_t seq, const CollectiveWatchdog::Progress& mine, double wait_s);

  struct Answer {  // what travels (plain bytes)
    int64_t last = 0, open = 0;
    char last_op[80] = {}, open_op[80] = {}, who[80] = {};
  };
  // The sentence ask() returns, from the answers (nullptr: no answer); pure, for tests.
  static std::string describe(int64_t seq, const std::vector<const Answer*>& answers, int self, double wait_s,
                              const std::vector<std::string>& names);

 private:
  void post_query_recv();
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
  std::vector<std::string> names_;
  int64_t query_ = 0;
  MPI_Request query_req_ = MPI_REQUEST_NULL;
  std::vector<MPI_Request> sends_;
  std::deque<Answer> outbox_;  // reply buffers, kept (at fixed addresses) while their sends are in flight
};

}  // namespace wmtp
