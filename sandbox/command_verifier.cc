#include "sandbox/command_verifier.h"

#include <nlohmann/json.hpp>

namespace marlaas::sandbox {
namespace {

using json = nlohmann::json;

Verdict Broken(const std::string& why) {
  Verdict v;
  v.outcome = pb::OUTCOME_INFRA_ERROR;
  v.detail = "verifier error: " + why;
  return v;
}

// The end of a program's stderr, where an error's message is (a Python traceback's last line):
// at most `n` bytes, starting at a character, marked when cut, without a final newline.
std::string StderrTail(std::string text, size_t n) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  if (text.size() <= n) return text;
  size_t from = text.size() - n;
  while (from < text.size() && (static_cast<unsigned char>(text[from]) & 0xC0) == 0x80) ++from;
  return "..." + text.substr(from);
}

Verdict Judge(const SandboxResult& r) {
  if (r.outcome == SandboxOutcome::kSetupFailed) return Broken("sandbox: " + r.setup_error);
  if (r.outcome == SandboxOutcome::kTimeout) return Broken("timed out");
  if (r.outcome == SandboxOutcome::kOutputLimit) return Broken("printed too much");
  if (r.outcome == SandboxOutcome::kMemoryLimit) return Broken("exceeded its memory limit");
  if (r.outcome == SandboxOutcome::kSignaled)
    return Broken("killed by signal " + std::to_string(r.signal));
  if (r.exit_code != 0) {
    return Broken("exited with " + std::to_string(r.exit_code) + ": " +
                  StderrTail(r.stderr_data, kVerifierStderrBytes));
  }
  // {"reward": 1, "reward": 0} is no answer: which one counts is the parser's choice (the last).
  int rewards = 0;
  json out = json::parse(
      r.stdout_data,
      [&](int depth, json::parse_event_t event, json& parsed) {
        if (depth == 1 && event == json::parse_event_t::key && parsed == "reward") ++rewards;
        return true;
      },
      false);
  if (rewards > 1) {
    return Broken("stdout names \"reward\" " + std::to_string(rewards) + " times: '" +
                  r.stdout_data.substr(0, 200) + "'");
  }
  if (out.is_discarded() || !out.is_object() || !out.contains("reward") ||
      !out["reward"].is_number()) {
    return Broken("stdout is not {\"reward\": x}: '" + r.stdout_data.substr(0, 200) + "'");
  }
  const double reward = out["reward"].get<double>();
  if (!(reward >= 0.0 && reward <= 1.0))
    return Broken("reward " + out["reward"].dump() + " is outside [0, 1]");
  Verdict v;
  v.outcome = pb::OUTCOME_OK;
  v.reward = reward;
  v.detail = "reward from the tenant's verifier";
  return v;
}

}  // namespace

Verdict RunCommandVerifier(const CommandVerifierSpec& spec, const CommandVerifierInput& in) {
  json metadata = json::parse(in.metadata_json.empty() ? "{}" : in.metadata_json, nullptr, false);
  if (metadata.is_discarded()) return Broken("metadata is not JSON");
  SandboxRequest req;
  req.argv = spec.argv;
  req.files = spec.files;
  req.limits = spec.limits;
  req.stdin_data = json{
      {"id", in.id},
      {"prompt", in.prompt},
      {"completion", in.completion},
      {"reference", in.reference},
      {"metadata",
       metadata}}.dump();
  Verdict v;
  double cpu_ms = 0;
  for (int attempt = 1; attempt <= std::max(1, spec.attempts); ++attempt) {
    auto r = RunSandboxed(req);
    v = r.ok() ? Judge(*r) : Broken(r.status().ToString());
    if (r.ok()) cpu_ms += r->cpu_ms;
    v.attempts = attempt;
    v.cpu_ms = cpu_ms;
    if (v.outcome != pb::OUTCOME_INFRA_ERROR) break;
  }
  return v;
}

}  // namespace marlaas::sandbox
