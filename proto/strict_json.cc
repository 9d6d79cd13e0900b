#include "proto/strict_json.h"

#include <map>
#include <nlohmann/json.hpp>
#include <vector>

namespace marlaas {
namespace {

using json = nlohmann::json;
using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;

// What a JSON value is read as: a message (its fields have two names), a map (keys as written,
// values of `value_message` when those are messages), or anything else.
struct Shape {
  const Descriptor* message = nullptr;
  bool map = false;
  const Descriptor* value_message = nullptr;
  bool boolean = false;   // a bool field: true or false (or null), not "yes" or 1
  bool repeated = false;  // a list field: an array (or null), not one value, which protobuf took
};

// The shape of the value of `field` (a repeated field's: of each element).
Shape ShapeOf(const FieldDescriptor* field) {
  if (field == nullptr) return {};
  const bool list = field->is_repeated() && !field->is_map();
  if (field->message_type() == nullptr)
    return {nullptr, false, nullptr, field->cpp_type() == FieldDescriptor::CPPTYPE_BOOL, list};
  if (!field->is_map()) return {field->message_type(), false, nullptr, false, list};
  const FieldDescriptor* value = field->message_type()->map_value();
  return {nullptr, true, value ? value->message_type() : nullptr, false, false};
}

const FieldDescriptor* FieldNamed(const Descriptor* m, const std::string& key) {
  if (const FieldDescriptor* f = m->FindFieldByName(key)) return f;
  for (int i = 0; i < m->field_count(); ++i)
    if (m->field(i)->json_name() == key) return m->field(i);
  return nullptr;
}

// Walks the parse, keeping where it is (to name a key) and the keys of each open object.
class DuplicateKeyFinder : public nlohmann::json_sax<json> {
 public:
  explicit DuplicateKeyFinder(const Descriptor* root) { next_.message = root; }
  std::string error;  // the first problem found

  bool null() override {
    is_null_ = true;  // protobuf reads null as unset: a list field may take it
    const bool ok = Scalar(true);
    is_null_ = false;
    return ok;
  }
  bool boolean(bool) override { return Scalar(true); }
  bool number_integer(number_integer_t) override { return Scalar(false); }
  bool number_unsigned(number_unsigned_t) override { return Scalar(false); }
  bool number_float(number_float_t, const string_t&) override { return Scalar(false); }
  bool string(string_t&) override { return Scalar(false); }
  bool binary(binary_t&) override { return Scalar(false); }
  bool start_object(std::size_t) override {
    const Shape shape = Value();
    if (shape.repeated) return NotAList();
    open_.push_back(Frame{true, shape, {}, "", 0});
    return true;
  }
  bool key(string_t& k) override {
    Frame& f = open_.back();
    f.key = k;
    const FieldDescriptor* field = f.shape.message ? FieldNamed(f.shape.message, k) : nullptr;
    next_ = field ? ShapeOf(field) : Shape{f.shape.value_message, false, nullptr, false, false};
    const std::string name = field ? field->name() : k;  // one name per field
    const auto [at, added] = f.keys.emplace(name, k);
    if (!added) {
      error = "names key '" + Path() + "' twice" +
              (at->second == k ? std::string() : " (as '" + at->second + "' and '" + k + "')");
      return false;  // stops the parse
    }
    return true;
  }
  bool end_object() override {
    open_.pop_back();
    return true;
  }
  bool start_array(std::size_t) override {
    Shape shape = Value();
    shape.repeated = false;  // the list's elements are each one value
    open_.push_back(Frame{false, shape, {}, "", -1});
    return true;
  }
  bool end_array() override {
    open_.pop_back();
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override {
    // "[json.exception.parse_error.101] parse error at line 1, column 9: syntax error ..."
    const std::string what = e.what();
    const std::string at = "parse error at ";
    const size_t p = what.find(at);
    error =
        "is not valid JSON (" + (p == std::string::npos ? what : what.substr(p + at.size())) + ")";
    return false;
  }

 private:
  struct Frame {
    bool object;
    Shape shape;                              // objects: their own; arrays: their elements'
    std::map<std::string, std::string> keys;  // by field name: the key as first written
    std::string key;                          // objects: the current member's
    long index;                               // arrays: the current element's
  };
  // A value that is no object or array; `fits_bool`: true, false or null (which protobuf reads
  // as unset), the only values a bool field takes here (protobuf also took the strings "yes",
  // "no", "true" and "false").
  bool Scalar(bool fits_bool) {
    const Shape shape = Value();
    if (shape.repeated && !is_null_) return NotAList();
    if (shape.boolean && !fits_bool) {
      error = "gives key '" + Path() + "' a value that is not true or false";
      return false;
    }
    return true;
  }
  // A value starts: its shape (an array's elements share the array's); in an array, it is the
  // next element.
  Shape Value() {
    if (open_.empty() || open_.back().object) return next_;
    ++open_.back().index;
    return open_.back().shape;
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
  // A list field given one value ("command": "/usr/bin/python3 check.py" was taken as a list of
  // one program of that name).
  bool NotAList() {
    error = "gives key '" + Path() + "' one value where it takes a list ([...])";
    return false;
  }
  std::vector<Frame> open_;
  bool is_null_ = false;
  Shape next_;  // the shape of the value that follows the last key (or of the top value)
};

}  // namespace

Status CheckStrictJson(const std::string& text, const Descriptor* message) {
  DuplicateKeyFinder finder(message);
  const bool ok = json::sax_parse(text, &finder);
  if (ok) return Status::Ok();
  return Status(StatusCode::kInvalidArgument,
                finder.error.empty() ? "is not valid JSON" : finder.error);
}

}  // namespace marlaas
