// Link bytes: what this process sends in collectives, split by the link it crosses — inside its node
// (NVLink, shared memory) or across nodes (the network) — from the host name of every rank.
//
// The figure is the ring schedule's (NCCL's ring all-gather / reduce-scatter / all-reduce, the "bus
// bytes" of nccl-tests): in a communicator of n ranks, rank r sends only to its successor (r+1) mod n,
//   all-gather of B bytes per rank        (n-1)·B
//   reduce-scatter to B bytes per rank    (n-1)·B
//   all-reduce of E elements of b bytes   (2E - c[r+1] - c[r+2])·b, c[i] = the ring's i-th chunk of E
//                                         (E split into n chunks, the first E mod n one larger): 2(n-1)/n·E·b
//   broadcast of B bytes                  B, unless the successor is the root (a chain from the root)
// and the rooted operations of the MPI helpers (gather, scatter, exclusive scan) send straight to
// their destination. A reduction in bf16 that the backend widens to fp32 (MPI, staged) counts fp32
// bytes: what goes on the wire. A bandwidth-optimal algorithm sends no less; an MPI library may pick
// others on small communicators (a binomial reduce, recursive doubling) that send more across nodes
// and less inside them (docs/sharding.md, "Bytes by link").
//
// The counting travels with MPI communicators as an attribute, like the collective watchdog
// (mpi_watch.h): LinkCounting attaches it to the world communicator, communicators duplicated from it
// carry it (MpiCommunicator's, the ones inside the NCCL and staged communicators) and split_comm
// (mpi_util.h) gives sub-communicators their own view of it. Every collective of MpiCommunicator,
// NcclCommunicator (device tensors), mpi_util.h and agree.h counts; a communicator without the
// attribute counts nothing. HDF5's MPI-IO transfers (checkpoints) are not collectives of ours.
#pragma once
#include <mpi.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace wmtp {

enum class Link { Intra, Inter };

struct LinkBytes {
  int64_t intra = 0, inter = 0;
  LinkBytes operator-(const LinkBytes& o) const { return {intra - o.intra, inter - o.inter}; }
  LinkBytes& operator+=(const LinkBytes& o) {
    intra += o.intra, inter += o.inter;
    return *this;
  }
};

// Bytes sent by this process, by link, since construction. Thread-safe (collectives are issued from
// autograd's threads too).
class LinkCounter {
 public:
  void add(Link link, int64_t bytes) { (link == Link::Intra ? intra_ : inter_).fetch_add(bytes); }
  LinkBytes total() const { return {intra_.load(), inter_.load()}; }

 private:
  std::atomic<int64_t> intra_{0}, inter_{0};
};

// One rank's place in one communicator: every member's node, and where the bytes of each collective
// go under the ring schedule above. Immutable; the counter is shared by every communicator of the
// process.
class CommLinks {
 public:
  // node_of[i]: the node index of the communicator's rank i; `rank`: this process's rank in it.
  CommLinks(std::shared_ptr<LinkCounter> counter, std::vector<int> node_of, int rank);

  int rank() const { return rank_; }
  int size() const { return int(node_of_.size()); }
  const std::vector<int>& node_of() const { return node_of_; }
  const std::shared_ptr<LinkCounter>& counter() const { return counter_; }
  Link link_to(int rank) const {
    return node_of_.at(size_t(rank)) == node_of_[size_t(rank_)] ? Link::Intra : Link::Inter;
  }
  Link link_to_next() const { return link_to((rank_ + 1) % size()); }

  // What this rank sends in each collective (the ring schedule), added to the counter.
  void all_gather(int64_t block_bytes) const;
  void all_gatherv(const std::vector<int64_t>& block_bytes) const;  // one block per rank
  void reduce_scatter(int64_t block_bytes) const;
  void all_reduce(int64_t numel, int64_t element_bytes) const;
  void broadcast(int64_t bytes, int root) const;
  void gather(int64_t bytes, int root) const;                               // each rank's bytes to root
  void scatter(const std::vector<int64_t>& bytes_of_rank, int root) const;  // root's to each rank
  void exclusive_scan(int64_t bytes) const;                                 // a chain 0 -> 1 -> ... -> n-1

 private:
  void add(Link link, int64_t bytes) const;
  std::shared_ptr<LinkCounter> counter_;
  std::vector<int> node_of_;
  int rank_ = 0;
};

// Node indices from host names: equal names, equal index; numbered in order of first appearance.
std::vector<int> node_indices(const std::vector<std::string>& hosts);

// Attaches counting to `world` (every rank's host name in rank order: the link classes) until
// destroyed. Communicators duplicated from `world` afterwards count into counter().
class LinkCounting {
 public:
  LinkCounting(MPI_Comm world, const std::vector<std::string>& rank_hosts);
  ~LinkCounting();  // detaches from `world`; duplicated communicators keep counting until freed
  LinkCounting(const LinkCounting&) = delete;
  LinkCounting& operator=(const LinkCounting&) = delete;
  const std::shared_ptr<LinkCounter>& counter() const { return counter_; }

 private:
  MPI_Comm world_;
  std::shared_ptr<LinkCounter> counter_;
};

// The counting attached to `comm` (null when it counts nothing).
std::shared_ptr<const CommLinks> links_of(MPI_Comm comm);
// Gives `child` (a communicator made from `parent` by MPI_Comm_split) parent's counter, with its own
// members' nodes. A no-op when `parent` counts nothing.
void inherit_links(MPI_Comm parent, MPI_Comm child);

}  // namespace wmtp
