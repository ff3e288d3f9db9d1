// C shim over SentencePiece, built as its own shared module and dlopen()ed by data/tokenizer.cpp
// (see src/CMakeLists.txt for why it is never linked). The C boundary stays tiny and exception-free:
// every entry point catches everything and reports failure by return value. Results of encode,
// decode and id_to_piece live in buffers owned by the handle, valid until the next call on the same
// handle, so a handle must not be shared between threads.
#include <sentencepiece_processor.h>

#include <cstddef>
#include <cstring>
#include <string>
#include <vector>

namespace {
struct Handle {
  sentencepiece::SentencePieceProcessor sp;
  std::vector<int> ids;
  std::string text;
};
Handle* as_handle(void* h) { return static_cast<Handle*>(h); }

void copy_message(const std::string& msg, char* err, int err_len) {
  if (!err || err_len <= 0) return;
  size_t n = std::min(msg.size(), static_cast<size_t>(err_len - 1));
  std::memcpy(err, msg.data(), n);
  err[n] = '\0';
}
}  // namespace

extern "C" {

// Loads a model file; nullptr on failure with SentencePiece's message copied into err.
void* wmtp_spm_load(const char* path, char* err, int err_len) {
  try {
    auto* h = new Handle();
    auto st = h->sp.Load(path);
    if (!st.ok()) {
      copy_message(st.ToString(), err, err_len);
      delete h;
      return nullptr;
    }
    return h;
  } catch (const std::exception& e) {
    copy_message(e.what(), err, err_len);
  } catch (...) {
    copy_message("unknown exception in SentencePiece", err, err_len);
  }
  return nullptr;
}

void wmtp_spm_free(void* h) { delete as_handle(h); }

int wmtp_spm_piece_size(void* h) { return as_handle(h)->sp.GetPieceSize(); }
int wmtp_spm_bos_id(void* h) { return as_handle(h)->sp.bos_id(); }
int wmtp_spm_eos_id(void* h) { return as_handle(h)->sp.eos_id(); }
int wmtp_spm_pad_id(void* h) { return as_handle(h)->sp.pad_id(); }
int wmtp_spm_unk_id(void* h) { return as_handle(h)->sp.unk_id(); }

// Encodes `len` bytes of text (no BOS/EOS added). Returns the id count and sets *ids to the handle's
// buffer; -1 on failure.
long wmtp_spm_encode(void* h, const char* text, size_t len, const int** ids) {
  try {
    Handle* p = as_handle(h);
    p->ids.clear();
    if (!p->sp.Encode(std::string_view(text, len), &p->ids).ok()) return -1;
    *ids = p->ids.data();
    return static_cast<long>(p->ids.size());
  } catch (...) {
    return -1;
  }
}

// Decodes n ids. Returns the byte length and sets *text to the handle's buffer; -1 on failure
// (e.g. an id outside the vocabulary).
long wmtp_spm_decode(void* h, const int* ids, size_t n, const char** text) {
  try {
    Handle* p = as_handle(h);
    const int size = p->sp.GetPieceSize();
    for (size_t i = 0; i < n; ++i)
      if (ids[i] < 0 || ids[i] >= size) return -1;
    p->text.clear();
    if (!p->sp.Decode(std::vector<int>(ids, ids + n), &p->text).ok()) return -1;
    *text = p->text.data();
    return static_cast<long>(p->text.size());
  } catch (...) {
    return -1;
  }
}

// The piece string of one id (e.g. "▁the", "<0x0A>"); -1 when the id is out of range.
long wmtp_spm_id_to_piece(void* h, int id, const char** piece) {
  try {
    Handle* p = as_handle(h);
    if (id < 0 || id >= p->sp.GetPieceSize()) return -1;
    p->text = p->sp.IdToPiece(id);
    *piece = p->text.data();
    return static_cast<long>(p->text.size());
  } catch (...) {
    return -1;
  }
}

}  // extern "C"
