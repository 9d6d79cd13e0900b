#include "model/tokenizer.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "base/file_util.h"

namespace marlaas::model {
namespace {

using json = nlohmann::json;

Status Bad(const std::string& m) {
  return Status(StatusCode::kInvalidArgument, "tokenizer.json: " + m);
}

// GPT-2's reversible byte <-> printable code point mapping (bytes_to_unicode).
const std::vector<uint32_t>& ByteToCodepoint() {
  static const std::vector<uint32_t> table = [] {
    std::vector<uint32_t> t(256);
    std::vector<bool> direct(256, false);
    for (int b = '!'; b <= '~'; ++b) direct[size_t(b)] = true;
    for (int b = 0xA1; b <= 0xAC; ++b) direct[size_t(b)] = true;
    for (int b = 0xAE; b <= 0xFF; ++b) direct[size_t(b)] = true;
    uint32_t n = 0;
    for (int b = 0; b < 256; ++b) t[size_t(b)] = direct[size_t(b)] ? uint32_t(b) : 256 + n++;
    return t;
  }();
  return table;
}

std::string EncodeUtf8(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += char(cp);
  } else if (cp < 0x800) {
    s += char(0xC0 | (cp >> 6));
    s += char(0x80 | (cp & 0x3F));
  } else {
    s += char(0xE0 | (cp >> 12));
    s += char(0x80 | ((cp >> 6) & 0x3F));
    s += char(0x80 | (cp & 0x3F));
  }
  return s;
}

// A vocabulary string in the byte-level alphabet -> the raw bytes it stands for.
bool FromByteLevel(const std::string& s, std::string* out) {
  static const std::unordered_map<uint32_t, char> inverse = [] {
    std::unordered_map<uint32_t, char> m;
    for (int b = 0; b < 256; ++b) m[ByteToCodepoint()[size_t(b)]] = char(b);
    return m;
  }();
  out->clear();
  size_t i = 0;
  while (i < s.size()) {
    const auto b0 = uint8_t(s[i]);
    uint32_t cp;
    size_t len;
    if (b0 < 0x80) {
      cp = b0, len = 1;
    } else if ((b0 & 0xE0) == 0xC0 && i + 1 < s.size()) {
      cp = ((b0 & 0x1Fu) << 6) | (uint8_t(s[i + 1]) & 0x3Fu), len = 2;
    } else {
      return false;  // the byte-level alphabet stays below U+0800
    }
    auto it = inverse.find(cp);
    if (it == inverse.end()) return false;
    *out += it->second;
    i += len;
  }
  return true;
}

// The "type" of a tokenizer.json component, or "" when it has none that is a string.
std::string TypeOf(const json& component) {
  if (!component.is_object()) return "";
  auto it = component.find("type");
  return it != component.end() && it->is_string() ? it->get<std::string>() : "";
}

// obj[key] as a bool: `def` when absent or null, an error naming `where`.key when not a bool.
Status OptBool(const json& obj, const char* key, bool def, const std::string& where, bool* out) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) {
    *out = def;
    return Status::Ok();
  }
  if (!it->is_boolean()) {
    return Bad(where + "." + key + " must be true or false, not a " + it->type_name());
  }
  *out = it->get<bool>();
  return Status::Ok();
}

// obj[key] as a string: `def` when absent or null, an error naming `where`.key otherwise.
Status OptString(const json& obj, const char* key, const std::string& def, const std::string& where,
                 std::string* out) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) {
    *out = def;
    return Status::Ok();
  }
  if (!it->is_string())
    return Bad(where + "." + key + " must be a string, not a " + it->type_name());
  *out = it->get<std::string>();
  return Status::Ok();
}

// A token id: an integer in [0, kMaxTokenIds), read as int64 so that no value wraps.
Status ReadId(const json& v, const std::string& token, int32_t* out) {
  if (!v.is_number_integer()) {
    return Bad(token + " has an id that is not an integer (" +
               (v.is_number() ? v.dump() : std::string(v.type_name())) + ")");
  }
  const bool too_big = v.is_number_unsigned() ? v.get<uint64_t>() >= uint64_t(kMaxTokenIds)
                                              : v.get<int64_t>() >= kMaxTokenIds;
  if (too_big || (!v.is_number_unsigned() && v.get<int64_t>() < 0)) {
    return Bad(token + " has id " + v.dump() + ", outside [0, " + std::to_string(kMaxTokenIds) +
               ")");
  }
  *out = int32_t(v.get<int64_t>());
  return Status::Ok();
}

}  // namespace

std::string Tokenizer::ByteLevelJson(const std::vector<std::string>& specials) {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[EncodeUtf8(ByteToCodepoint()[size_t(b)])] = b;
  json added = json::array();
  for (size_t i = 0; i < specials.size(); ++i) {
    added.push_back({{"id", 256 + int(i)},
                     {"content", specials[i]},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", true}});
  }
  json byte_level = {{"type", "ByteLevel"},
                     {"add_prefix_space", false},
                     {"trim_offsets", false},
                     {"use_regex", false}};
  json j = {{"version", "1.0"},
            {"truncation", nullptr},
            {"padding", nullptr},
            {"added_tokens", added},
            {"normalizer", nullptr},
            {"pre_tokenizer", byte_level},
            {"post_processor", byte_level},
            {"decoder", byte_level},
            {"model",
             {{"type", "BPE"},
              {"dropout", nullptr},
              {"unk_token", nullptr},
              {"continuing_subword_prefix", nullptr},
              {"end_of_word_suffix", nullptr},
              {"fuse_unk", false},
              {"byte_fallback", false},
              {"ignore_merges", false},
              {"vocab", vocab},
              {"merges", json::array()}}}};
  return j.dump(1) + "\n";
}

Result<Tokenizer> Tokenizer::Load(const std::string& path) {
  MARLAAS_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  auto t = FromJson(text);
  if (!t.ok()) return t.status().Annotate(path);
  return t;
}

Result<Tokenizer> Tokenizer::FromJson(const std::string& text) {
  // Every field is type-checked before it is read; this only catches what a check missed, so
  // that a malformed file is an error rather than a terminated process.
  try {
    return FromJsonUnchecked(text);
  } catch (const json::exception& e) {
    return Bad(std::string("malformed (") + e.what() + ")");
  }
}

Result<Tokenizer> Tokenizer::FromJsonUnchecked(const std::string& text) {
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return Bad("not a JSON object");
  Tokenizer tok;
  if (auto norm = j.find("normalizer"); norm != j.end() && !norm->is_null()) {
    const std::string type = TypeOf(*norm);
    return Bad("normalizer " +
               (type.empty() ? std::string("of JSON type ") + norm->type_name() : type) +
               " is not supported");
  }
  // Pre-tokenizer: ByteLevel (GPT-2 regex or none), or Sequence[Split(regex), ByteLevel].
  const json pre = j.value("pre_tokenizer", json());
  bool split = false;
  tok.rules_ = PretokenizerRules{};
  const json* seq = nullptr;
  if (TypeOf(pre) == "Sequence") {
    auto p = pre.find("pretokenizers");
    if (p != pre.end() && p->is_array() && p->size() == 2 && TypeOf((*p)[0]) == "Split" &&
        TypeOf((*p)[1]) == "ByteLevel") {
      seq = &*p;
    }
  }
  if (TypeOf(pre) == "ByteLevel") {
    MARLAAS_RETURN_IF_ERROR(
        OptBool(pre, "add_prefix_space", false, "pre_tokenizer", &tok.add_prefix_space_));
    MARLAAS_RETURN_IF_ERROR(OptBool(pre, "use_regex", true, "pre_tokenizer", &split));
    if (split) tok.rules_ = Gpt2Rules();
  } else if (seq != nullptr) {
    const json& s = (*seq)[0];
    const json& b = (*seq)[1];
    const std::string where = "pre_tokenizer.pretokenizers";
    std::string behavior;
    bool invert = false;
    MARLAAS_RETURN_IF_ERROR(OptString(s, "behavior", "", where + "[0]", &behavior));
    MARLAAS_RETURN_IF_ERROR(OptBool(s, "invert", false, where + "[0]", &invert));
    if (behavior != "Isolated" || invert) {
      return Bad("Split pre-tokenizer must be Isolated and not inverted");
    }
    auto pattern = s.find("pattern");
    if (pattern == s.end() || !pattern->is_object() || !pattern->contains("Regex") ||
        !(*pattern)["Regex"].is_string()) {
      return Bad("Split pattern must be a Regex");
    }
    MARLAAS_ASSIGN_OR_RETURN(tok.rules_, RulesForPattern((*pattern)["Regex"].get<std::string>()));
    bool use_regex = true;
    MARLAAS_RETURN_IF_ERROR(OptBool(b, "use_regex", true, where + "[1]", &use_regex));
    if (use_regex) return Bad("ByteLevel after Split must not use its regex");
    MARLAAS_RETURN_IF_ERROR(
        OptBool(b, "add_prefix_space", false, where + "[1]", &tok.add_prefix_space_));
    split = true;
  } else {
    return Bad("pre_tokenizer must be ByteLevel or Sequence[Split, ByteLevel]");
  }
  if (!split) tok.rules_.max_digits = -1;  // marker: no splitting at all
  const json model = j.value("model", json());
  if (TypeOf(model) != "BPE") return Bad("model.type must be BPE");
  bool byte_fallback = false;
  MARLAAS_RETURN_IF_ERROR(OptBool(model, "byte_fallback", false, "model", &byte_fallback));
  if (byte_fallback) return Bad("byte_fallback is not supported");
  for (const char* k : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (model.contains(k) && !model[k].is_null()) return Bad(std::string(k) + " is not supported");
  }
  MARLAAS_RETURN_IF_ERROR(OptBool(model, "ignore_merges", false, "model", &tok.ignore_merges_));
  if (!model.contains("vocab") || !model["vocab"].is_object()) return Bad("model.vocab missing");
  int32_t max_id = -1;
  std::vector<std::pair<std::string, int32_t>> entries;
  for (auto it = model["vocab"].begin(); it != model["vocab"].end(); ++it) {
    int32_t id = 0;
    MARLAAS_RETURN_IF_ERROR(ReadId(it.value(), "vocab entry '" + it.key() + "'", &id));
    std::string raw;
    if (!FromByteLevel(it.key(), &raw)) {
      raw = it.key();  // special tokens may sit in the vocabulary verbatim
    }
    entries.emplace_back(raw, id);
    max_id = std::max(max_id, id);
  }
  if (auto added = j.find("added_tokens"); added != j.end() && !added->is_null()) {
    if (!added->is_array()) return Bad("added_tokens must be a list");
    for (size_t i = 0; i < added->size(); ++i) {
      const json& a = (*added)[i];
      const std::string where = "added_tokens[" + std::to_string(i) + "]";
      if (!a.is_object() || !a.contains("content") || !a.contains("id"))
        return Bad(where + ": added token without content or id");
      if (!a["content"].is_string()) {
        return Bad(where + ": content must be a string, not " + a["content"].type_name());
      }
      const std::string content = a["content"].get<std::string>();
      int32_t id = 0;
      MARLAAS_RETURN_IF_ERROR(ReadId(a["id"], where + " '" + content + "'", &id));
      tok.added_.push_back({content, id});
      max_id = std::max(max_id, id);
    }
  }
  tok.id_to_bytes_.assign(size_t(max_id + 1), std::string());
  for (const auto& [raw, id] : entries) {
    tok.id_to_bytes_[size_t(id)] = raw;
    tok.bytes_to_id_.emplace(raw, id);
  }
  for (const Added& a : tok.added_) tok.id_to_bytes_[size_t(a.id)] = a.content;
  std::sort(tok.added_.begin(), tok.added_.end(),
            [](const Added& a, const Added& b) { return a.content.size() > b.content.size(); });
  for (int b = 0; b < 256; ++b) {
    auto it = tok.bytes_to_id_.find(std::string(1, char(b)));
    if (it == tok.bytes_to_id_.end()) return Bad("byte " + std::to_string(b) + " has no token");
    tok.byte_id_[b] = it->second;
  }
  const json merges = model.value("merges", json());
  if (!merges.is_null() && !merges.is_array()) return Bad("model.merges must be a list");
  int32_t rank = 0;
  for (const json& m : merges) {
    std::string left, right;
    if (m.is_string()) {  // "a b"
      const std::string s = m.get<std::string>();
      const size_t sp = s.find(' ');
      if (sp == std::string::npos) return Bad("merge '" + s + "' has no space");
      left = s.substr(0, sp);
      right = s.substr(sp + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      left = m[0].get<std::string>();  // ["a", "b"]
      right = m[1].get<std::string>();
    } else {
      return Bad("merge entry " + m.dump() + " is neither \"a b\" nor [a, b]");
    }
    std::string l, r;
    if (!FromByteLevel(left, &l) || !FromByteLevel(right, &r))
      return Bad("merge of unknown symbols");
    auto li = tok.bytes_to_id_.find(l), ri = tok.bytes_to_id_.find(r),
         mi = tok.bytes_to_id_.find(l + r);
    if (li == tok.bytes_to_id_.end() || ri == tok.bytes_to_id_.end() ||
        mi == tok.bytes_to_id_.end()) {
      return Bad("merge " + m.dump() + " refers to symbols missing from the vocabulary");
    }
    tok.merges_.emplace((uint64_t(uint32_t(li->second)) << 32) | uint32_t(ri->second),
                        std::make_pair(rank++, mi->second));
  }
  return tok;
}

void Tokenizer::EncodePiece(std::string_view piece, std::vector<int32_t>* out) const {
  if (ignore_merges_) {
    auto whole = bytes_to_id_.find(std::string(piece));
    if (whole != bytes_to_id_.end()) {
      out->push_back(whole->second);
      return;
    }
  }
  std::vector<int32_t> syms;
  syms.reserve(piece.size());
  for (unsigned char c : piece) syms.push_back(byte_id_[c]);
  // Repeatedly apply the best-ranked merge among adjacent pairs (pieces are short).
  for (;;) {
    int32_t best_rank = INT32_MAX, best_at = -1, best_id = -1;
    for (size_t i = 0; i + 1 < syms.size(); ++i) {
      auto it = merges_.find((uint64_t(uint32_t(syms[i])) << 32) | uint32_t(syms[i + 1]));
      if (it != merges_.end() && it->second.first < best_rank) {
        best_rank = it->second.first;
        best_at = int32_t(i);
        best_id = it->second.second;
      }
    }
    if (best_at < 0) break;
    syms[size_t(best_at)] = best_id;
    syms.erase(syms.begin() + best_at + 1);
  }
  out->insert(out->end(), syms.begin(), syms.end());
}

std::vector<int32_t> Tokenizer::Encode(std::string_view text) const {
  std::vector<int32_t> out;
  std::string prefixed;
  auto encode_plain = [&](std::string_view part, bool at_start) {
    if (part.empty()) return;
    if (add_prefix_space_ && at_start && part[0] != ' ') {
      prefixed = " " + std::string(part);
      part = prefixed;
    }
    if (rules_.max_digits < 0) {
      EncodePiece(part, &out);
      return;
    }
    for (std::string_view piece : Pretokenize(part, rules_)) EncodePiece(piece, &out);
  };
  size_t start = 0, i = 0;
  while (i < text.size()) {
    const Added* hit = nullptr;
    for (const Added& a : added_) {  // longest first
      if (!a.content.empty() && text.compare(i, a.content.size(), a.content) == 0) {
        hit = &a;
        break;
      }
    }
    if (hit == nullptr) {
      ++i;
      continue;
    }
    encode_plain(text.substr(start, i - start), start == 0);
    out.push_back(hit->id);
    i += hit->content.size();
    start = i;
  }
  encode_plain(text.substr(start), start == 0);
  return out;
}

std::string Tokenizer::Decode(const std::vector<int32_t>& ids) const {
  std::string out;
  for (int32_t id : ids) {
    if (id >= 0 && size_t(id) < id_to_bytes_.size()) out += id_to_bytes_[size_t(id)];
  }
  return out;
}

std::optional<int32_t> Tokenizer::TokenId(const std::string& content) const {
  for (const Added& a : added_)
    if (a.content == content) return a.id;
  auto it = bytes_to_id_.find(content);
  if (it != bytes_to_id_.end()) return it->second;
  return std::nullopt;
}

Status CheckTokenizerFitsModel(const Tokenizer& tok, const ModelConfig& config,
                               const std::string& tokenizer_path) {
  if (tok.vocab_size() <= config.vocab_size) return Status::Ok();
  const int32_t top = tok.vocab_size() - 1;
  return Status(StatusCode::kInvalidArgument,
                tokenizer_path + ": token id " + std::to_string(top) + " ('" + tok.Decode({top}) +
                    "') is not below the model's config.json vocab_size " +
                    std::to_string(config.vocab_size));
}

Result<Tokenizer> LoadModelTokenizer(const std::string& model_dir, const ModelConfig& config) {
  const std::string path = model_dir + "/tokenizer.json";
  MARLAAS_ASSIGN_OR_RETURN(Tokenizer tok, Tokenizer::Load(path));
  MARLAAS_RETURN_IF_ERROR(CheckTokenizerFitsModel(tok, config, path));
  return tok;
}

}  // namespace marlaas::model
