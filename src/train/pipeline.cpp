// Pipeline defaults shared by every train-* program: the policy model from [model]/[lora].
#include "train/pipeline.h"

#include "core/error.h"
#include "model/mtp.h"
#include "shard/sharded_model.h"

namespace wmtp {

ModelHandle::ModelHandle() = default;
ModelHandle::ModelHandle(ModelHandle&&) noexcept = default;
ModelHandle& ModelHandle::operator=(ModelHandle&&) noexcept = default;
ModelHandle::~ModelHandle() = default;

ModelArgs policy_model_args(const ModelConfig& mc, int64_t data_vocab) {
  ModelArgs args = resolve_model_args(mc);
  // The model's vocabulary may be larger than the tokenizer's (padded embedding tables are common),
  // never smaller: every token id in the data must have a row.
  if (args.vocab_size > 0 && data_vocab > args.vocab_size)
    throw_usage("[model] vocab_size ", args.vocab_size, " is smaller than the training data's tokenizer (", data_vocab,
                ")");
  if (args.vocab_size <= 0) {
    if (data_vocab <= 0) throw_usage("[model] vocab_size is unresolved and no [data] train dataset gives it");
    resolve_vocab_size(args, data_vocab);
  }
  return args;
}

ModelSpec Pipeline::trained_model(const PipelineSettings& settings, int64_t data_vocab) const {
  ModelSpec spec;
  spec.role = "policy";
  spec.args = policy_model_args(settings.model, data_vocab);
  spec.lora = settings.lora;
  spec.weights = settings.init_weights;
  return spec;
}

}  // namespace wmtp
