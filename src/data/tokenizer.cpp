// Tokenizer over the SentencePiece C shim, loaded with dlopen(RTLD_NOW|RTLD_LOCAL|RTLD_DEEPBIND) so
// the shim's bundled protobuf-lite never interposes on LibTorch's libprotobuf (and vice versa).
#include "data/tokenizer.h"

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <utility>

#include "core/error.h"
#include "core/hash.h"

namespace wmtp {

struct Tokenizer::Shim {
  void* (*load)(const char*, char*, int) = nullptr;
  void (*free)(void*) = nullptr;
  int (*piece_size)(void*) = nullptr;
  int (*bos_id)(void*) = nullptr;
  int (*eos_id)(void*) = nullptr;
  int (*pad_id)(void*) = nullptr;
  int (*unk_id)(void*) = nullptr;
  long (*encode)(void*, const char*, size_t, const int**) = nullptr;
  long (*decode)(void*, const int*, size_t, const char**) = nullptr;
  long (*id_to_piece)(void*, int, const char**) = nullptr;
};

namespace {

constexpr const char* kShimName = "libwmtp_sentencepiece.so";

std::vector<std::string> shim_candidates() {
  std::vector<std::string> out;
  std::error_code ec;
  auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) out.push_back((exe.parent_path() / kShimName).string());
  if (const char* env = std::getenv("WMTP_SPM_SHIM"); env && *env) out.emplace_back(env);
#ifdef WMTP_SPM_SHIM_PATH
  out.emplace_back(WMTP_SPM_SHIM_PATH);
#endif
  return out;
}

template <class F>
void bind_symbol(void* lib, const char* name, F& fn, const std::string& path) {
  void* sym = dlsym(lib, name);
  if (!sym)
    throw_runtime("SentencePiece shim ", path, " lacks symbol ", name, " (stale build? rebuild wmtp_sentencepiece)");
  fn = reinterpret_cast<F>(sym);
}

std::string read_file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw_input("tokenizer model ", path, ": cannot open");
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

}  // namespace

std::string Tokenizer::shim_path() {
  for (const auto& p : shim_candidates())
    if (std::filesystem::exists(p)) return p;
  return "";
}

Tokenizer Tokenizer::load(const std::string& model_path) {
  const std::string bytes = read_file_bytes(model_path);  // also the "does it exist" check

  std::string tried;
  void* lib = nullptr;
  std::string lib_path;
  for (const auto& p : shim_candidates()) {
    if (!std::filesystem::exists(p)) {
      tried += "\n  " + p + " (absent)";
      continue;
    }
    // The shim is never dlclose()d: SentencePiece's protobuf registers static state that does not
    // survive being unloaded and reloaded. Each load() only bumps the loader's reference count.
    lib = dlopen(p.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
    if (lib) {
      lib_path = p;
      break;
    }
    tried += "\n  " + p + " (" + dlerror() + ")";
  }
  if (!lib)
    throw_runtime("cannot load the SentencePiece shim ", kShimName, "; tried:", tried,
                  "\n  (set WMTP_SPM_SHIM to its path)");

  Tokenizer t;
  t.shim_ = std::make_unique<Shim>();
  Shim& s = *t.shim_;
  bind_symbol(lib, "wmtp_spm_load", s.load, lib_path);
  bind_symbol(lib, "wmtp_spm_free", s.free, lib_path);
  bind_symbol(lib, "wmtp_spm_piece_size", s.piece_size, lib_path);
  bind_symbol(lib, "wmtp_spm_bos_id", s.bos_id, lib_path);
  bind_symbol(lib, "wmtp_spm_eos_id", s.eos_id, lib_path);
  bind_symbol(lib, "wmtp_spm_pad_id", s.pad_id, lib_path);
  bind_symbol(lib, "wmtp_spm_unk_id", s.unk_id, lib_path);
  bind_symbol(lib, "wmtp_spm_encode", s.encode, lib_path);
  bind_symbol(lib, "wmtp_spm_decode", s.decode, lib_path);
  bind_symbol(lib, "wmtp_spm_id_to_piece", s.id_to_piece, lib_path);

  char err[512] = {0};
  t.handle_ = s.load(model_path.c_str(), err, sizeof err);
  if (!t.handle_) throw_input("tokenizer model ", model_path, ": not a SentencePiece model (", err, ")");
  t.path_ = model_path;
  t.fingerprint_ = "fnv1a64:" + hex64(fnv1a64(bytes));
  t.vocab_size_ = s.piece_size(t.handle_);
  t.bos_id_ = s.bos_id(t.handle_);
  t.eos_id_ = s.eos_id(t.handle_);
  t.pad_id_ = s.pad_id(t.handle_);
  t.unk_id_ = s.unk_id(t.handle_);
  if (t.bos_id_ < 0 || t.eos_id_ < 0)
    throw_input("tokenizer model ", model_path, ": has no BOS or EOS id (bos=", t.bos_id_, ", eos=", t.eos_id_,
                "); train it with --bos_id and --eos_id set, as LLaMA's is");
  t.measure_token_bytes();
  return t;
}

void Tokenizer::measure_token_bytes() {
  // Whitespace runs, leading/trailing spaces, control bytes, a compatibility character NFKC would
  // fold, a combining accent, CJK and a 4-byte character: a normalizing tokenizer, one that drops
  // extra whitespace or one that emits <unk> (which may swallow a whole run of characters) fails to
  // give this back, and then no bound is claimed.
  const std::string probe =
      "  a\t\tb  \n\n\x01\x7f \xef\xbc\xa1 e\xcc\x81 \xe6\xbc\xa2 \xf0\x9d\x94\x98 \xef\xac\x81  ";
  max_token_bytes_ = 0;
  if (decode(encode(probe)) != probe) return;
  int32_t longest = 1;
  static const std::string kSpace = "\xe2\x96\x81";  // U+2581, SentencePiece's visible space
  for (int32_t id = 0; id < vocab_size_; ++id) {
    if (id == bos_id_ || id == eos_id_ || id == pad_id_ || id == unk_id_) continue;
    const std::string piece = id_to_piece(id);
    if (piece.size() == 6 && piece.compare(0, 3, "<0x") == 0 && piece[5] == '>') continue;  // one byte
    int32_t bytes = 0;
    for (size_t i = 0; i < piece.size(); ++i) {
      if (piece.compare(i, kSpace.size(), kSpace) == 0) i += kSpace.size() - 1;  // stands for one space
      ++bytes;
    }
    longest = std::max(longest, bytes);
  }
  max_token_bytes_ = longest;
}

int64_t Tokenizer::min_tokens(int64_t bytes) const {
  if (max_token_bytes_ <= 0 || bytes <= 0) return 0;
  return (bytes + max_token_bytes_ - 1) / max_token_bytes_;
}

Tokenizer::~Tokenizer() {
  if (handle_ && shim_) shim_->free(handle_);
}

Tokenizer::Tokenizer(Tokenizer&& o) noexcept
    : shim_(std::move(o.shim_)),
      handle_(std::exchange(o.handle_, nullptr)),
      vocab_size_(o.vocab_size_),
      bos_id_(o.bos_id_),
      eos_id_(o.eos_id_),
      pad_id_(o.pad_id_),
      unk_id_(o.unk_id_),
      max_token_bytes_(o.max_token_bytes_),
      path_(std::move(o.path_)),
      fingerprint_(std::move(o.fingerprint_)) {}

Tokenizer& Tokenizer::operator=(Tokenizer&& o) noexcept {
  if (this != &o) {
    if (handle_ && shim_) shim_->free(handle_);
    shim_ = std::move(o.shim_);
    handle_ = std::exchange(o.handle_, nullptr);
    vocab_size_ = o.vocab_size_;
    bos_id_ = o.bos_id_;
    eos_id_ = o.eos_id_;
    pad_id_ = o.pad_id_;
    unk_id_ = o.unk_id_;
    max_token_bytes_ = o.max_token_bytes_;
    path_ = std::move(o.path_);
    fingerprint_ = std::move(o.fingerprint_);
  }
  return *this;
}

void Tokenizer::encode_append(std::string_view text, std::vector<int32_t>& out) const {
  const int* ids = nullptr;
  long n = shim_->encode(handle_, text.data(), text.size(), &ids);
  if (n < 0) throw_input("tokenizer ", path_, ": cannot encode a text of ", text.size(), " bytes");
  static_assert(sizeof(int) == sizeof(int32_t), "ids are 32-bit");
  out.insert(out.end(), ids, ids + n);
}

std::vector<int32_t> Tokenizer::encode(std::string_view text) const {
  std::vector<int32_t> out;
  encode_append(text, out);
  return out;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids) const {
  const char* text = nullptr;
  long n = shim_->decode(handle_, ids.data(), ids.size(), &text);
  if (n < 0) throw_input("tokenizer ", path_, ": cannot decode (an id outside [0, ", vocab_size_, ")?)");
  return std::string(text, static_cast<size_t>(n));
}

std::string Tokenizer::id_to_piece(int32_t id) const {
  const char* piece = nullptr;
  long n = shim_->id_to_piece(handle_, id, &piece);
  if (n < 0) throw_input("tokenizer ", path_, ": id ", id, " outside [0, ", vocab_size_, ")");
  return std::string(piece, static_cast<size_t>(n));
}

}  // namespace wmtp
