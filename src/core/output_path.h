// Checks of the places a program will write, made before any work: a path that is a directory, a
// parent that is a file, a directory that cannot be created or written are usage errors (exit 2)
// naming the path and the option, so a long run never fails at its very end for a typo.
// Not collective: call them where the writer runs (rank 0, or every rank inside an agreement).
#pragma once
#include <string>

namespace wmtp {

// `path` will be written as a file (through `path + ".tmp"` and a rename, or directly): it must not
// be a directory, and its parent must be (or become, created here) a writable directory.
// `what` names the option in messages, e.g. "--output".
void check_output_file(const std::string& path, const std::string& what);

// `dir` will hold files: it is created (with parents) when missing and must be a writable directory.
void check_output_dir(const std::string& dir, const std::string& what);

}  // namespace wmtp
