#include "model/evaluate.h"

#include "model/generator.h"
#include "model/tokenizer.h"

namespace marlaas::model {

Result<double> GreedyExactMatch(const std::string& model_dir,
                                const std::vector<std::pair<std::string, std::string>>& pairs,
                                int max_new_tokens) {
  MARLAAS_ASSIGN_OR_RETURN(auto weights, BaseWeights::Load(model_dir));
  MARLAAS_ASSIGN_OR_RETURN(Tokenizer tok, Tokenizer::Load(model_dir + "/tokenizer.json"));
  Transformer model(weights);
  Generator gen(model);
  std::vector<int32_t> stops = tok.Encode("\n");
  if (auto eot = tok.TokenId("<|endoftext|>")) stops.push_back(*eot);
  for (size_t i = 0; i < pairs.size(); ++i) {
    GenerationRequest r;
    r.id = i;
    r.prompt = tok.Encode(pairs[i].first);
    r.sampling.greedy = true;
    r.max_new_tokens = max_new_tokens;
    r.stop_tokens = stops;
    gen.Add(std::move(r));
  }
  size_t right = 0;
  while (gen.active() > 0) {
    for (GenerationResult& res : gen.Step()) {
      if (res.hit_stop) res.tokens.pop_back();
      right += tok.Decode(res.tokens) == pairs[res.id].second;
    }
  }
  return pairs.empty() ? 0.0 : double(right) / double(pairs.size());
}

}  // namespace marlaas::model
