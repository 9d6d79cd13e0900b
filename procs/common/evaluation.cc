#include "procs/common/evaluation.h"

#include <atomic>
#include <thread>

#include "model/base_weights.h"
#include "model/compute_threads.h"
#include "model/generator.h"
#include "model/lora_adapter.h"
#include "model/tokenizer.h"
#include "model/torch_error.h"
#include "model/transformer.h"
#include "procs/common/task_source.h"
#include "sandbox/tool_syntax.h"

namespace marlaas::pipeline {

Result<EvalResult> EvaluateHeldOut(const std::string& model_dir, const pb::JobSpec& spec,
                                   const std::string& adapter_dir, int n, float temperature) {
  MARLAAS_ASSIGN_OR_RETURN(auto weights, model::BaseWeights::Load(model_dir));
  MARLAAS_ASSIGN_OR_RETURN(model::Tokenizer tok,
                           model::LoadModelTokenizer(model_dir, weights->config));
  MARLAAS_ASSIGN_OR_RETURN(auto source, TaskSource::ForJob(spec));
  std::shared_ptr<const model::LoraAdapter> adapter;
  if (!adapter_dir.empty()) {
    MARLAAS_ASSIGN_OR_RETURN(model::LoraAdapter a,
                             model::LoraAdapter::ImportPeft(adapter_dir, *weights));
    adapter = std::make_shared<const model::LoraAdapter>(std::move(a));
  }
  model::Transformer model(weights);
  model::Generator gen(model);
  std::vector<int32_t> stops = tok.Encode("\n");
  if (auto eot = tok.TokenId("<|endoftext|>")) stops.push_back(*eot);
  const auto tool_end = tok.TokenId(sandbox::kToolCallEnd);
  if (tool_end) stops.push_back(*tool_end);
  n = std::min<int>(n, int(source->eval_count()));
  struct Item {
    tasks::TaskExample example;
    size_t prompt_tokens = 0;
    std::vector<int32_t> tokens;
    int generated = 0, turns = 0;
  };
  std::vector<Item> items(size_t(std::max(0, n)));
  const int budget = int(spec.sampling().max_new_tokens());
  auto add = [&](size_t i) {
    model::GenerationRequest r;
    r.id = i;
    r.prompt = items[i].tokens;
    r.adapter = adapter;
    r.sampling.greedy = temperature <= 0;
    r.sampling.temperature = temperature > 0 ? temperature : 1.0f;
    r.seed = spec.sampling().seed() * 1000003 + i * 7919 + uint64_t(items[i].turns);
    r.max_new_tokens = std::max(1, budget - items[i].generated);
    r.stop_tokens = stops;
    gen.Add(std::move(r));
  };
  for (size_t i = 0; i < items.size(); ++i) {
    items[i].example = source->Eval(i);
    items[i].tokens = tok.Encode(items[i].example.prompt);
    items[i].prompt_tokens = items[i].tokens.size();
    add(i);
  }
  EvalResult out;
  out.examples = int(items.size());
  out.prompts.resize(items.size());
  out.completions.resize(items.size());
  out.rewards.resize(items.size());
  double sum = 0;
  while (gen.active() > 0) {
    for (model::GenerationResult& r : gen.Step()) {
      Item& it = items[r.id];
      it.tokens.insert(it.tokens.end(), r.tokens.begin(), r.tokens.end());
      it.generated += int(r.tokens.size());
      const std::string text = tok.Decode(
          std::vector<int32_t>(it.tokens.begin() + long(it.prompt_tokens), it.tokens.end()));
      if (tool_end && r.hit_stop && !r.tokens.empty() && r.tokens.back() == *tool_end &&
          it.turns < sandbox::kMaxToolTurns && it.generated < budget) {
        const auto last = sandbox::TrailingToolCall(text);
        if (last) {
          const sandbox::ToolOutput o = sandbox::ExecuteTool(*last);
          const auto res = tok.Encode(sandbox::FormatToolResult(o.output));
          it.tokens.insert(it.tokens.end(), res.begin(), res.end());
          ++it.turns;
          add(r.id);
          continue;
        }
      }
      out.prompts[r.id] = it.example.prompt;
      out.completions[r.id] = text;
    }
  }
  // Verified together: a task that runs code runs the whole set in one sandbox.
  std::vector<const tasks::TaskExample*> examples;
  for (const Item& it : items) examples.push_back(&it.example);
  const std::vector<sandbox::Verdict> verdicts = source->VerifyAll(examples, out.completions);
  for (size_t i = 0; i < verdicts.size(); ++i) {
    const sandbox::Verdict& v = verdicts[i];
    out.rewards[i] = v.scored() ? v.reward : 0;
    if (v.scored()) {
      sum += v.reward;
    } else {
      ++out.verifier_errors;
    }
  }
  out.mean_reward = out.examples ? sum / out.examples : 0;
  return out;
}

std::vector<Result<EvalResult>> EvaluateHeldOutAll(const std::string& model_dir,
                                                   const std::vector<EvalJob>& jobs, int workers) {
  std::vector<Result<EvalResult>> out(jobs.size(), Status(StatusCode::kInternal, "not evaluated"));
  const size_t n = std::min(jobs.size(), size_t(std::max(1, workers)));
  // OpenBLAS's pthread build deadlocks when two threads call it while it may use more than one
  // thread itself: parallel evaluations compute on one thread each, and the setting is restored.
  const int threads_before = model::ComputeThreads();
  // (LibTorch's own count may already be 1 while OpenBLAS's is not: always set both.)
  if (n > 1) model::SetComputeThreads(1);
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i = next++; i < jobs.size(); i = next++) {
      // On a thread of its own an exception (memory running out) would end the process: it is
      // this job's error instead.
      try {
        out[i] = EvaluateHeldOut(model_dir, jobs[i].spec, jobs[i].adapter_dir,
                                 int(jobs[i].spec.dataset().eval_prompts()));
      } catch (const std::exception& e) {
        out[i] = Status(StatusCode::kInternal, "evaluation failed: " + model::TorchErrorLine(e));
      } catch (...) {
        out[i] = Status(StatusCode::kInternal, "evaluation failed: an unknown exception");
      }
    }
  };
  std::vector<std::thread> threads;
  for (size_t t = 1; t < n; ++t) threads.emplace_back(work);
  work();
  for (std::thread& t : threads) t.join();
  if (n > 1) model::SetComputeThreads(threads_before);
  return out;
}

}  // namespace marlaas::pipeline
