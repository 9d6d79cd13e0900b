#include "procs/common/task_source.h"

#include <sys/stat.h>

#include "base/file_util.h"
#include "proto/strict_json.h"
#include "sandbox/command_verifier.h"

namespace marlaas::pipeline {

Result<std::vector<tasks::TaskExample>> ReadDataset(const std::string& path) {
  // `size` in words ("is 65 MiB") past the limit.
  auto too_large = [&](const std::string& size) {
    return Status(StatusCode::kInvalidArgument,
                  "dataset " + path + " " + size + "; a tenant's dataset may be at most " +
                      std::to_string(kMaxDatasetBytes >> 20) +
                      " MiB (every stage holds it in memory): split it among tenants or trim it");
  };
  // Checked before it is read: a 100 MB dataset took serve to 386 MB, and each stage too.
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
      uint64_t(st.st_size) > kMaxDatasetBytes)
    return too_large("is " + std::to_string(uint64_t(st.st_size) >> 20) + " MiB");
  // Read up to the limit whatever stat says (a /proc file says 0 bytes and never ends).
  Result<std::string> text = ReadFileAtMost(path, kMaxDatasetBytes);
  if (!text.ok() && text.status().code() == StatusCode::kResourceExhausted)
    return too_large("holds more than " + std::to_string(kMaxDatasetBytes >> 20) + " MiB");
  if (!text.ok())
    return Status(text.status().code(),
                  "dataset " + path + " cannot be read: " + text.status().message());
  // Line by line out of the text read (no second copy of a large dataset).
  std::vector<tasks::TaskExample> rows;
  size_t n = 0;
  for (size_t at = 0; at < text->size();) {
    size_t end = text->find('\n', at);
    if (end == std::string::npos) end = text->size();
    const std::string line = text->substr(at, end - at);
    at = end + 1;
    ++n;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    // First the strict reading (iterative): a key named twice (the last one was taken without a
    // word; a job spec refuses it too), or nesting past its limit, which FromJsonl's recursive
    // copy of the metadata would overflow the stack on (serve crashed on a 200000-deep line).
    // Its syntax errors are left to FromJsonl's words.
    Status strict = CheckStrictJson(line);
    if (!strict.ok() && strict.message().rfind("is not valid JSON", 0) != 0)
      return Status(strict.code(), "JSONL line " + strict.message())
          .Annotate(path + ":" + std::to_string(n));
    auto e = tasks::FromJsonl(line);
    if (!e.ok()) return e.status().Annotate(path + ":" + std::to_string(n));
    rows.push_back(std::move(*e));
  }
  if (rows.empty()) {
    return Status(StatusCode::kInvalidArgument,
                  "dataset " + path + " is empty (it needs one JSON object per line)");
  }
  return rows;
}

Result<std::unique_ptr<TaskSource>> TaskSource::ForJob(const pb::JobSpec& spec) {
  auto s = std::make_unique<TaskSource>();
  s->spec_ = spec;
  if (spec.task() != "custom") {
    MARLAAS_ASSIGN_OR_RETURN(s->task_, tasks::MakeTask(spec.task()));
    return s;
  }
  const std::string& path = spec.dataset().jsonl_path();
  MARLAAS_ASSIGN_OR_RETURN(s->rows_, ReadDataset(path));
  // The first eval_prompts rows are held out; with no row left to train on, the held-out reward
  // would be measured on the training prompts (it once was, silently).
  const size_t eval = spec.dataset().eval_prompts();
  if (eval > 0 && s->rows_.size() <= eval) {
    return Status(StatusCode::kInvalidArgument,
                  "dataset " + path + " has " + std::to_string(s->rows_.size()) +
                      " examples and its first dataset.eval_prompts (" + std::to_string(eval) +
                      ") are held out for evaluation, which leaves none to train on: " +
                      (s->rows_.size() > 1
                           ? "set dataset.eval_prompts below " + std::to_string(s->rows_.size())
                           : std::string("it needs at least 2 examples")));
  }
  s->eval_rows_ = eval;
  return s;
}

tasks::TaskExample TaskSource::Train(uint64_t index) const {
  if (task_)
    return task_->Example(spec_.dataset().seed(), index, int(spec_.dataset().difficulty()));
  const size_t n = rows_.size() - eval_rows_;
  return rows_[eval_rows_ + size_t(index % n)];
}

tasks::TaskExample TaskSource::Eval(uint64_t index) const {
  if (task_)
    return task_->Example(spec_.dataset().seed() + 1000003, index,
                          int(spec_.dataset().difficulty()));
  return rows_[size_t(index % (eval_rows_ ? eval_rows_ : rows_.size()))];
}

size_t TaskSource::eval_count() const {
  if (task_) return spec_.dataset().eval_prompts();
  return eval_rows_ ? eval_rows_ : std::min<size_t>(rows_.size(), spec_.dataset().eval_prompts());
}

bool TaskSource::runs_untrusted_code() const {
  return !task_ || spec_.task() == "python_functions";
}

std::vector<sandbox::Verdict> TaskSource::VerifyAll(
    const std::vector<const tasks::TaskExample*>& examples,
    const std::vector<std::string>& completions) const {
  if (task_) return task_->VerifyAll(examples, completions);
  tasks::CheckVerifyAllSizes(examples, completions);
  // A tenant's command, one run per completion; after an infrastructure failure (already
  // retried) the rest would fail the same way and stay unscored.
  std::vector<sandbox::Verdict> out(examples.size());
  for (size_t i = 0; i < examples.size(); ++i) {
    out[i] = Verify(*examples[i], completions[i]);
    if (!out[i].scored()) break;
  }
  return out;
}

sandbox::Verdict TaskSource::Verify(const tasks::TaskExample& example,
                                    const std::string& completion) const {
  if (task_) return task_->Verify(example, completion);
  // Only what the job carries: the verifier never reads a host path a command names.
  sandbox::CommandVerifierSpec v;
  v.argv.assign(spec_.verifier().command().begin(), spec_.verifier().command().end());
  for (const auto& [name, body] : spec_.verifier().files()) v.files.emplace_back(name, body);
  const pb::SandboxLimits& l = spec_.sandbox();
  v.limits.wall_timeout_ms = l.timeout_ms();
  v.limits.cpu_seconds = std::max<uint32_t>(1, (l.timeout_ms() + 999) / 1000);
  v.limits.memory_bytes = uint64_t(l.memory_mb()) << 20;
  v.limits.max_output_bytes = l.max_output_bytes();
  v.limits.max_processes = l.max_processes();
  return sandbox::RunCommandVerifier(
      v, {example.id, example.prompt, completion, example.reference, example.metadata_json});
}

}  // namespace marlaas::pipeline
