// Alpaca template formatting and sample encoding (strings exactly as in weighted_mtp's collator).
#include "data/alpaca.h"

#include <algorithm>

#include "data/tokenizer.h"

namespace wmtp {

namespace {
constexpr std::string_view kHeadNoInput =
    "Below is an instruction that describes a task. Write a response that appropriately completes the request."
    "\n\n### Instruction:\n";
constexpr std::string_view kHeadWithInput =
    "Below is an instruction that describes a task, paired with an input that provides further context. "
    "Write a response that appropriately completes the request.\n\n### Instruction:\n";
constexpr std::string_view kInput = "\n\n### Input:\n";
constexpr std::string_view kResponse = "\n\n### Response:\n";
}  // namespace

bool is_blank(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) {
    unsigned char u = static_cast<unsigned char>(c);
    return u == ' ' || (u >= '\t' && u <= '\r') || (u >= 0x1c && u <= 0x1f);
  });
}

std::string format_alpaca(std::string_view instruction, std::string_view input, std::string_view output) {
  std::string s;
  const bool with_input = !is_blank(input);
  s.reserve(kHeadWithInput.size() + instruction.size() + input.size() + output.size() + 40);
  s += with_input ? kHeadWithInput : kHeadNoInput;
  s += instruction;
  if (with_input) {
    s += kInput;
    s += input;
  }
  s += kResponse;
  s += output;
  return s;
}

namespace {
EncodedSample encode_with_prompt(const Tokenizer& tok, const std::string& prompt,
                                 const std::vector<int32_t>& prompt_ids, std::string_view output, bool append_eos) {
  EncodedSample out;
  out.prompt_length = static_cast<int32_t>(prompt_ids.size());
  if (output.empty()) {
    out.tokens = prompt_ids;
  } else {
    std::string full;
    full.reserve(prompt.size() + output.size());
    full += prompt;
    full += output;
    out.tokens.reserve(prompt_ids.size() + output.size() / 2 + 2);
    out.tokens.push_back(tok.bos_id());
    tok.encode_append(full, out.tokens);
    out.prompt_is_prefix = out.tokens.size() >= prompt_ids.size() &&
                           std::equal(prompt_ids.begin(), prompt_ids.end(), out.tokens.begin());
  }
  if (append_eos) out.tokens.push_back(tok.eos_id());
  return out;
}

std::vector<int32_t> encode_prompt(const Tokenizer& tok, const std::string& prompt) {
  std::vector<int32_t> ids{tok.bos_id()};
  tok.encode_append(prompt, ids);
  return ids;
}
}  // namespace

EncodedSample encode_alpaca_sample(const Tokenizer& tok, std::string_view instruction, std::string_view input,
                                   std::string_view output, bool append_eos) {
  const std::string prompt = format_alpaca_prompt(instruction, input);
  return encode_with_prompt(tok, prompt, encode_prompt(tok, prompt), output, append_eos);
}

EncodedSample AlpacaEncoder::encode(std::string_view instruction, std::string_view input, std::string_view output) {
  std::string prompt = format_alpaca_prompt(instruction, input);
  if (prompt != last_prompt_ || last_prompt_ids_.empty()) {
    last_prompt_ids_ = encode_prompt(tok_, prompt);
    last_prompt_ = std::move(prompt);
  }
  return encode_with_prompt(tok_, last_prompt_, last_prompt_ids_, output, append_eos_);
}

}  // namespace wmtp
