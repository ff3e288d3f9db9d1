// MpiWatch: the collective watchdog (comm/watchdog.h, the same policy as NCCL's) for MPI collectives
// on the CPU path. A peer that vanishes without a TCP reset (a node lost, a network partition)
// leaves every other rank inside MPI_Allreduce until the job's time limit; with the watch, a
// collective not done `[runtime] collective_timeout_s` after it started ends the job on every rank
// that notices, with one message naming the collective, its number and the ranks that did not
// arrive (comm/peer_progress.h), and exit status kWatchdogExitCode (75: train.sbatch requeues).
//
// The watchdog travels with the communicator as an MPI attribute: MpiWatch attaches it to the world
// communicator, every communicator duplicated from it afterwards (MpiCommunicator's, the ones inside
// the NCCL and staged communicators) carries it too, and the collective helpers (mpi_util.h,
// agree.h, MpiCommunicator) watch each call through WatchedMpiCall, which does nothing on a
// communicator without a watchdog (tools without a runtime). Sub-communicators made by split_comm
// (mpi_util.h: hybrid sharding's groups and replicas) keep the watchdog; a bare MPI_Comm_split does not.
//
// A checkpoint write makes MPI calls no helper of ours wraps (HDF5's MPI-IO: collective writes, the
// flush, the close), and a peer cut off there would hang it for good. The writer watches the whole
// write as one WatchedMpiSection, held to `[runtime] checkpoint_write_timeout_s` (a checkpoint of a
// large model takes minutes, far longer than one collective); the collectives of ours inside it keep
// collective_timeout_s. A write ended this way never reaches its commit: `latest` keeps naming the
// previous checkpoint.
#pragma once
#include <mpi.h>

#include <functional>
#include <memory>
#include <string>

#include "comm/watchdog.h"

namespace wmtp {

class PeerProgress;

class MpiWatch {
 public:
  // Starts the watchdog (timeout_s > 0) and attaches it to `world`. Needs MPI_THREAD_MULTIPLE to
  // ask peers and to call MPI_Abort from its thread; with less it still ends this process (_Exit).
  // section_timeout_s: the deadline of a WatchedMpiSection (<= 0: sections are not timed).
  MpiWatch(MPI_Comm world, double timeout_s, double section_timeout_s = 0);
  ~MpiWatch();  // detaches from `world`; communicators duplicated from it keep it until freed
  MpiWatch(const MpiWatch&) = delete;
  MpiWatch& operator=(const MpiWatch&) = delete;

 private:
  MPI_Comm world_;
  std::unique_ptr<PeerProgress> peers_;  // used by the watchdog's thread only; outlives it
  std::shared_ptr<CollectiveWatchdog> dog_;
};

// The watchdog attached to `comm` (null when none).
std::shared_ptr<CollectiveWatchdog> watchdog_of(MPI_Comm comm);
// Gives `child` (made from `parent` by MPI_Comm_split, which copies no attributes) parent's watchdog.
// A no-op when `parent` has none.
void inherit_watch(MPI_Comm parent, MPI_Comm child);

// A blocking collective on `comm`, watched from construction to destruction.
class WatchedMpiCall {
 public:
  WatchedMpiCall(MPI_Comm comm, const char* op);
  ~WatchedMpiCall();
  WatchedMpiCall(const WatchedMpiCall&) = delete;
  WatchedMpiCall& operator=(const WatchedMpiCall&) = delete;

 private:
  std::shared_ptr<CollectiveWatchdog> dog_;
  int64_t seq_ = 0;
};

// A long collective operation on `comm` (a checkpoint write), watched from construction to
// destruction as one entry with the watch's section_timeout_s: it ends the job like a late
// collective. Does nothing on a communicator without a watchdog.
class WatchedMpiSection {
 public:
  WatchedMpiSection(MPI_Comm comm, std::string op);
  ~WatchedMpiSection();
  WatchedMpiSection(const WatchedMpiSection&) = delete;
  WatchedMpiSection& operator=(const WatchedMpiSection&) = delete;

 private:
  std::shared_ptr<CollectiveWatchdog> dog_;
  int64_t seq_ = 0;
};

// A non-blocking collective on `comm`, watched from now until the returned function is called
// (after its MPI_Wait). Never null.
std::function<void()> watch_mpi_request(MPI_Comm comm, const char* op);

}  // namespace wmtp
