#include "sandbox/tool_syntax.h"

#include "sandbox/calculator.h"

namespace marlaas::sandbox {

std::optional<ParsedToolCall> FindToolCall(std::string_view text, size_t from) {
  static constexpr std::string_view kOpen = kToolCallOpen, kClose = kToolCallEnd;
  size_t at = text.find(kOpen, from);
  while (at != std::string_view::npos) {
    const size_t name_begin = at + kOpen.size();
    const size_t name_end = text.find("\">", name_begin);
    if (name_end == std::string_view::npos) return std::nullopt;
    const std::string_view name = text.substr(name_begin, name_end - name_begin);
    const size_t close = text.find(kClose, name_end + 2);
    if (close == std::string_view::npos) return std::nullopt;  // not complete yet
    if (!name.empty() && name.find('"') == std::string_view::npos &&
        name.find('<') == std::string_view::npos) {
      return ParsedToolCall{std::string(name),
                            std::string(text.substr(name_end + 2, close - name_end - 2)), at,
                            close + kClose.size()};
    }
    at = text.find(kOpen, at + 1);
  }
  return std::nullopt;
}

std::optional<ParsedToolCall> TrailingToolCall(std::string_view text) {
  size_t from = 0;
  std::optional<ParsedToolCall> call, last;
  while ((call = FindToolCall(text, from))) {
    last = call;
    from = call->end;
  }
  if (last && last->end == text.size()) return last;
  return std::nullopt;
}

std::string FormatToolCall(const std::string& name, const std::string& input) {
  return kToolCallOpen + name + "\">" + input + kToolCallEnd;
}

std::string FormatToolResult(const std::string& output) {
  return kToolResultOpen + output + kToolResultEnd;
}

SandboxLimits ToolLimits() {
  SandboxLimits l;
  l.wall_timeout_ms = 1000;
  l.cpu_seconds = 1;
  l.memory_bytes = 128ull << 20;
  l.max_processes = 4;
  l.max_file_bytes = 1ull << 20;
  l.max_output_bytes = 4 << 10;
  l.work_dir_bytes = 1ull << 20;
  l.work_dir_inodes = 64;
  return l;
}

ToolOutput ExecuteTool(const ParsedToolCall& call, const SandboxLimits& limits, size_t max_chars) {
  ToolOutput out;
  auto cap = [&](std::string s) {
    if (s.size() > max_chars) {
      s.resize(max_chars);
      out.truncated = true;
    }
    return s;
  };
  if (call.name == "calc") {
    auto v = EvaluateExpression(call.input);
    if (v.ok()) {
      out.output = *v;
    } else {
      out.outcome = pb::OUTCOME_RUNTIME_ERROR;
      out.output = cap("error: " + v.status().message());
    }
    return out;
  }
  if (call.name == "python") {
    SandboxRequest req;
    req.argv = {"/usr/bin/python3", "-I", "-S", "main.py"};
    req.files = {{"main.py", call.input}};
    req.limits = limits;
    auto r = RunSandboxed(req);
    if (r.ok()) out.cpu_ms = r->cpu_ms;
    if (!r.ok() || r->outcome == SandboxOutcome::kSetupFailed) {
      out.outcome = pb::OUTCOME_INFRA_ERROR;
      out.output = "error: the sandbox failed";
      return out;
    }
    switch (r->outcome) {
      case SandboxOutcome::kTimeout:
        out.outcome = pb::OUTCOME_TIMEOUT;
        break;
      case SandboxOutcome::kOutputLimit:
        out.outcome = pb::OUTCOME_OUTPUT_LIMIT;
        break;
      case SandboxOutcome::kSignaled:
        out.outcome = KilledByCpuLimit(*r) ? pb::OUTCOME_TIMEOUT : pb::OUTCOME_RUNTIME_ERROR;
        break;
      case SandboxOutcome::kMemoryLimit:
        out.outcome = pb::OUTCOME_MEMORY_LIMIT;
        break;
      default:
        out.outcome = r->exit_code == 0 ? pb::OUTCOME_OK : pb::OUTCOME_RUNTIME_ERROR;
    }
    out.output = cap(r->exit_code == 0 ? r->stdout_data : r->stdout_data + r->stderr_data);
    out.truncated = out.truncated || r->stdout_truncated;
    return out;
  }
  out.outcome = pb::OUTCOME_FORMAT_ERROR;
  out.output = "error: unknown tool '" + cap(call.name) + "' (calc, python)";
  return out;
}

}  // namespace marlaas::sandbox
