// Tokenizer: a SentencePiece model behind the dlopen()ed C shim (libwmtp_sentencepiece.so; see
// src/CMakeLists.txt for why SentencePiece is never linked into our programs). Encodes text to ids
// without BOS/EOS (callers add them, as LLaMA does), decodes ids, and exposes the special ids.
// The shim is looked up next to the running executable, then in $WMTP_SPM_SHIM, then at the
// build-time path WMTP_SPM_SHIM_PATH. A Tokenizer is movable, not copyable, and not thread-safe.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace wmtp {

class Tokenizer {
 public:
  // Throws Error(Input) naming the model file when it cannot be loaded, or when it lacks a BOS or an
  // EOS id; Error(Runtime) when the shim cannot be found or loaded.
  static Tokenizer load(const std::string& model_path);
  ~Tokenizer();
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;

  std::vector<int32_t> encode(std::string_view text) const;  // no BOS, no EOS
  // Appends the ids of `text` to `out` (avoids a copy on the preprocessing hot path).
  void encode_append(std::string_view text, std::vector<int32_t>& out) const;
  std::string decode(const std::vector<int32_t>& ids) const;  // throws Error(Input) on an id out of range
  std::string id_to_piece(int32_t id) const;

  int32_t vocab_size() const { return vocab_size_; }
  int32_t bos_id() const { return bos_id_; }
  int32_t eos_id() const { return eos_id_; }
  int32_t pad_id() const { return pad_id_; }  // -1 when the model has none (LLaMA)
  int32_t unk_id() const { return unk_id_; }
  const std::string& path() const { return path_; }
  // FNV-1a 64 of the model file's bytes, "fnv1a64:<16 hex>": recorded in datasets so a trainer can
  // tell that a dataset was tokenized with a different model.
  const std::string& fingerprint() const { return fingerprint_; }

  // For bounding work on huge texts without tokenizing them (preprocess-metadata --max-length):
  // `min_tokens(bytes)` is a lower bound on the number of ids encode() returns for any text of
  // `bytes` bytes, or 0 when the tokenizer gives no such bound. A bound exists when the model gives
  // back exactly the text it encoded (identity normalization, whitespace kept, byte fallback instead
  // of <unk>: LLaMA's and the tiny test model), checked at load on a probe of unusual text; then no
  // id covers more than max_token_bytes() bytes of the text.
  int64_t min_tokens(int64_t bytes) const;
  int32_t max_token_bytes() const { return max_token_bytes_; }  // 0: no bound

  // The shim path that load() would use (for diagnostics).
  static std::string shim_path();

 private:
  struct Shim;
  Tokenizer() = default;
  std::unique_ptr<Shim> shim_;
  void* handle_ = nullptr;
  void measure_token_bytes();
  int32_t vocab_size_ = 0, bos_id_ = -1, eos_id_ = -1, pad_id_ = -1, unk_id_ = -1;
  int32_t max_token_bytes_ = 0;
  std::string path_, fingerprint_;
};

}  // namespace wmtp
