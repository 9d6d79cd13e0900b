#include "model/evaluate.h"

#include "model/generator.h"
#include "model/tokenizer.h"

namespace marlaas::model {

Result<std::vector<std::string>> GreedyCompletions(const std::string& model_dir,
                                                   const std::vector<std::string>& prompts,
                                                   int max_new_tokens) {
  MARLAAS_ASSIGN_OR_RETURN(auto weights, BaseWeights::Load(model_dir));
  MARLAAS_ASSIGN_OR_RETURN(Tokenizer tok, LoadModelTokenizer(model_dir, weights->config));
  Transformer model(weights);
  Generator gen(model);
  std::vector<int32_t> stops = tok.Encode("\n");
  if (auto eot = tok.TokenId("<|endoftext|>")) stops.push_back(*eot);
  for (size_t i = 0; i < prompts.size(); ++i) {
    GenerationRequest r;
    r.id = i;
    r.prompt = tok.Encode(prompts[i]);
    r.sampling.greedy = true;
    r.max_new_tokens = max_new_tokens;
    r.stop_tokens = stops;
    gen.Add(std::move(r));
  }
  std::vector<std::string> out(prompts.size());
  while (gen.active() > 0) {
    for (GenerationResult& res : gen.Step()) {
      if (res.hit_stop) res.tokens.pop_back();
      out[res.id] = tok.Decode(res.tokens);
    }
  }
  return out;
}

Result<double> GreedyExactMatch(const std::string& model_dir,
                                const std::vector<std::pair<std::string, std::string>>& pairs,
                                int max_new_tokens) {
  std::vector<std::string> prompts;
  for (const auto& p : pairs) prompts.push_back(p.first);
  MARLAAS_ASSIGN_OR_RETURN(auto completions, GreedyCompletions(model_dir, prompts, max_new_tokens));
  size_t right = 0;
  for (size_t i = 0; i < pairs.size(); ++i) right += completions[i] == pairs[i].second;
  return pairs.empty() ? 0.0 : double(right) / double(pairs.size());
}

}  // namespace marlaas::model
