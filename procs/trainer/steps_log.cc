#include "procs/trainer/steps_log.h"

#include <nlohmann/json.hpp>

#include "base/file_util.h"

namespace marlaas::trainer {

Result<TrimmedSteps> TrimStepsLog(const std::string& tenant_dir, uint64_t steps) {
  const std::string path = tenant_dir + "/steps.jsonl";
  auto text = ReadFile(path);
  if (!text.ok()) {
    if (text.status().code() == StatusCode::kNotFound) return TrimmedSteps{};
    return text.status();
  }
  std::string kept, moved;
  TrimmedSteps out;
  for (size_t begin = 0; begin < text->size();) {
    size_t end = text->find('\n', begin);
    if (end == std::string::npos) end = text->size();
    const std::string line = text->substr(begin, end - begin);
    begin = end + 1;
    if (line.empty()) continue;
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    const bool keep = j.is_object() && j.contains("step") && j["step"].is_number_unsigned() &&
                      j["step"].get<uint64_t>() <= steps;
    (keep ? kept : moved) += line + '\n';
    out.moved += !keep;
  }
  if (out.moved == 0) return out;
  // The lost lines first: should the rewrite fail, they are at worst in both files.
  const std::string lost_path = tenant_dir + "/steps.lost.jsonl";
  auto lost = ReadFile(lost_path);
  if (!lost.ok() && lost.status().code() != StatusCode::kNotFound) return lost.status();
  MARLAAS_RETURN_IF_ERROR(WriteFileAtomically(lost_path, (lost.ok() ? *lost : "") + moved));
  MARLAAS_RETURN_IF_ERROR(WriteFileAtomically(path, kept));
  return out;
}

}  // namespace marlaas::trainer
