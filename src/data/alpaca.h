// The Alpaca prompt template of weighted_mtp (docs/data.md, "Tokens"), exact strings, and
// the encoding of one sample into training tokens: BOS + tokens(template with output) [+ EOS], with
// the prompt length (the positions whose labels are masked) = 1 + tokens(template with empty output).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace wmtp {

class Tokenizer;

// Python's `input.strip()` is empty (ASCII whitespace and \x1c-\x1f, as str.isspace for ASCII).
bool is_blank(std::string_view s);

// The template with `output` appended; "NO input" variant when is_blank(input).
std::string format_alpaca(std::string_view instruction, std::string_view input, std::string_view output);
// The prompt alone (output empty): ends with "### Response:\n".
inline std::string format_alpaca_prompt(std::string_view instruction, std::string_view input) {
  return format_alpaca(instruction, input, "");
}

struct EncodedSample {
  std::vector<int32_t> tokens;  // BOS, template+output, EOS if asked
  int32_t prompt_length = 0;    // 1 + token count of the prompt alone (BOS included)
  // Whether tokens[0:prompt_length] equal BOS + tokens(prompt). BPE may merge across the
  // "Response:\n" / output boundary, in which case the mask boundary is approximate, exactly as in
  // weighted_mtp (which tokenizes both strings the same way); preprocess-metadata counts these.
  bool prompt_is_prefix = true;
};

EncodedSample encode_alpaca_sample(const Tokenizer& tok, std::string_view instruction, std::string_view input,
                                   std::string_view output, bool append_eos);

// The same encoding, remembering the last prompt's ids: the solutions of one problem usually follow
// each other in the input (CodeContests lists hundreds per problem), so the prompt is encoded once.
class AlpacaEncoder {
 public:
  AlpacaEncoder(const Tokenizer& tok, bool append_eos) : tok_(tok), append_eos_(append_eos) {}
  EncodedSample encode(std::string_view instruction, std::string_view input, std::string_view output);

 private:
  const Tokenizer& tok_;
  bool append_eos_;
  std::string last_prompt_;
  std::vector<int32_t> last_prompt_ids_;  // BOS + prompt tokens
};

}  // namespace wmtp
