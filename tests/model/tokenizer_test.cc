// Tokenizers: the Hugging Face BPE fixture gives the ids `tokenizers` gives; any bytes round-trip.
#include "model/tokenizer.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>

#include "base/file_util.h"

namespace marlaas::model {
namespace {

const std::string kData = MARLAAS_TEST_DATA_DIR;

// The three pre-tokenizer patterns (Qwen2, GPT-2, Llama-3 with ignore_merges), each on texts
// with contractions, digit runs, newlines, spaces, CJK, emoji and added tokens.
TEST(TokenizerTest, BpeIdsMatchHuggingFaceTokenizers) {
  auto text = ReadFile(kData + "/tokenizer/expected.json");
  ASSERT_TRUE(text.ok());
  auto files = nlohmann::json::parse(*text);
  ASSERT_EQ(files.size(), 3u);
  for (auto it = files.begin(); it != files.end(); ++it) {
    auto tok = Tokenizer::Load(kData + "/tokenizer/" + it.key());
    ASSERT_TRUE(tok.ok()) << tok.status().ToString();
    ASSERT_GE(it.value().size(), 7u);
    for (const auto& c : it.value()) {
      const std::string s = c["text"].get<std::string>();
      const auto want = c["ids"].get<std::vector<int32_t>>();
      EXPECT_EQ(tok->Encode(s), want) << it.key() << ": " << s;
      EXPECT_EQ(tok->Decode(want), s);
    }
    EXPECT_EQ(tok->TokenId("<|im_end|>"), std::optional<int32_t>(2));
    EXPECT_EQ(tok->TokenId("<tool>"), std::optional<int32_t>(400));
  }
}

// Property: Decode(Encode(x)) == x for random byte strings, invalid UTF-8 included.
TEST(TokenizerTest, AnyBytesRoundTrip) {
  auto bpe = Tokenizer::Load(kData + "/tokenizer/tokenizer.json");
  auto bytes = Tokenizer::FromJson(Tokenizer::ByteLevelJson({"<|endoftext|>", "<tool>"}));
  ASSERT_TRUE(bpe.ok() && bytes.ok()) << bytes.status().ToString();
  EXPECT_EQ(bytes->vocab_size(), 258);
  std::mt19937 rng(3);
  const std::string alphabet = "ab 1\n\t'sX.,<tool>ü你🙂";
  for (int trial = 0; trial < 500; ++trial) {
    std::string s;
    const int n = int(rng() % 40);
    for (int i = 0; i < n; ++i) {
      s += rng() % 3 == 0 ? char(rng()) : alphabet[rng() % alphabet.size()];
    }
    EXPECT_EQ(bpe->Decode(bpe->Encode(s)), s);
    EXPECT_EQ(bytes->Decode(bytes->Encode(s)), s);
  }
  // The byte vocabulary: one id per byte, specials as one id.
  EXPECT_EQ(bytes->Encode("hi<tool>"), (std::vector<int32_t>{'h', 'i', 257}));
}

TEST(TokenizerTest, UnsupportedFeaturesAreRefusedByName) {
  auto j = nlohmann::json::parse(Tokenizer::ByteLevelJson({}));
  j["normalizer"] = {{"type", "NFKC"}};
  EXPECT_NE(Tokenizer::FromJson(j.dump()).status().message().find("NFKC"), std::string::npos);
  j = nlohmann::json::parse(Tokenizer::ByteLevelJson({}));
  j["pre_tokenizer"] = {{"type", "Sequence"},
                        {"pretokenizers",
                         {{{"type", "Split"},
                           {"pattern", {{"Regex", "\\w+"}}},
                           {"behavior", "Isolated"},
                           {"invert", false}},
                          {{"type", "ByteLevel"}, {"use_regex", false}}}}};
  EXPECT_NE(Tokenizer::FromJson(j.dump()).status().message().find("\\w+"), std::string::npos);
  EXPECT_FALSE(Tokenizer::FromJson("{").ok());
}

}  // namespace
}  // namespace marlaas::model
