// Link bytes: the ring schedule's bytes per collective, and the MPI attribute that carries them.
#include "comm/link_bytes.h"

#include <map>
#include <numeric>

#include "comm/mpi_attribute.h"
#include "core/check.h"

namespace wmtp {

CommLinks::CommLinks(std::shared_ptr<LinkCounter> counter, std::vector<int> node_of, int rank)
    : counter_(std::move(counter)), node_of_(std::move(node_of)), rank_(rank) {
  WMTP_CHECK(rank_ >= 0 && rank_ < size(), "CommLinks: rank ", rank_, " outside a communicator of ", size());
}

void CommLinks::add(Link link, int64_t bytes) const {
  if (bytes > 0) counter_->add(link, bytes);
}

void CommLinks::all_gather(int64_t block_bytes) const { add(link_to_next(), int64_t(size() - 1) * block_bytes); }

void CommLinks::all_gatherv(const std::vector<int64_t>& block_bytes) const {
  // Every block passes every rank but the one before its owner: rank r forwards all but its successor's.
  const int64_t total = std::accumulate(block_bytes.begin(), block_bytes.end(), int64_t(0));
  if (size() > 1) add(link_to_next(), total - block_bytes.at(size_t((rank_ + 1) % size())));
}

void CommLinks::reduce_scatter(int64_t block_bytes) const { add(link_to_next(), int64_t(size() - 1) * block_bytes); }

void CommLinks::all_reduce(int64_t numel, int64_t element_bytes) const {
  const int n = size();
  if (n == 1) return;
  // A reduce-scatter over n chunks (rank r sends every chunk but (r+1)'s), then an all-gather of the
  // reduced chunks (every chunk but (r+2)'s).
  auto chunk = [&](int i) { return numel / n + (i % n < numel % n ? 1 : 0); };
  add(link_to_next(), (2 * numel - chunk(rank_ + 1) - chunk(rank_ + 2)) * element_bytes);
}

void CommLinks::broadcast(int64_t bytes, int root) const {
  if (size() > 1 && (rank_ + 1) % size() != root) add(link_to_next(), bytes);
}

void CommLinks::gather(int64_t bytes, int root) const {
  if (rank_ != root) add(link_to(root), bytes);
}

void CommLinks::scatter(const std::vector<int64_t>& bytes_of_rank, int root) const {
  if (rank_ != root) return;
  for (int r = 0; r < size(); ++r)
    if (r != root) add(link_to(r), bytes_of_rank.at(size_t(r)));
}

void CommLinks::exclusive_scan(int64_t bytes) const {
  if (rank_ + 1 < size()) add(link_to(rank_ + 1), bytes);
}

std::vector<int> node_indices(const std::vector<std::string>& hosts) {
  std::map<std::string, int> index;
  std::vector<int> out;
  for (const std::string& h : hosts) out.push_back(index.emplace(h, int(index.size())).first->second);
  return out;
}

// ---- the MPI attribute

namespace {

using Held = std::shared_ptr<const CommLinks>;
const MpiAttribute<Held> kLinksAttribute;  // a duplicate keeps it: the same members, the same links

}  // namespace

std::shared_ptr<const CommLinks> links_of(MPI_Comm comm) {
  const std::optional<Held> h = kLinksAttribute.get(comm);
  return h ? *h : nullptr;
}

LinkCounting::LinkCounting(MPI_Comm world, const std::vector<std::string>& rank_hosts)
    : world_(world), counter_(std::make_shared<LinkCounter>()) {
  int rank = 0, size = 0;
  WMTP_MPI_CHECK(MPI_Comm_rank(world, &rank));
  WMTP_MPI_CHECK(MPI_Comm_size(world, &size));
  WMTP_CHECK(int(rank_hosts.size()) == size, "LinkCounting: ", rank_hosts.size(), " host names for ", size, " ranks");
  kLinksAttribute.set(world, std::make_shared<CommLinks>(counter_, node_indices(rank_hosts), rank));
}

LinkCounting::~LinkCounting() {
  // Only our own: a later LinkCounting on the same communicator replaced it.
  if (const Held h = links_of(world_); h && h->counter() == counter_) kLinksAttribute.erase(world_);
}

void inherit_links(MPI_Comm parent, MPI_Comm child) {
  const Held p = links_of(parent);
  if (!p || child == MPI_COMM_NULL) return;
  MPI_Group pg, cg;
  WMTP_MPI_CHECK(MPI_Comm_group(parent, &pg));
  WMTP_MPI_CHECK(MPI_Comm_group(child, &cg));
  int n = 0, rank = 0;
  WMTP_MPI_CHECK(MPI_Group_size(cg, &n));
  WMTP_MPI_CHECK(MPI_Comm_rank(child, &rank));
  std::vector<int> mine(static_cast<size_t>(n)), theirs(static_cast<size_t>(n));
  std::iota(mine.begin(), mine.end(), 0);
  WMTP_MPI_CHECK(MPI_Group_translate_ranks(cg, n, mine.data(), pg, theirs.data()));
  MPI_Group_free(&pg);
  MPI_Group_free(&cg);
  std::vector<int> nodes;
  for (int r : theirs) nodes.push_back(p->node_of().at(size_t(r)));
  kLinksAttribute.set(child, std::make_shared<CommLinks>(p->counter(), std::move(nodes), rank));
}

}  // namespace wmtp
