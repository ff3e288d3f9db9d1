// preprocess-metadata: Tokenise JSONL problem/solution samples (weighted_mtp schema) with a SentencePiece model into one HDF5 dataset per split: token ids, offsets, prompt lengths, metadata table and problem index.
// Thin main: everything lives in the library. Not implemented yet: a later issue fills it in.
#include "app/program.h"
#include "core/error.h"

int main(int argc, char** argv) {
  wmtp::Program prog(argc, argv,
                     {"preprocess-metadata",
                      "Tokenise JSONL problem/solution samples (weighted_mtp schema) with a SentencePiece model into one HDF5 dataset per split: token ids, offsets, prompt lengths, metadata table and problem index. Ranks tokenise disjoint line ranges; the output appears atomically.",
                      "mpirun -np 4 bin/preprocess-metadata --input data/tiny/train.jsonl --tokenizer build/data/tiny.model --output data/tiny/train.h5"});
  return prog.run([](wmtp::ProgramContext&) -> int {
    wmtp::throw_usage("preprocess-metadata is not implemented yet");
  });
}
