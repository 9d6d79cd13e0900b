// The one place that defines how a model calls a tool in its text, and how the answer comes
// back:  <tool name="calc">(3+4)*5</tool>  is answered by  <result>35</result>.
// Tool names: "calc" (the safe calculator) and "python" (code run in the sandbox, its stdout is
// the result). Pure functions, plus ExecuteTool which may run the sandbox.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "sandbox/sandbox.h"
#include "sandbox/verdict.h"

namespace marlaas::sandbox {

struct ParsedToolCall {
  std::string name;
  std::string input;
  size_t begin = 0;  // offset of "<tool"
  size_t end = 0;    // offset just past "</tool>"
};

// The first complete tool call in `text` at or after `from`, if any.
std::optional<ParsedToolCall> FindToolCall(std::string_view text, size_t from = 0);
// The call that `text` ends with (what a completion that stopped at </tool> asks for), if any.
std::optional<ParsedToolCall> TrailingToolCall(std::string_view text);
// The markers (the tiny base's tokenizer has each as one special token: model/pretrain.cc).
inline constexpr char kToolCallOpen[] = "<tool name=\"";
inline constexpr char kToolCallEnd[] = "</tool>";
inline constexpr char kToolResultOpen[] = "<result>";
inline constexpr char kToolResultEnd[] = "</result>";
// How many tool round trips one completion may make.
inline constexpr int kMaxToolTurns = 2;
std::string FormatToolCall(const std::string& name, const std::string& input);
std::string FormatToolResult(const std::string& output);

struct ToolOutput {
  pb::VerifierOutcome outcome = pb::OUTCOME_OK;  // OK, RUNTIME_ERROR, TIMEOUT, ... or INFRA_ERROR
  std::string output;  // what goes between <result> and </result> (capped)
  bool truncated = false;
  double cpu_ms = 0;  // CPU time of its sandbox run (SandboxResult::cpu_ms); 0 for calc
};

// The python tool's own limits, tighter than a verifier's: a tool call is one short computation
// in the middle of a generation (1 s wall, 1 CPU second, 128 MiB, 4 processes, 4 KiB of output,
// a 1 MiB work dir). The calculator is bounded by its own parser (sandbox/calculator.h).
SandboxLimits ToolLimits();

// Runs a parsed call: calc in process, python in the sandbox with `limits`.
ToolOutput ExecuteTool(const ParsedToolCall& call, const SandboxLimits& limits = ToolLimits(),
                       size_t max_output_chars = 512);

}  // namespace marlaas::sandbox
