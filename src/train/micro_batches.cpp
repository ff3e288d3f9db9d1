// The run's micro-batches: items -> collated batches -> device (train/micro_batches.h).
#include "train/micro_batches.h"

#include <ATen/ATen.h>

#include <utility>

#include "comm/agree.h"
#include "comm/device.h"
#include "core/labels.h"
#include "data/dataset.h"

namespace wmtp {
namespace {

// A collated batch's tensors on the run's device (pinned memory, non-blocking copies).
void upload(Batch& b, c10::Device d) {
  b.tokens = to_device(b.tokens, d);
  b.labels = to_device(b.labels, d);
  b.attention_mask = to_device(b.attention_mask, d);
  b.is_correct = to_device(b.is_correct, d);
}

// What a rank with no items left collates: one row of padding without a label.
Batch filler_batch() {
  Batch b;
  b.tokens = at::zeros({1, 8}, at::kLong);
  b.labels = at::full({1, 8}, kIgnoreIndex, at::kLong);
  b.attention_mask = at::zeros({1, 8}, at::kLong);
  b.is_correct = at::zeros({1}, at::kFloat);
  return b;
}

}  // namespace

MicroBatchSource::MicroBatchSource(const Dataset& ds, const Sampler& sampler, const BatchGeometry& geometry,
                                   MicroBatchOptions options)
    : ds_(ds), sampler_(sampler), geometry_(geometry), opt_(std::move(options)) {}

MicroBatch MicroBatchSource::read(const std::vector<DataItem>& items) const {
  MicroBatch mb;
  mb.filler = items.empty();
  if (mb.filler) {
    mb.batch = filler_batch();
    if (opt_.pairwise) mb.neg = filler_batch();
  } else if (opt_.pairwise) {
    PairBatch pb = load_pair_batch(ds_, items, opt_.collate);
    mb.batch = std::move(pb.pos);
    mb.neg = std::move(pb.neg);
  } else {
    mb.batch = load_batch(ds_, items, opt_.collate);
  }
  mb.cpu_batch = mb.batch;  // kept: counts and row selection read it without waiting for the device
  if (opt_.pairwise) mb.cpu_neg = mb.neg;
  upload(mb.batch, opt_.device);
  if (opt_.pairwise) upload(mb.neg, opt_.device);
  return mb;
}

MicroBatchSource::Stream::Stream(const MicroBatchSource& src, DataCursor start)
    : src_(src), it_(src.sampler_, src.geometry_, start) {}

MicroBatchSource::GlobalBatch MicroBatchSource::Stream::next() {
  GlobalBatch batch;
  batch.items = it_.next();
  // One agreement for the step's reads: a failure on one rank is every rank's error.
  agreed(src_.opt_.comm, [&] {
    for (const auto& items : batch.items.micro_batches) batch.micro_batches.push_back(src_.read(items));
  });
  return batch;
}

MicroBatchSource::Pass::Pass(const MicroBatchSource& src)
    : src_(src),
      lists_(eval_micro_batches(src.sampler_.items(), src.geometry_.world_size, src.geometry_.rank,
                                src.geometry_.micro_batch_size)) {}

std::optional<MicroBatch> MicroBatchSource::Pass::next() {
  if (next_ == lists_.size()) return std::nullopt;
  const std::vector<DataItem>& items = lists_[next_++];
  return agreed(src_.opt_.comm, [&] { return src_.read(items); });  // fillers too: see the header
}

}  // namespace wmtp
