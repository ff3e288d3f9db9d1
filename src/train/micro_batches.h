// MicroBatchSource: where every micro-batch of a run comes from. It turns this rank's share of the
// sampler's items into MicroBatches — read from the dataset and collated (data/collate.h), pointwise
// or pairwise, uploaded to the run's device — so the training and the validation loop only iterate:
//
//   MicroBatchSource::Stream batches = train.stream(cursor);  // training, from a saved cursor
//   MicroBatchSource::GlobalBatch b = batches.next();        // one step: accumulation micro-batches
//   MicroBatchSource::Pass pass = valid.pass();                // validation: the whole selection once
//   while (std::optional<MicroBatch> mb = pass.next()) ...     // same count on every rank
//
// Validation takes items[rank::world] in micro-batches and pads with fillers so every rank yields
// ceil(n / (world x micro)) of them (data/sampler.h, eval_micro_batches). A filler is a MicroBatch
// like any other, with filler = true: one row of 8 padding tokens without a label, collated on the
// host and uploaded, so a rank that has run out of items still runs the model's collectives.
//
// Reads are agreed over `MicroBatchOptions::comm` (comm/agree.h): a read failure on one rank is
// every rank's error. A rank making a filler joins that agreement too: a rank skipping it would meet
// the others' all-reduce in the model's first gather (a hang at np >= 2 with an uneven split).
#pragma once
#include <c10/core/Device.h>
#include <mpi.h>

#include <cstdint>
#include <optional>
#include <vector>

#include "data/collate.h"
#include "data/sampler.h"
#include "train/pipeline.h"

namespace wmtp {

class Dataset;

struct MicroBatchOptions {
  CollateOptions collate;
  bool pairwise = false;  // (correct, incorrect) pairs: MicroBatch::batch and ::neg
  c10::Device device = c10::Device(c10::kCPU);
  MPI_Comm comm = MPI_COMM_NULL;  // agreement on reads (MPI_COMM_NULL: one process)
};

class MicroBatchSource {
 public:
  // `ds`, `sampler` and `geometry` (the run's) must outlive the source and what it hands out.
  MicroBatchSource(const Dataset& ds, const Sampler& sampler, const BatchGeometry& geometry, MicroBatchOptions options);

  // One optimizer step's data: its global items and this rank's micro-batches.
  struct GlobalBatch {
    GlobalBatchItems items;                 // the global items of the step and this rank's share
    std::vector<MicroBatch> micro_batches;  // this rank's, in items.micro_batches order
  };
  // Training: the global batches of a run from a cursor (collective: one agreement per step).
  class Stream {
   public:
    GlobalBatch next();
    DataCursor cursor() const { return it_.cursor(); }  // where the next step starts: save this

   private:
    friend class MicroBatchSource;
    Stream(const MicroBatchSource& src, DataCursor start);
    const MicroBatchSource& src_;
    GlobalBatchIterator it_;
  };
  Stream stream(DataCursor start) const { return Stream(*this, start); }

  // Validation: the whole selection once, fillers last (collective: one agreement per micro-batch).
  class Pass {
   public:
    std::optional<MicroBatch> next();  // nullopt once this rank's (and so every rank's) share is done
    int64_t size() const { return int64_t(lists_.size()); }

   private:
    friend class MicroBatchSource;
    explicit Pass(const MicroBatchSource& src);
    const MicroBatchSource& src_;
    std::vector<std::vector<DataItem>> lists_;
    size_t next_ = 0;
  };
  Pass pass() const { return Pass(*this); }

 private:
  MicroBatch read(const std::vector<DataItem>& items) const;  // a filler for no items; not agreed
  const Dataset& ds_;
  const Sampler& sampler_;
  const BatchGeometry& geometry_;
  MicroBatchOptions opt_;
};

}  // namespace wmtp
