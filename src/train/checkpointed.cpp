// The check every checkpointed part shares (train/checkpointed.h).
#include "train/checkpointed.h"

#include "ckpt/checkpoint.h"
#include "core/error.h"

namespace wmtp {

void require_train_keys(const TrainState& st, const CheckpointReader& file, std::initializer_list<std::string> keys,
                        const std::string& why) {
  for (const std::string& key : keys)
    if (!st.has(key))
      throw_input_identical("cannot resume from ", file.header().path, ": its /train has no '", key, "'", why);
}

}  // namespace wmtp
