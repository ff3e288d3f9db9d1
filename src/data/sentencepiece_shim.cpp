// C shim over SentencePiece, built as its own shared module (see src/CMakeLists.txt for why it is
// dlopen()ed rather than linked). Placeholder until the tokenizer lands: load and piece count.
#include <sentencepiece_processor.h>

extern "C" {
void* wmtp_spm_load(const char* path) {
  auto* p = new sentencepiece::SentencePieceProcessor();
  if (!p->Load(path).ok()) {
    delete p;
    return nullptr;
  }
  return p;
}
void wmtp_spm_free(void* p) { delete static_cast<sentencepiece::SentencePieceProcessor*>(p); }
int wmtp_spm_piece_size(void* p) { return static_cast<sentencepiece::SentencePieceProcessor*>(p)->GetPieceSize(); }
}
