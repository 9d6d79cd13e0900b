// Tokenizer: Hugging Face byte-level BPE read from tokenizer.json (GPT-2, Llama-3 and Qwen2
// style: regex pre-tokenizer, byte-level alphabet, merges, added and special tokens), and the
// byte vocabulary of the built-in tiny model, written in the same format. Vocabulary and merges
// are held as raw bytes, so any byte string encodes, and Decode(Encode(x)) == x for every x.
// A malformed tokenizer.json (a field of the wrong JSON type, an id that is negative or not below
// kMaxTokenIds) is a kInvalidArgument error naming the field or token, never a crash.
// Immutable after loading; Encode/Decode are thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "model/config.h"
#include "model/pretokenizer.h"

namespace marlaas::model {

// Token ids are below this (2^24; real vocabularies have a few hundred thousand at most).
inline constexpr int64_t kMaxTokenIds = int64_t(1) << 24;

class Tokenizer {
 public:
  static Result<Tokenizer> FromJson(const std::string& json_text);
  static Result<Tokenizer> Load(const std::string& path);
  // tokenizer.json for a vocabulary of the 256 bytes (ids 0-255) followed by `specials`.
  static std::string ByteLevelJson(const std::vector<std::string>& specials);

  std::vector<int32_t> Encode(std::string_view text) const;
  std::string Decode(const std::vector<int32_t>& ids) const;
  int32_t vocab_size() const { return int32_t(id_to_bytes_.size()); }
  // The id of an added token or vocabulary entry spelled exactly `content`.
  std::optional<int32_t> TokenId(const std::string& content) const;

 private:
  static Result<Tokenizer> FromJsonUnchecked(const std::string& json_text);  // may throw
  void EncodePiece(std::string_view piece, std::vector<int32_t>* out) const;

  std::vector<std::string> id_to_bytes_;
  std::unordered_map<std::string, int32_t> bytes_to_id_;
  // (left id << 32 | right id) -> (rank, merged id)
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merges_;
  struct Added {
    std::string content;
    int32_t id;
  };
  std::vector<Added> added_;  // longest first
  PretokenizerRules rules_;
  bool add_prefix_space_ = false;
  bool ignore_merges_ = false;
  int32_t byte_id_[256] = {};
};

// OK when every id of `tok` is below config.vocab_size (the rows of the model's embedding and
// lm_head); otherwise kInvalidArgument naming `tokenizer_path`, the highest id, its token and
// the config's vocab_size.
Status CheckTokenizerFitsModel(const Tokenizer& tok, const ModelConfig& config,
                               const std::string& tokenizer_path);
// model_dir/tokenizer.json, loaded and checked against `config` with CheckTokenizerFitsModel.
Result<Tokenizer> LoadModelTokenizer(const std::string& model_dir, const ModelConfig& config);

}  // namespace marlaas::model
