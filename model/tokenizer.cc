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
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return Bad("not a JSON object");
  Tokenizer tok;
  if (j.contains("normalizer") && !j["normalizer"].is_null()) {
    return Bad("normalizer " + j["normalizer"].value("type", std::string("?")) +
               " is not supported");
  }
  // Pre-tokenizer: ByteLevel (GPT-2 regex or none), or Sequence[Split(regex), ByteLevel].
  const json& pre = j.value("pre_tokenizer", json());
  auto byte_level = [&](const json& p) -> Status {
    tok.add_prefix_space_ = p.value("add_prefix_space", false);
    if (p.value("use_regex", true)) tok.rules_ = Gpt2Rules();
    return Status::Ok();
  };
  bool split = false;
  tok.rules_ = PretokenizerRules{};
  if (pre.is_object() && pre.value("type", "") == "ByteLevel") {
    if (!pre.value("use_regex", true)) split = false;
    MARLAAS_RETURN_IF_ERROR(byte_level(pre));
    split = pre.value("use_regex", true);
  } else if (pre.is_object() && pre.value("type", "") == "Sequence" &&
             pre.contains("pretokenizers") && pre["pretokenizers"].size() == 2 &&
             pre["pretokenizers"][0].value("type", "") == "Split" &&
             pre["pretokenizers"][1].value("type", "") == "ByteLevel") {
    const json& s = pre["pretokenizers"][0];
    if (s.value("behavior", "") != "Isolated" || s.value("invert", false)) {
      return Bad("Split pre-tokenizer must be Isolated and not inverted");
    }
    if (!s.contains("pattern") || !s["pattern"].contains("Regex"))
      return Bad("Split pattern must be a Regex");
    MARLAAS_ASSIGN_OR_RETURN(tok.rules_, RulesForPattern(s["pattern"]["Regex"].get<std::string>()));
    if (pre["pretokenizers"][1].value("use_regex", true))
      return Bad("ByteLevel after Split must not use its regex");
    tok.add_prefix_space_ = pre["pretokenizers"][1].value("add_prefix_space", false);
    split = true;
  } else {
    return Bad("pre_tokenizer must be ByteLevel or Sequence[Split, ByteLevel]");
  }
  if (!split) tok.rules_.max_digits = -1;  // marker: no splitting at all
  const json& model = j.value("model", json());
  if (!model.is_object() || model.value("type", "") != "BPE") return Bad("model.type must be BPE");
  if (model.value("byte_fallback", false)) return Bad("byte_fallback is not supported");
  for (const char* k : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (model.contains(k) && !model[k].is_null()) return Bad(std::string(k) + " is not supported");
  }
  tok.ignore_merges_ = model.value("ignore_merges", false);
  if (!model.contains("vocab") || !model["vocab"].is_object()) return Bad("model.vocab missing");
  int32_t max_id = -1;
  std::vector<std::pair<std::string, int32_t>> entries;
  for (auto it = model["vocab"].begin(); it != model["vocab"].end(); ++it) {
    if (!it.value().is_number_integer() || it.value().get<int64_t>() < 0)
      return Bad("vocab id of '" + it.key() + "'");
    std::string raw;
    if (!FromByteLevel(it.key(), &raw)) {
      raw = it.key();  // special tokens may sit in the vocabulary verbatim
    }
    entries.emplace_back(raw, it.value().get<int32_t>());
    max_id = std::max(max_id, entries.back().second);
  }
  if (j.contains("added_tokens") && j["added_tokens"].is_array()) {
    for (const json& a : j["added_tokens"]) {
      if (!a.contains("content") || !a.contains("id"))
        return Bad("added token without content or id");
      tok.added_.push_back({a["content"].get<std::string>(), a["id"].get<int32_t>()});
      max_id = std::max(max_id, tok.added_.back().id);
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
  const json& merges = model.value("merges", json::array());
  int32_t rank = 0;
  for (const json& m : merges) {
    std::string left, right;
    if (m.is_string()) {  // "a b"
      const std::string s = m.get<std::string>();
      const size_t sp = s.find(' ');
      if (sp == std::string::npos) return Bad("merge '" + s + "' has no space");
      left = s.substr(0, sp);
      right = s.substr(sp + 1);
    } else if (m.is_array() && m.size() == 2) {  // ["a", "b"]
      left = m[0].get<std::string>();
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

}  // namespace marlaas::model
