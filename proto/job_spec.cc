#include "proto/job_spec.h"

#include <google/protobuf/util/json_util.h>
#include <sys/stat.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>

#include "base/file_util.h"
#include "proto/strict_json.h"

namespace marlaas {
namespace {

namespace util = google::protobuf::util;

// Half a control frame (procs/serve/control_frame.h): a valid job always fits one.
constexpr size_t kMaxVerifierFileBytes = 512 << 10;
// Files and command items: the sandbox's work dir takes 1024 names, its request 4096 files.
constexpr size_t kMaxVerifierFiles = 256;
constexpr size_t kMaxVerifierArgs = 1024;

const std::vector<std::string>& KnownTargets() {
  static const std::vector<std::string> kTargets = {"q_proj",    "k_proj",  "v_proj",   "o_proj",
                                                    "gate_proj", "up_proj", "down_proj"};
  return kTargets;
}

bool Contains(const std::vector<std::string>& v, const std::string& s) {
  for (const auto& x : v)
    if (x == s) return true;
  return false;
}

std::string Join(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& x : v) out += (out.empty() ? "" : ", ") + x;
  return out;
}

Status FieldError(const std::string& field, const std::string& what) {
  return Status(StatusCode::kInvalidArgument, "job spec field '" + field + "': " + what);
}

// A value the user gave, quoted in an error: its first 80 bytes (a 1 MiB tenant id made the
// reply too large to send, and the reason was lost).
std::string Quoted(const std::string& value) {
  constexpr size_t kShown = 80;
  return "'" + (value.size() <= kShown ? value : value.substr(0, kShown) + "...") + "'";
}

// Whole numbers in full (3600000, not 3.6e+06), others with 6 significant digits.
std::string Num(double v) {
  if (std::abs(v) < 1e15 && v == std::floor(v)) return std::to_string(int64_t(v));
  std::ostringstream s;
  s << v;
  return s.str();
}

// Integer field within [lo, hi].
template <typename T>
Status Range(bool present, T value, double lo, double hi, const std::string& field) {
  if (!present) return Status::Ok();
  if (double(value) < lo || double(value) > hi) {
    return FieldError(field,
                      Num(double(value)) + " is out of range [" + Num(lo) + ", " + Num(hi) + "]");
  }
  return Status::Ok();
}

// Float field within (lo, hi] (lo_open) or [lo, hi].
Status FloatRange(bool present, float value, double lo, double hi, bool lo_open, bool hi_open,
                  const std::string& field) {
  if (!present) return Status::Ok();
  const bool ok = std::isfinite(value) && (lo_open ? value > lo : value >= lo) &&
                  (hi_open ? value < hi : value <= hi);
  if (!ok) {
    return FieldError(field, Num(value) + " is out of range " + (lo_open ? "(" : "[") + Num(lo) +
                                 ", " + Num(hi) + (hi_open ? ")" : "]"));
  }
  return Status::Ok();
}

// Protobuf reports JSON errors as "(outer.path) field: what" or "(outer.path): what"; turn that
// into our "job spec field 'outer.path.field': what" so every error names its field the same way.
Status FromJsonError(const std::string& msg) {
  std::string path, rest = msg;
  if (!rest.empty() && rest[0] == '(') {
    const size_t close = rest.find(')');
    if (close != std::string::npos) {
      path = rest.substr(1, close - 1);
      rest = rest.substr(close + 1);
      if (!rest.empty() && rest[0] == ' ') rest = rest.substr(1);
    }
  }
  const size_t colon = rest.find(": ");
  if (colon != std::string::npos && rest.find(' ') >= colon) {  // "name: what", name has no space
    const std::string name = rest.substr(0, colon);
    if (!name.empty()) path = path.empty() ? name : path + "." + name;
    rest = rest.substr(colon + 2);
  } else if (!rest.empty() && rest[0] == ':') {
    rest = rest.substr(rest.size() > 1 && rest[1] == ' ' ? 2 : 1);
  }
  if (rest == "Cannot find field.") rest = "unknown field";
  // 'invalid value "x" for type TYPE_UINT32': in words.
  const std::string invalid = "invalid value ", for_type = " for type TYPE_";
  const size_t type_at = rest.rfind(for_type);
  if (rest.rfind(invalid, 0) == 0 && type_at != std::string::npos) {
    const std::string type = rest.substr(type_at + for_type.size());
    const bool whole = type.find("INT") != std::string::npos;  // INT32, UINT64, SINT32, ...
    const bool number = whole || type == "FLOAT" || type == "DOUBLE";
    if (number)
      rest = rest.substr(invalid.size(), type_at - invalid.size()) + " is not " +
             (whole ? "a whole number" : "a number");
  }
  if (path.empty())
    return Status(StatusCode::kInvalidArgument, "job spec is not valid JSON: " + rest);
  return FieldError(path, rest);
}

}  // namespace

bool ValidTenantId(const std::string& id) {
  if (id.empty() || id.size() > 63) return false;
  for (char c : id) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-')) return false;
  }
  return true;
}

const std::vector<std::string>& KnownTasks() {
  static const std::vector<std::string> kTasks = {"arithmetic", "countdown", "python_functions",
                                                  "calculator_tool", "custom"};
  return kTasks;
}

Status ValidateJobSpec(const pb::JobSpec& s) {
  if (!ValidTenantId(s.tenant())) {
    return FieldError("tenant", Quoted(s.tenant()) + " must be 1-63 characters of [a-z0-9_-]");
  }
  if (s.tenant()[0] == '-') {
    return FieldError("tenant", Quoted(s.tenant()) +
                                    " must not start with '-' (commands would take it for an "
                                    "option)");
  }
  if (!Contains(KnownTasks(), s.task())) {
    return FieldError("task", Quoted(s.task()) + " is not one of: " + Join(KnownTasks()));
  }
  if (s.task() == "custom") {
    if (!s.dataset().has_jsonl_path() || s.dataset().jsonl_path().empty()) {
      return FieldError("dataset.jsonl_path", "required for task 'custom'");
    }
    if (s.verifier().command_size() == 0) {
      return FieldError("verifier.command", "required for task 'custom'");
    }
    const std::string& program = s.verifier().command(0);
    if (program.empty() || program[0] != '/') {
      return FieldError("verifier.command",
                        "its first item " + Quoted(program) +
                            " must be the program's absolute path (like /usr/bin/python3): the "
                            "sandbox runs it without a search path");
    }
    // Past these a job was admitted and then failed at its first verification ("Broken pipe").
    if (s.verifier().files_size() > int(kMaxVerifierFiles)) {
      return FieldError("verifier.files", std::to_string(s.verifier().files_size()) +
                                              " files, more than the " +
                                              std::to_string(kMaxVerifierFiles) + " allowed");
    }
    if (s.verifier().command_size() > int(kMaxVerifierArgs)) {
      return FieldError("verifier.command", std::to_string(s.verifier().command_size()) +
                                                " items, more than the " +
                                                std::to_string(kMaxVerifierArgs) + " allowed");
    }
    size_t bytes = 0;
    for (const auto& [name, body] : s.verifier().files()) {
      if (name.empty() || name.size() > 100 || name[0] == '.' ||
          name.find('/') != std::string::npos) {
        return FieldError("verifier.files", Quoted(name) + " must be a plain file name");
      }
      bytes += body.size();
    }
    if (bytes > kMaxVerifierFileBytes) {
      return FieldError("verifier.files", std::to_string(bytes) + " bytes, more than the " +
                                              std::to_string(kMaxVerifierFileBytes) + " allowed");
    }
  } else if (s.dataset().has_jsonl_path() && !s.dataset().jsonl_path().empty()) {
    return FieldError("dataset.jsonl_path", "only task 'custom' reads a dataset file; '" +
                                                s.task() + "' generates its own examples");
  } else if (s.verifier().files_size() != 0) {
    return FieldError("verifier.files", "only task 'custom' takes verifier files");
  } else if (s.verifier().command_size() != 0) {
    return FieldError("verifier.command", "only task 'custom' takes a verifier command; '" +
                                              s.task() + "' has a built-in verifier");
  }
  const auto& l = s.lora();
  // 64: the most the CUDA kernels take (kernels/lora_limits.h), so a job runs on either device.
  MARLAAS_RETURN_IF_ERROR(Range(l.has_rank(), l.rank(), 1, 64, "lora.rank"));
  MARLAAS_RETURN_IF_ERROR(FloatRange(l.has_alpha(), l.alpha(), 0, 1024, true, false, "lora.alpha"));
  for (int i = 0; i < l.targets_size(); ++i) {
    if (!Contains(KnownTargets(), l.targets(i))) {
      return FieldError("lora.targets",
                        Quoted(l.targets(i)) + " is not one of: " + Join(KnownTargets()));
    }
    for (int j = 0; j < i; ++j) {
      if (l.targets(j) == l.targets(i))
        return FieldError("lora.targets", Quoted(l.targets(i)) + " twice");
    }
  }
  const auto& o = s.optimizer();
  MARLAAS_RETURN_IF_ERROR(FloatRange(o.has_learning_rate(), o.learning_rate(), 0, 1, true, false,
                                     "optimizer.learning_rate"));
  MARLAAS_RETURN_IF_ERROR(
      FloatRange(o.has_beta1(), o.beta1(), 0, 1, false, true, "optimizer.beta1"));
  MARLAAS_RETURN_IF_ERROR(
      FloatRange(o.has_beta2(), o.beta2(), 0, 1, false, true, "optimizer.beta2"));
  MARLAAS_RETURN_IF_ERROR(FloatRange(o.has_weight_decay(), o.weight_decay(), 0, 1, false, false,
                                     "optimizer.weight_decay"));
  MARLAAS_RETURN_IF_ERROR(
      FloatRange(o.has_grad_clip(), o.grad_clip(), 0, 1e4, false, false, "optimizer.grad_clip"));
  MARLAAS_RETURN_IF_ERROR(
      Range(o.has_warmup_steps(), o.warmup_steps(), 0, 1e6, "optimizer.warmup_steps"));
  if (o.has_schedule() && !Contains({"constant", "linear", "cosine"}, o.schedule())) {
    return FieldError("optimizer.schedule",
                      Quoted(o.schedule()) + " is not one of: constant, linear, cosine");
  }
  const auto& g = s.grpo();
  MARLAAS_RETURN_IF_ERROR(
      FloatRange(g.has_clip_eps_low(), g.clip_eps_low(), 0, 1, false, false, "grpo.clip_eps_low"));
  MARLAAS_RETURN_IF_ERROR(FloatRange(g.has_clip_eps_high(), g.clip_eps_high(), 0, 10, false, false,
                                     "grpo.clip_eps_high"));
  MARLAAS_RETURN_IF_ERROR(
      FloatRange(g.has_kl_beta(), g.kl_beta(), 0, 10, false, false, "grpo.kl_beta"));
  const auto& p = s.sampling();
  // From 0.01: far smaller ones sample the argmax anyway, and below 3e-39 1/T is infinite and
  // every weight NaN.
  MARLAAS_RETURN_IF_ERROR(FloatRange(p.has_temperature(), p.temperature(), double(0.01f), 4, false,
                                     false, "sampling.temperature"));
  MARLAAS_RETURN_IF_ERROR(
      FloatRange(p.has_top_p(), p.top_p(), 0, 1, true, false, "sampling.top_p"));
  MARLAAS_RETURN_IF_ERROR(Range(p.has_top_k(), p.top_k(), 0, 1e6, "sampling.top_k"));
  MARLAAS_RETURN_IF_ERROR(
      Range(p.has_max_new_tokens(), p.max_new_tokens(), 1, 8192, "sampling.max_new_tokens"));
  const auto& b = s.sandbox();
  MARLAAS_RETURN_IF_ERROR(
      Range(b.has_timeout_ms(), b.timeout_ms(), 10, 600000, "sandbox.timeout_ms"));
  MARLAAS_RETURN_IF_ERROR(Range(b.has_memory_mb(), b.memory_mb(), 16, 65536, "sandbox.memory_mb"));
  MARLAAS_RETURN_IF_ERROR(Range(b.has_max_output_bytes(), b.max_output_bytes(), 1, 1 << 26,
                                "sandbox.max_output_bytes"));
  MARLAAS_RETURN_IF_ERROR(
      Range(b.has_max_processes(), b.max_processes(), 1, 4096, "sandbox.max_processes"));
  const auto& d = s.dataset();
  MARLAAS_RETURN_IF_ERROR(Range(d.has_difficulty(), d.difficulty(), 1, 5, "dataset.difficulty"));
  MARLAAS_RETURN_IF_ERROR(
      Range(d.has_eval_prompts(), d.eval_prompts(), 1, 100000, "dataset.eval_prompts"));
  MARLAAS_RETURN_IF_ERROR(Range(s.has_group_size(), s.group_size(), 2, 256, "group_size"));
  MARLAAS_RETURN_IF_ERROR(
      Range(s.has_prompts_per_step(), s.prompts_per_step(), 1, 1024, "prompts_per_step"));
  MARLAAS_RETURN_IF_ERROR(Range(s.has_max_steps(), s.max_steps(), 1, 1000000, "max_steps"));
  MARLAAS_RETURN_IF_ERROR(Range(s.has_max_staleness(), s.max_staleness(), 0, 16, "max_staleness"));
  MARLAAS_RETURN_IF_ERROR(
      Range(s.has_checkpoint_every(), s.checkpoint_every(), 1, 1000000, "checkpoint_every"));
  MARLAAS_RETURN_IF_ERROR(Range(s.has_tool_result_timeout_ms(), s.tool_result_timeout_ms(), 100,
                                3600000, "tool_result_timeout_ms"));
  return Status::Ok();
}

void ApplyJobSpecDefaults(pb::JobSpec* s) {
  auto* l = s->mutable_lora();
  if (!l->has_rank()) l->set_rank(8);
  if (!l->has_alpha()) l->set_alpha(2.0f * float(l->rank()));
  if (l->targets_size() == 0) {
    for (const auto& t : KnownTargets()) l->add_targets(t);
  }
  auto* o = s->mutable_optimizer();
  if (!o->has_learning_rate()) o->set_learning_rate(2e-3f);
  if (!o->has_beta1()) o->set_beta1(0.9f);
  if (!o->has_beta2()) o->set_beta2(0.999f);
  if (!o->has_weight_decay()) o->set_weight_decay(0.0f);
  if (!o->has_grad_clip()) o->set_grad_clip(1.0f);
  if (!o->has_warmup_steps()) o->set_warmup_steps(0);
  if (!o->has_schedule()) o->set_schedule("constant");
  auto* g = s->mutable_grpo();
  if (!g->has_clip_eps_low()) g->set_clip_eps_low(0.2f);
  if (!g->has_clip_eps_high()) g->set_clip_eps_high(0.28f);
  if (!g->has_kl_beta()) g->set_kl_beta(0.0f);
  if (!g->has_normalize_std()) g->set_normalize_std(true);
  auto* p = s->mutable_sampling();
  if (!p->has_temperature()) p->set_temperature(1.0f);
  if (!p->has_top_p()) p->set_top_p(1.0f);
  if (!p->has_top_k()) p->set_top_k(0);
  if (!p->has_max_new_tokens()) p->set_max_new_tokens(64);
  if (!p->has_seed()) p->set_seed(0);
  auto* b = s->mutable_sandbox();
  if (!b->has_timeout_ms()) b->set_timeout_ms(2000);
  if (!b->has_memory_mb()) b->set_memory_mb(256);
  if (!b->has_max_output_bytes()) b->set_max_output_bytes(65536);
  if (!b->has_max_processes()) b->set_max_processes(16);
  auto* d = s->mutable_dataset();
  if (!d->has_seed()) d->set_seed(0);
  if (!d->has_difficulty()) d->set_difficulty(1);
  if (!d->has_eval_prompts()) d->set_eval_prompts(64);
  if (!s->has_group_size()) s->set_group_size(8);
  if (!s->has_prompts_per_step()) s->set_prompts_per_step(4);
  if (!s->has_max_steps()) s->set_max_steps(50);
  if (!s->has_max_staleness()) s->set_max_staleness(1);
  if (!s->has_checkpoint_every()) s->set_checkpoint_every(10);
  if (!s->has_tool_result_timeout_ms()) s->set_tool_result_timeout_ms(30000);
}

Result<pb::JobSpec> ParseJobSpecJson(const std::string& text) {
  // A byte-order mark (editors on Windows write one) is no part of the JSON: skipped, as the
  // dataset reader does (it made "not valid JSON" with the mark shown raw).
  const std::string json = text.rfind("\xEF\xBB\xBF", 0) == 0 ? text.substr(3) : text;
  pb::JobSpec spec;
  if (Status strict = CheckStrictJson(json, pb::JobSpec::descriptor()); !strict.ok())
    return Status(strict.code(), "job spec " + strict.message());
  util::JsonParseOptions options;
  options.ignore_unknown_fields = false;
  const auto st = util::JsonStringToMessage(json, &spec, options);
  if (!st.ok()) return FromJsonError(std::string(st.message()));
  MARLAAS_RETURN_IF_ERROR(ValidateJobSpec(spec));
  ApplyJobSpecDefaults(&spec);
  MARLAAS_RETURN_IF_ERROR(ValidateJobSpec(spec));  // defaults derived from fields (alpha) too
  return spec;
}

namespace {

// A job spec file's text read by `read`, parsed and checked; every error names the path.
Result<pb::JobSpec> LoadJobSpecWith(const std::string& path,
                                    const std::function<Result<std::string>()>& read) {
  if (path.empty())
    return Status(StatusCode::kInvalidArgument, "the job spec's file name is empty");
  Result<std::string> text = read();
  if (!text.ok()) {
    return Status(text.status().code(), "cannot open job spec " + path +
                                            (text.status().code() == StatusCode::kNotFound
                                                 ? std::string()
                                                 : ": " + text.status().message()));
  }
  Result<pb::JobSpec> spec = ParseJobSpecJson(*text);
  if (!spec.ok()) return spec.status().Annotate(path);
  return spec;
}

}  // namespace

Result<pb::JobSpec> LoadJobSpecFile(const std::string& path) {
  return LoadJobSpecWith(path, [&] { return ReadFile(path); });
}

Result<pb::JobSpec> LoadUserJobSpec(const std::string& path) {
  // The user's own file: `serve --job <(envsubst < job.json)` is read too.
  MARLAAS_ASSIGN_OR_RETURN(pb::JobSpec spec,
                           LoadJobSpecWith(path, [&] { return ReadUserFile(path, 16 << 20); }));
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash);
  // A relative dataset path is the job file's neighbour, as the verifier's files are; made
  // absolute, it names the same file for a service started in another directory.
  pb::DatasetSpec* d = spec.mutable_dataset();
  if (d->has_jsonl_path() && !d->jsonl_path().empty() && d->jsonl_path()[0] != '/') {
    std::error_code ec;
    const std::filesystem::path full = std::filesystem::absolute(dir + "/" + d->jsonl_path(), ec);
    if (ec)
      return Status(StatusCode::kIo, path + ": resolving dataset.jsonl_path: " + ec.message());
    d->set_jsonl_path(full.lexically_normal().string());
  }
  pb::VerifierSpec* v = spec.mutable_verifier();
  // Where each file of the work dir came from: two arguments, or an argument and a `files` entry,
  // that would put different text under one name are refused (the last one won without a word).
  std::map<std::string, std::string> source;
  for (const auto& [name, body] : v->files()) source[name] = "verifier.files '" + name + "'";
  for (int i = 1; i < v->command_size(); ++i) {
    const std::string& arg = v->command(i);
    const std::string file = !arg.empty() && arg[0] == '/' ? arg : dir + "/" + arg;
    struct stat st;
    if (arg.empty() || ::stat(file.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    std::ifstream in(file, std::ios::binary);
    if (!in) continue;
    std::ostringstream body;
    body << in.rdbuf();
    const std::string name = arg.substr(arg.rfind('/') + 1);
    const auto [was, added] = source.emplace(name, "verifier.command item '" + arg + "'");
    if (!added && v->files().at(name) != body.str()) {
      return Status(StatusCode::kInvalidArgument,
                    path + ": " + was->second + " and verifier.command item '" + arg +
                        "' would both be the sandbox's file '" + name +
                        "' with different contents: give them different names");
    }
    (*v->mutable_files())[name] = body.str();
    v->set_command(i, name);
  }
  Status st = ValidateJobSpec(spec);
  if (!st.ok()) return st.Annotate(path);
  return spec;
}

std::string JobSpecToJson(const pb::JobSpec& spec) {
  std::string out;
  util::JsonPrintOptions options;
  options.add_whitespace = true;
  options.preserve_proto_field_names = true;
  options.always_print_primitive_fields = true;
  (void)util::MessageToJsonString(spec, &out, options);
  return out;
}

}  // namespace marlaas
