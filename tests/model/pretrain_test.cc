// Pretraining: loss falls, the checkpoint loads like any Hugging Face one, the same seed gives the
// same bytes, and a finished checkpoint is reused rather than retrained.
#include "model/pretrain.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "base/file_util.h"
#include "model/base_weights.h"
#include "model/token_logprobs.h"
#include "model/tokenizer.h"
#include "tests/test_util.h"

namespace marlaas::model {
namespace {

std::vector<std::string> Corpus() {
  std::vector<std::string> docs;
  for (int a = 0; a < 20; ++a) {
    for (int b = 0; b < 20; ++b)
      docs.push_back("Q: " + std::to_string(a) + "+" + std::to_string(b) +
                     "=\nA: " + std::to_string(a + b) + "\n");
  }
  return docs;
}

PretrainOptions Small(const std::string& dir) {
  PretrainOptions o;
  o.out_dir = dir;
  o.seed = 7;
  o.config.hidden_size = 32;
  o.config.intermediate_size = 64;
  o.config.num_layers = 2;
  o.config.num_heads = 2;
  o.config.num_kv_heads = 1;
  o.config.head_dim = 16;
  o.steps = 40;
  o.batch = 8;
  o.seq_len = 32;
  o.warmup_steps = 5;
  return o;
}

TEST(PretrainTest, LossFallsCheckpointLoadsAndSameSeedGivesSameBytes) {
  const std::string root = "/tmp/marlaas_pretrain_" + std::to_string(getpid());
  const auto corpus = Corpus();
  int progress_calls = 0;
  PretrainOptions o = Small(root + "/a");
  o.on_progress = [&](const PretrainProgress& p) {
    ++progress_calls;
    EXPECT_LE(p.step, p.steps);
  };
  auto first = Pretrain(o, corpus);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_FALSE(first->cached);
  EXPECT_LT(first->final_loss, first->first_loss - 1.0f) << "loss should fall clearly";
  EXPECT_GT(progress_calls, 3);
  auto w = BaseWeights::Load(root + "/a");
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  EXPECT_EQ((*w)->config.hidden_size, 32);
  auto tok = Tokenizer::Load(root + "/a/tokenizer.json");
  ASSERT_TRUE(tok.ok());
  EXPECT_EQ(tok->TokenId("<|endoftext|>"), std::optional<int32_t>(256));

  auto again = Pretrain(Small(root + "/b"), corpus);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*ReadFile(root + "/a/model.safetensors"), *ReadFile(root + "/b/model.safetensors"));

  auto cached = Pretrain(Small(root + "/a"), corpus);
  ASSERT_TRUE(cached.ok());
  EXPECT_TRUE(cached->cached);
  PretrainOptions other_seed = Small(root + "/a");
  other_seed.seed = 8;
  auto retrained = Pretrain(other_seed, corpus);
  ASSERT_TRUE(retrained.ok());
  EXPECT_FALSE(retrained->cached);
  EXPECT_NE(*ReadFile(root + "/a/model.safetensors"), *ReadFile(root + "/b/model.safetensors"));
  std::filesystem::remove_all(root);
}

TEST(PretrainTest, BadOptionsAreRefused) {
  PretrainOptions o = Small("/tmp/unused");
  o.steps = 0;
  EXPECT_EQ(Pretrain(o, Corpus()).status().code(), StatusCode::kInvalidArgument);
  o = Small("/tmp/unused");
  EXPECT_EQ(Pretrain(o, {"x"}).status().code(), StatusCode::kInvalidArgument);  // too short
}

// The output folder is replaced at the end; a file or another folder there is never deleted.
TEST(PretrainTest, AnOutputThatIsAFileOrSomeoneElsesFolderIsRefusedAndKept) {
  const testing::ScopedTempDir tmp("pretrain-out");
  const std::string file = tmp.path() + "/job.json", folder = tmp.path() + "/notes";
  std::ofstream(file) << "{}";
  std::filesystem::create_directories(folder);
  std::ofstream(folder + "/notes.txt") << "mine";
  for (const std::string& out : {file, folder}) {
    auto r = Pretrain(Small(out), Corpus());
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << out;
    EXPECT_NE(r.status().message().find("refusing to replace it"), std::string::npos)
        << r.status().message();
  }
  EXPECT_EQ(*ReadFile(file), "{}");
  EXPECT_EQ(*ReadFile(folder + "/notes.txt"), "mine");
}

// The fused op equals log_softmax + gather, forward and backward.
TEST(TokenLogprobsTest, MatchesLogSoftmaxGatherWithGradients) {
  torch::manual_seed(3);
  auto logits = torch::randn({7, 300}, torch::requires_grad());
  auto targets = torch::randint(300, {7}, torch::kInt64);
  auto probe = torch::randn({7});
  auto fused = TokenLogprobs(logits, targets, 0.8f);
  (fused * probe).sum().backward();
  auto g_fused = logits.grad().clone();
  logits.grad().zero_();
  auto ref = torch::log_softmax(logits / 0.8, -1).gather(1, targets.unsqueeze(1)).squeeze(1);
  (ref * probe).sum().backward();
  EXPECT_LT((fused - ref).abs().max().item<double>(), 1e-5);
  EXPECT_LT((g_fused - logits.grad()).abs().max().item<double>(), 1e-5);
}

}  // namespace
}  // namespace marlaas::model
