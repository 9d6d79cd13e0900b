// Tokenizers: the Hugging Face BPE fixture gives the ids `tokenizers` gives; any bytes round-trip.
#include "model/tokenizer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>

#include "base/file_util.h"
#include "model/evaluate.h"

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

// Malformed tokenizer.json files, each a small edit of a valid one: ids that are negative, wrap
// in 32 bits or would allocate gigabytes, and fields of the wrong JSON type. Each is refused with
// kInvalidArgument naming what is wrong (none crashes, throws or allocates).
TEST(TokenizerTest, MalformedIdsAndTypesAreRefused) {
  using nlohmann::json;
  const json good = json::parse(Tokenizer::ByteLevelJson({"<|endoftext|>"}));
  ASSERT_TRUE(Tokenizer::FromJson(good.dump()).ok());
  struct Case {
    const char* name;
    std::function<void(json&)> edit;
    const char* reason;  // in the message
  } cases[] = {
      {"vocab id 2^31", [](json& j) { j["model"]["vocab"]["!"] = 2147483648LL; },
       "vocab entry '!' has id 2147483648"},
      {"vocab id 2^64-1", [](json& j) { j["model"]["vocab"]["!"] = ~uint64_t(0); },
       "vocab entry '!' has id 18446744073709551615"},
      {"vocab id -1", [](json& j) { j["model"]["vocab"]["!"] = -1; }, "vocab entry '!' has id -1"},
      {"vocab id a float", [](json& j) { j["model"]["vocab"]["!"] = 4e8; }, "not an integer"},
      {"vocab id a string", [](json& j) { j["model"]["vocab"]["!"] = "33"; }, "not an integer"},
      {"added id -5", [](json& j) { j["added_tokens"][0]["id"] = -5; },
       "'<|endoftext|>' has id -5"},
      {"added id 4e8", [](json& j) { j["added_tokens"][0]["id"] = 400000000; },
       "'<|endoftext|>' has id 400000000, outside [0, 16777216)"},
      {"added id a float", [](json& j) { j["added_tokens"][0]["id"] = 4e8; }, "not an integer"},
      {"added id a string", [](json& j) { j["added_tokens"][0]["id"] = "256"; }, "not an integer"},
      {"added content a number", [](json& j) { j["added_tokens"][0]["content"] = 7; },
       "added_tokens[0]: content must be a string"},
      {"added token a number", [](json& j) { j["added_tokens"][0] = 7; },
       "added_tokens[0]: added token without content or id"},
      {"added_tokens an object", [](json& j) { j["added_tokens"] = json::object(); },
       "added_tokens must be a list"},
      {"normalizer a string", [](json& j) { j["normalizer"] = "NFC"; },
       "normalizer of JSON type string is not supported"},
      {"normalizer type a number",
       [](json& j) {
         j["normalizer"] = {{"type", 3}};
       },
       "normalizer of JSON type object is not supported"},
      {"pre_tokenizer type a number", [](json& j) { j["pre_tokenizer"]["type"] = 1; },
       "pre_tokenizer must be ByteLevel"},
      {"pre_tokenizer a string", [](json& j) { j["pre_tokenizer"] = "ByteLevel"; },
       "pre_tokenizer must be ByteLevel"},
      {"use_regex a string", [](json& j) { j["pre_tokenizer"]["use_regex"] = "no"; },
       "pre_tokenizer.use_regex must be true or false"},
      {"add_prefix_space a number", [](json& j) { j["pre_tokenizer"]["add_prefix_space"] = 1; },
       "pre_tokenizer.add_prefix_space must be true or false"},
      {"Sequence of non-objects",
       [](json& j) {
         j["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", {1, 2}}};
       },
       "pre_tokenizer must be ByteLevel"},
      {"Split behavior a number",
       [](json& j) {
         j["pre_tokenizer"] = {
             {"type", "Sequence"},
             {"pretokenizers",
              {{{"type", "Split"}, {"pattern", {{"Regex", "x"}}}, {"behavior", 1}},
               {{"type", "ByteLevel"}, {"use_regex", false}}}}};
       },
       "pretokenizers[0].behavior must be a string"},
      {"Split Regex a number",
       [](json& j) {
         j["pre_tokenizer"] = {
             {"type", "Sequence"},
             {"pretokenizers",
              {{{"type", "Split"}, {"pattern", {{"Regex", 5}}}, {"behavior", "Isolated"}},
               {{"type", "ByteLevel"}, {"use_regex", false}}}}};
       },
       "Split pattern must be a Regex"},
      {"model type a number", [](json& j) { j["model"]["type"] = 1; }, "model.type must be BPE"},
      {"model a list", [](json& j) { j["model"] = json::array(); }, "model.type must be BPE"},
      {"byte_fallback a string", [](json& j) { j["model"]["byte_fallback"] = "false"; },
       "model.byte_fallback must be true or false"},
      {"ignore_merges a number", [](json& j) { j["model"]["ignore_merges"] = 0; },
       "model.ignore_merges must be true or false"},
      {"merges a string", [](json& j) { j["model"]["merges"] = "a b"; },
       "model.merges must be a list"},
      {"merge of numbers",
       [](json& j) {
         j["model"]["merges"] = {{1, 2}};
       },
       "is neither \"a b\" nor [a, b]"},
  };
  for (const Case& c : cases) {
    json j = good;
    c.edit(j);
    auto tok = Tokenizer::FromJson(j.dump());
    ASSERT_FALSE(tok.ok()) << c.name;
    EXPECT_EQ(tok.status().code(), StatusCode::kInvalidArgument) << c.name;
    EXPECT_NE(tok.status().message().find(c.reason), std::string::npos)
        << c.name << " -> " << tok.status().message();
  }
  // Through Load, the message names the file.
  const std::string path = "/tmp/marlaas_bad_tokenizer_" + std::to_string(getpid()) + ".json";
  json j = good;
  j["added_tokens"][0]["id"] = -5;
  ASSERT_TRUE(WriteFileAtomically(path, j.dump()).ok());
  auto loaded = Tokenizer::Load(path);
  ASSERT_FALSE(loaded.ok());
  EXPECT_NE(loaded.status().message().find(path), std::string::npos) << loaded.status().message();
  std::remove(path.c_str());
  // A sparse id well inside the limit loads; the id table grows to it.
  j = good;
  j["added_tokens"][0]["id"] = 1000;
  auto far = Tokenizer::FromJson(j.dump());
  ASSERT_TRUE(far.ok()) << far.status().ToString();
  EXPECT_EQ(far->vocab_size(), 1001);
}

// A tokenizer with an id the model has no embedding row for is refused where the model and its
// tokenizer are loaded together, naming the file, the id, its token and the config's vocab_size.
TEST(TokenizerTest, IdsBeyondTheModelVocabularyAreRefused) {
  auto config = ModelConfig::Load(kData + "/llama");
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  ASSERT_EQ(config->vocab_size, 402);
  const std::string dir = "/tmp/marlaas_tok_vocab_" + std::to_string(getpid());
  ASSERT_EQ(system(("mkdir -p " + dir + " && cp " + kData + "/llama/config.json " + kData +
                    "/llama/model.safetensors " + dir)
                       .c_str()),
            0);
  auto j = nlohmann::json::parse(Tokenizer::ByteLevelJson({"<|endoftext|>"}));
  for (int id : {401, 402}) {
    j["added_tokens"][0]["id"] = id;
    ASSERT_TRUE(WriteFileAtomically(dir + "/tokenizer.json", j.dump()).ok());
    auto tok = Tokenizer::Load(dir + "/tokenizer.json");
    ASSERT_TRUE(tok.ok()) << tok.status().ToString();
    const Status fits = CheckTokenizerFitsModel(*tok, *config, dir + "/tokenizer.json");
    auto loaded = LoadModelTokenizer(dir, *config);
    auto completions = GreedyCompletions(dir, {"1+1="}, 2);
    if (id == 401) {  // the last row of the embedding
      EXPECT_TRUE(fits.ok()) << fits.ToString();
      EXPECT_TRUE(loaded.ok()) << loaded.status().ToString();
      EXPECT_TRUE(completions.ok()) << completions.status().ToString();
      continue;
    }
    const std::string want = dir + "/tokenizer.json: token id 402 ('<|endoftext|>') is not below " +
                             "the model's config.json vocab_size 402";
    EXPECT_EQ(fits.code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(fits.message(), want);
    EXPECT_EQ(loaded.status().message(), want);
    EXPECT_EQ(completions.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(completions.status().message(), want);
  }
  ASSERT_EQ(system(("rm -rf " + dir).c_str()), 0);
}

}  // namespace
}  // namespace marlaas::model
