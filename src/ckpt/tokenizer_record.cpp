// The tokenizer fingerprint a checkpoint records, and the one check of it.
#include "ckpt/tokenizer_record.h"

#include <mpi.h>

#include "ckpt/checkpoint.h"
#include "ckpt/train_keys.h"
#include "core/error.h"

namespace wmtp {

std::string recorded_tokenizer_fingerprint(const std::string& checkpoint) {
  const TrainState st =
      CheckpointReader(checkpoint, MPI_COMM_NULL, {ReadMode::Independent, /*verify=*/false}).read_train_state();
  return st.has(train_keys::kDataTokenizerFingerprint) ? st.get_string(train_keys::kDataTokenizerFingerprint)
                                                       : std::string();
}

std::string check_checkpoint_tokenizer(const std::string& what, const std::string& checkpoint,
                                       const std::string& fingerprint, const std::string& against) {
  const std::string recorded = recorded_tokenizer_fingerprint(checkpoint);
  if (recorded.empty())
    return what + " " + checkpoint +
           " records no tokenizer fingerprint (imported weights, or saved by an older wmtp): " +
           "only its vocabulary size was checked against " + against;
  if (recorded != fingerprint)
    throw_input(what, " ", checkpoint, " was trained on data tokenized by ", recorded, ", but the ids here come from ",
                fingerprint, " (", against, "): the two must share one tokenizer (the same ids, the same text)");
  return "";
}

}  // namespace wmtp
