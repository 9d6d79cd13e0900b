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
  const FieldDescriptor* map_value = nullptr;  // a map's: the field of its values
  bool boolean = false;   // a bool field: true or false (or null), not "yes" or 1
  bool repeated = false;  // a list field: an array (or null), not one value, which protobuf took
  // A field (or map value) that takes one number, string or bool (named by `kind`): no object or
  // list (protobuf's words for those were "Starting an object on a scalar field").
  const char* scalar = nullptr;
};

// What a scalar field takes, in words.
const char* ScalarKind(const FieldDescriptor* f) {
  switch (f->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
    case FieldDescriptor::CPPTYPE_INT64:
    case FieldDescriptor::CPPTYPE_UINT32:
    case FieldDescriptor::CPPTYPE_UINT64:
      return "a whole number";
    case FieldDescriptor::CPPTYPE_FLOAT:
    case FieldDescriptor::CPPTYPE_DOUBLE:
      return "a number";
    case FieldDescriptor::CPPTYPE_BOOL:
      return "true or false";
    case FieldDescriptor::CPPTYPE_ENUM:
      return "one of its names (a string)";
    default:
      return f->type() == FieldDescriptor::TYPE_BYTES ? "a base64 string" : "a string";
  }
}

// The shape of the value of `field` (a repeated field's: of each element).
Shape ShapeOf(const FieldDescriptor* field) {
  if (field == nullptr) return {};
  const bool list = field->is_repeated() && !field->is_map();
  if (field->message_type() == nullptr) {
    return {nullptr, false,
            nullptr, field->cpp_type() == FieldDescriptor::CPPTYPE_BOOL,
            list,    ScalarKind(field)};
  }
  if (!field->is_map()) return {field->message_type(), false, nullptr, false, list, nullptr};
  return {nullptr, true, field->message_type()->map_value(), false, false, nullptr};
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
  explicit DuplicateKeyFinder(const Descriptor* root) : typed_(root != nullptr) {
    next_.message = root;
  }
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
  bool string(string_t& s) override {
    // A NUL cut the text short where it was used (a command, a path): refused, not truncated.
    if (typed_ && s.find('\0') != std::string::npos) {
      (void)Value();  // names the element, in a list
      error = "gives key '" + Path() + "' a string with a NUL character (\\u0000) in it";
      return false;
    }
    return Scalar(false);
  }
  bool binary(binary_t&) override { return Scalar(false); }
  bool start_object(std::size_t) override {
    const Shape shape = Value();
    if (shape.repeated) return NotAList();
    if (shape.scalar != nullptr) return WrongKind("an object");
    if (open_.size() >= kMaxDepth) return TooDeep();
    open_.push_back(Frame{true, shape, {}, "", 0});
    return true;
  }
  bool key(string_t& k) override {
    if (typed_ && k.find('\0') != std::string::npos) {
      error = "names a key with a NUL character (\\u0000) in it";
      return false;
    }
    Frame& f = open_.back();
    f.key = k;
    const FieldDescriptor* field = f.shape.message ? FieldNamed(f.shape.message, k) : nullptr;
    // A map's key: its value has the shape of the map's value field.
    next_ = field ? ShapeOf(field) : f.shape.map ? ShapeOf(f.shape.map_value) : Shape{};
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
    if (!shape.repeated && (shape.scalar != nullptr || shape.message != nullptr || shape.map))
      return WrongKind("a list");
    if (open_.size() >= kMaxDepth) return TooDeep();
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
    if ((shape.message != nullptr || shape.map) && !is_null_) return WrongKind("one value");
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
  // `given` (an object, a list, one value) where the field takes another kind of value (called
  // with the value's shape already taken by Value()).
  bool WrongKind(const char* given) {
    const Shape shape = open_.empty() || open_.back().object ? next_ : open_.back().shape;
    const std::string takes = shape.scalar != nullptr ? shape.scalar : "an object ({...})";
    const std::string path = Path();
    error = path.empty() ? std::string("is ") + given + ", not " + takes
                         : "gives key '" + path + "' " + given + " where it takes " + takes;
    return false;
  }
  // Deeper than any job spec goes: refused here, where protobuf said "Message too deep".
  static constexpr size_t kMaxDepth = 32;
  bool TooDeep() {
    error = "nests objects and lists more than " + std::to_string(kMaxDepth) + " deep, at key '" +
            Path() + "'";
    return false;
  }
  std::vector<Frame> open_;
  bool is_null_ = false;
  const bool typed_;  // read as a message: strings with a NUL are refused
  Shape next_;        // the shape of the value that follows the last key (or of the top value)
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
