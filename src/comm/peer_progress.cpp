// PeerProgress: question and answer over MPI point-to-point between watchdog threads.
#include "comm/peer_progress.h"

#include <chrono>
#include <cstring>
#include <memory>
#include <sstream>
#include <thread>

#include "core/check.h"

namespace wmtp {

namespace {
constexpr int kQueryTag = 7001, kAnswerTag = 7002;

void copy_text(char (&dst)[80], const std::string& s) {
  std::strncpy(dst, s.c_str(), sizeof(dst) - 1);
  dst[sizeof(dst) - 1] = '\0';
}

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
}  // namespace

PeerProgress::PeerProgress(MPI_Comm world, std::vector<std::string> names) : names_(std::move(names)) {
  WMTP_MPI_CHECK(MPI_Comm_dup(world, &comm_));
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
  post_query_recv();
}

PeerProgress::~PeerProgress() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  if (query_req_ != MPI_REQUEST_NULL) {
    MPI_Cancel(&query_req_);
    MPI_Wait(&query_req_, MPI_STATUS_IGNORE);
  }
  // Answers nobody picked up (the asker died): abandoned, not waited for.
  for (MPI_Request& r : sends_)
    if (r != MPI_REQUEST_NULL) MPI_Request_free(&r);
  MPI_Comm_free(&comm_);
}

void PeerProgress::post_query_recv() {
  if (size_ > 1) MPI_Irecv(&query_, 1, MPI_INT64_T, MPI_ANY_SOURCE, kQueryTag, comm_, &query_req_);
}

void PeerProgress::serve(const CollectiveWatchdog::Progress& mine) {
  for (;;) {
    int flag = 0;
    MPI_Status st;
    if (query_req_ == MPI_REQUEST_NULL || MPI_Test(&query_req_, &flag, &st) != MPI_SUCCESS || !flag) break;
    Answer a;
    a.last = mine.last;
    a.open = mine.open;
    copy_text(a.last_op, mine.last_op);
    copy_text(a.open_op, mine.open_op);
    copy_text(a.who, names_.at(rank_));
    outbox_.push_back(a);
    sends_.emplace_back(MPI_REQUEST_NULL);
    MPI_Isend(&outbox_.back(), sizeof(Answer), MPI_BYTE, st.MPI_SOURCE, kAnswerTag, comm_, &sends_.back());
    post_query_recv();
  }
}

std::string PeerProgress::ask(int64_t seq, const CollectiveWatchdog::Progress& mine, double wait_s) {
  // Buffers of requests that may never complete (a dead peer) must outlive them: held here and
  // leaked below when anyone did not answer; the job is ending, and cancelling a send to a dead
  // peer may itself block.
  auto got = std::make_unique<std::vector<Answer>>(size_);
  auto asked = std::make_unique<std::vector<int64_t>>(size_, seq);
  std::vector<MPI_Request> recvs(size_, MPI_REQUEST_NULL), queries(size_, MPI_REQUEST_NULL);
  std::vector<bool> answered(size_, false);
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    MPI_Irecv(&(*got)[r], sizeof(Answer), MPI_BYTE, r, kAnswerTag, comm_, &recvs[r]);
    MPI_Isend(&(*asked)[r], 1, MPI_INT64_T, r, kQueryTag, comm_, &queries[r]);
  }
  const double deadline = now_s() + wait_s;
  int left = size_ - 1;
  while (left > 0 && now_s() < deadline) {
    serve(mine);  // the others are asking us at the same time
    for (int r = 0; r < size_; ++r) {
      int flag = 0;
      if (answered[r] || recvs[r] == MPI_REQUEST_NULL) continue;
      if (MPI_Test(&recvs[r], &flag, MPI_STATUS_IGNORE) == MPI_SUCCESS && flag) {
        answered[r] = true;
        --left;
      }
    }
    if (left > 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::vector<const Answer*> answers(size_, nullptr);
  for (int r = 0; r < size_; ++r)
    if (answered[r]) answers[r] = &(*got)[r];
  std::string out = describe(seq, answers, rank_, wait_s, names_);
  if (left > 0) {
    got.release();
    asked.release();
  }
  return out;
}

std::string PeerProgress::describe(int64_t seq, const std::vector<const Answer*>& answers, int self, double wait_s,
                                   const std::vector<std::string>& names) {
  std::ostringstream missing, there;
  int n_missing = 0, n_there = 0;
  for (int r = 0; r < int(answers.size()); ++r) {
    if (r == self) continue;
    const Answer* a = answers[r];
    if (!a) {
      missing << (n_missing++ ? "; " : "") << (r < int(names.size()) ? names[r] : "rank " + std::to_string(r))
              << " did not answer within " << wait_s << " s (stopped, dead, or cut off from this rank)";
    } else if (a->open == seq) {
      there << (n_there++ ? ", " : "") << a->who;
    } else if (a->open > 0 && a->open < seq) {
      missing << (n_missing++ ? "; " : "") << a->who << " is still in collective #" << a->open << " (" << a->open_op
              << ")";
    } else if (a->open == 0 && a->last < seq) {
      missing << (n_missing++ ? "; " : "") << a->who << " has not arrived (its last collective, #" << a->last << " "
              << a->last_op << ", finished)";
    } else {
      missing << (n_missing++ ? "; " : "") << a->who << " is out of step: at collective #"
              << (a->open ? a->open : a->last) << " (" << (a->open ? a->open_op : a->last_op) << ")";
    }
  }
  std::ostringstream os;
  os << "Peers: ";
  if (n_missing) os << "did not arrive: " << missing.str() << ".";
  else
    os << "every other rank says it is in this collective (the fault is between ranks: the network?).";
  if (n_there) os << " Waiting in it too: " << there.str() << ".";
  return os.str();
}

}  // namespace wmtp
