// Which tokenizer made the token ids a checkpoint's model learnt: every trainer records its training
// data's tokenizer fingerprint in /train (train_keys::kDataTokenizerFingerprint, Tokenizer::fingerprint() of
// the model file the dataset was made with); imported weights record none. One check for every
// reader that pairs a checkpoint with ids from elsewhere: a trainer's frozen models against the
// training data, generate and evaluate against --tokenizer.
#pragma once
#include <string>

namespace wmtp {

// The fingerprint `checkpoint` records ("" when none). /train is read without its checksum check:
// only this string is used, and a damaged one cannot equal a real fingerprint.
std::string recorded_tokenizer_fingerprint(const std::string& checkpoint);

// `what` (a key or flag: "[rho1] reference", "--checkpoint") names `checkpoint` in messages;
// `fingerprint` is that of the tokenizer its ids come from, which `against` names ("the tokenizer of
// [data] train x.h5: tok.model", "--tokenizer tok.model"). Throws a Local Error(Input) naming
// both fingerprints when the checkpoint records another; returns a note saying that only the
// vocabulary size could be checked when it records none; "" when they match.
std::string check_checkpoint_tokenizer(const std::string& what, const std::string& checkpoint,
                                       const std::string& fingerprint, const std::string& against);

}  // namespace wmtp
