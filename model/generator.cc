#include "model/generator.h"

#include <algorithm>
#include <cstdint>
#include <map>

namespace marlaas::model {
namespace {

// So that the push_back after it cannot throw (doubling: amortised as push_back's own growth).
template <typename T>
void RoomForOneMore(std::vector<T>* v) {
  if (v->size() == v->capacity()) v->reserve(2 * v->size() + 16);
}

}  // namespace

Generator::Generator(const Transformer& model, bool adapter_pool)
    : model_(model), arena_(std::make_shared<KvArena>(model.config(), model.device())) {
  if (adapter_pool || model_.device().is_cuda())
    pool_ = std::make_unique<LoraPool>(model_.weights(), model_.device());
}

void Generator::Add(GenerationRequest request) {
  TORCH_CHECK(!request.prompt.empty(), "a generation request needs a prompt");
  int slot = -1;
  if (pool_ && request.adapter) {
    Result<int> acquired = pool_->Acquire(request.adapter);
    TORCH_CHECK(acquired.ok(), acquired.status().ToString());
    slot = *acquired;
  }
  auto seq = std::unique_ptr<Sequence>(new Sequence{std::move(request), std::nullopt, SamplerRng(0),
                                                    GenerationResult{}, false, slot});
  seq->rng = SamplerRng(seq->req.seed);
  seq->result.id = seq->req.id;
  seqs_.push_back(std::move(seq));
}

std::vector<GenerationResult> Generator::Step() {
  // What the caches hold now: a step that throws after some rows' keys were committed (or a
  // joining row copied its leader's) goes back to it.
  std::vector<int64_t> lengths;
  lengths.reserve(seqs_.size());
  for (const auto& s : seqs_) lengths.push_back(s->cache ? s->cache->length() : 0);
  try {
    return StepOrThrow();
  } catch (...) {
    for (size_t b = 0; b < seqs_.size(); ++b)
      if (seqs_[b]->cache) seqs_[b]->cache->Rewind(lengths[b]);
    throw;
  }
}

std::vector<GenerationResult> Generator::StepOrThrow() {
  std::vector<GenerationResult> done;
  if (seqs_.empty()) return done;
  torch::NoGradGuard no_grad;
  for (auto& s : seqs_)
    if (!s->cache) s->cache.emplace(arena_);  // may grow the arena
  // A joining sequence with the same prompt and adapter as an earlier joining one (a GRPO group's
  // completions) is not computed: after the pass it copies that one's cache and logits, which
  // are exactly what it would have computed. row_of: its row in the packed forward (its
  // leader's for a copy).
  std::vector<int64_t> row_of(seqs_.size(), -1);
  std::vector<int64_t> leader(seqs_.size(), -1);
  std::map<std::pair<int64_t, std::vector<int32_t>>, size_t> joining;
  std::vector<torch::Tensor> inputs;
  std::vector<KvCache*> caches;
  LoraRouting routing;
  last_step_ = StepShape{0, 0, 0};
  std::vector<bool> slot_seen(pool_ ? size_t(pool_->slots()) : 0);  // distinct adapters
  for (size_t b = 0; b < seqs_.size(); ++b) {
    Sequence* s = seqs_[b].get();
    if (!s->prefilled) {
      const int64_t adapter =
          pool_ ? int64_t(s->pool_slot) : int64_t(reinterpret_cast<intptr_t>(s->req.adapter.get()));
      auto [it, fresh] = joining.emplace(std::make_pair(adapter, s->req.prompt), b);
      if (!fresh) {
        leader[b] = int64_t(it->second);
        continue;
      }
    }
    const std::vector<int32_t>& in =
        s->prefilled ? std::vector<int32_t>{s->result.tokens.back()} : s->req.prompt;
    last_step_.tokens += in.size();
    row_of[b] = int64_t(inputs.size());
    inputs.push_back(torch::tensor(std::vector<int64_t>(in.begin(), in.end()), torch::kInt64));
    caches.push_back(&*s->cache);
    int32_t index = -1;
    if (pool_) {
      index = s->pool_slot;
      if (index >= 0 && !slot_seen[size_t(index)]) {
        slot_seen[size_t(index)] = true;
        ++last_step_.adapters;
      }
    } else if (s->req.adapter) {
      auto it = std::find(routing.adapters.begin(), routing.adapters.end(), s->req.adapter.get());
      index = int32_t(it - routing.adapters.begin());
      if (it == routing.adapters.end()) routing.adapters.push_back(s->req.adapter.get());
    }
    routing.row_adapter.push_back(index);
  }
  // Rows for the cost fit are sequences (each samples a token, a copy also copies a cache): the
  // per-sequence work of a pass, where the forward's rows are only the computed ones.
  last_step_.rows = seqs_.size();
  if (pool_) {
    routing.pool = pool_.get();
  } else {
    last_step_.adapters = routing.adapters.size();
  }
  // Sampling runs on the CPU (per-row streams, top-k/top-p): one copy of [rows, vocab] a step.
  auto logits = model_.Step(inputs, caches, &routing).to(torch::kCPU).contiguous();
  for (size_t b = 0; b < seqs_.size(); ++b) {
    if (leader[b] < 0) continue;
    seqs_[b]->cache->CopyFrom(*seqs_[size_t(leader[b])]->cache);
    row_of[b] = row_of[size_t(leader[b])];
  }
  // Sampling, then the results: whatever may throw comes first, and the rows' random streams are
  // put back if it does, so that a failed Step has sampled nothing.
  const int32_t vocab = int32_t(logits.size(1));
  std::vector<Sampled> picks(seqs_.size());
  std::vector<std::unique_ptr<Sequence>> still;
  still.reserve(seqs_.size());
  done.reserve(seqs_.size());
  std::vector<SamplerRng> streams;
  streams.reserve(seqs_.size());
  for (const auto& s : seqs_) streams.push_back(s->rng);
  try {
    for (size_t b = 0; b < seqs_.size(); ++b) {
      Sequence& s = *seqs_[b];
      picks[b] = SampleToken(logits.data_ptr<float>() + size_t(row_of[b]) * size_t(vocab), vocab,
                             s.req.sampling, &s.rng);
      RoomForOneMore(&s.result.tokens);
      RoomForOneMore(&s.result.logprobs);
    }
  } catch (...) {
    for (size_t b = 0; b < seqs_.size(); ++b) seqs_[b]->rng = streams[b];
    throw;
  }
  std::vector<const LoraAdapter*> released;  // pool slots of the sequences that finish
  released.reserve(seqs_.size());
  for (size_t b = 0; b < seqs_.size(); ++b) {
    Sequence& s = *seqs_[b];
    s.prefilled = true;
    const Sampled pick = picks[b];
    s.result.tokens.push_back(pick.token);
    s.result.logprobs.push_back(pick.logprob);
    const bool stop = std::find(s.req.stop_tokens.begin(), s.req.stop_tokens.end(), pick.token) !=
                      s.req.stop_tokens.end();
    if (stop || int32_t(s.result.tokens.size()) >= s.req.max_new_tokens) {
      s.result.hit_stop = stop;
      done.push_back(std::move(s.result));
      if (pool_ && s.req.adapter) released.push_back(s.req.adapter.get());
    } else {
      still.push_back(std::move(seqs_[b]));
    }
  }
  seqs_ = std::move(still);
  // The step stands from here on: nothing after this may throw out of Step.
  for (const LoraAdapter* a : released) {
    try {
      pool_->Release(a);
    } catch (...) {
      // No memory to note the slot free: it stays taken (a pool slot, not the step, is lost).
    }
  }
  TrimArena();
  return done;
}

std::optional<GenerationResult> Generator::Remove(uint64_t id) {
  auto it =
      std::find_if(seqs_.begin(), seqs_.end(), [id](const auto& s) { return s->req.id == id; });
  if (it == seqs_.end()) return std::nullopt;
  GenerationResult partial = std::move((*it)->result);
  partial.hit_stop = false;
  if (pool_ && (*it)->req.adapter) pool_->Release((*it)->req.adapter.get());
  seqs_.erase(it);  // its cache gives its slot back
  return partial;
}

std::vector<uint64_t> Generator::ActiveIds() const {
  std::vector<uint64_t> ids;
  for (const auto& s : seqs_) ids.push_back(s->req.id);
  return ids;
}

void Generator::ReleaseIdleMemory() {
  if (!seqs_.empty()) return;
  if (arena_->slots() <= KvArena::kInitialSlots && arena_->capacity() <= KvArena::kInitialCapacity)
    return;
  try {
    arena_ = std::make_shared<KvArena>(model_.config(), model_.device());
  } catch (...) {
    // No memory even for a small arena: the old one stays (no sequence uses it).
  }
}

void Generator::TrimArena() {
  if (seqs_.empty()) return;  // kept for the next round; ReleaseIdleMemory gives it back
  int64_t longest = 0;
  for (const auto& s : seqs_) longest = std::max(longest, s->cache ? s->cache->length() : 0);
  if (arena_->capacity() <= KvArena::kInitialCapacity || longest * 4 > arena_->capacity()) return;
  try {
    arena_->Trim(std::max(KvArena::kInitialCapacity, 2 * longest));
  } catch (...) {
    // The smaller copy found no memory: the arena is as it was (KvArena), and the step stands.
  }
}

}  // namespace marlaas::model
