#include "proto/strict_json.h"

#include <nlohmann/json.hpp>
#include <set>
#include <vector>

namespace marlaas {
namespace {

using json = nlohmann::json;

// Walks the parse, keeping where it is (for naming a key) and the keys of each open object.
class DuplicateKeyFinder : public nlohmann::json_sax<json> {
 public:
  std::string error;  // the first problem found

  bool null() override { return Value(); }
  bool boolean(bool) override { return Value(); }
  bool number_integer(number_integer_t) override { return Value(); }
  bool number_unsigned(number_unsigned_t) override { return Value(); }
  bool number_float(number_float_t, const string_t&) override { return Value(); }
  bool string(string_t&) override { return Value(); }
  bool binary(binary_t&) override { return Value(); }
  bool start_object(std::size_t) override {
    Value();
    open_.push_back(Frame{true, {}, "", 0});
    return true;
  }
  bool key(string_t& k) override {
    Frame& f = open_.back();
    f.key = k;
    if (!f.keys.insert(k).second) {
      error = "names key '" + Path() + "' twice";
      return false;  // stops the parse
    }
    return true;
  }
  bool end_object() override {
    open_.pop_back();
    return true;
  }
  bool start_array(std::size_t) override {
    Value();
    open_.push_back(Frame{false, {}, "", -1});
    return true;
  }
  bool end_array() override {
    open_.pop_back();
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override {
    // "[json.exception.parse_error.101] parse error at line 1, column 9: syntax error ..."
    std::string what = e.what();
    const std::string at = "parse error at ";
    const size_t p = what.find(at);
    error =
        "is not valid JSON (" + (p == std::string::npos ? what : what.substr(p + at.size())) + ")";
    return false;
  }

 private:
  struct Frame {
    bool object;
    std::set<std::string> keys;
    std::string key;  // objects: the current member's
    long index;       // arrays: the current element's
  };
  // A value starts: in an array, it is the next element.
  bool Value() {
    if (!open_.empty() && !open_.back().object) ++open_.back().index;
    return true;
  }
  std::string Path() const {
    std::string p;
    for (const Frame& f : open_) {
      if (f.object) {
        p += (p.empty() ? "" : ".") + f.key;
      } else {
        p += "[" + std::to_string(f.index) + "]";
      }
    }
    return p;
  }
  std::vector<Frame> open_;
};

}  // namespace

Status CheckStrictJson(const std::string& text) {
  DuplicateKeyFinder finder;
  const bool ok = json::sax_parse(text, &finder);
  if (ok) return Status::Ok();
  return Status(StatusCode::kInvalidArgument,
                finder.error.empty() ? "is not valid JSON" : finder.error);
}

}  // namespace marlaas
