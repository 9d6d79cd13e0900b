#include "model/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "base/file_util.h"

namespace marlaas::model {
namespace {

using json = nlohmann::json;

struct DTypeInfo {
  DType dtype;
  const char* name;
  size_t size;
};
constexpr DTypeInfo kDTypes[] = {
    {DType::kF32, "F32", 4},   {DType::kF16, "F16", 2}, {DType::kBF16, "BF16", 2},
    {DType::kF64, "F64", 8},   {DType::kI64, "I64", 8}, {DType::kI32, "I32", 4},
    {DType::kI16, "I16", 2},   {DType::kI8, "I8", 1},   {DType::kU8, "U8", 1},
    {DType::kBool, "BOOL", 1},
};

Status Bad(const std::string& what) {
  return Status(StatusCode::kCorrupt, "safetensors header: " + what);
}

}  // namespace

const char* DTypeName(DType d) {
  for (const auto& i : kDTypes)
    if (i.dtype == d) return i.name;
  return "?";
}

size_t DTypeSize(DType d) {
  for (const auto& i : kDTypes)
    if (i.dtype == d) return i.size;
  return 0;
}

bool ParseDType(const std::string& name, DType* out) {
  for (const auto& i : kDTypes) {
    if (name == i.name) {
      *out = i.dtype;
      return true;
    }
  }
  return false;
}

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

Status SafetensorsFile::ParseHeader(const std::string& text, uint64_t data_bytes,
                                    std::map<std::string, TensorView>* tensors,
                                    std::map<std::string, std::string>* metadata) {
  json header = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (header.is_discarded()) return Bad("not valid JSON");
  if (!header.is_object()) return Bad("not a JSON object");
  struct Range {
    uint64_t begin, end;
    std::string name;
  };
  std::vector<Range> ranges;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const json& entry = it.value();
    if (name == "__metadata__") {
      if (!entry.is_object()) return Bad("__metadata__ is not an object");
      for (auto m = entry.begin(); m != entry.end(); ++m) {
        if (!m.value().is_string())
          return Bad("__metadata__ value '" + m.key() + "' is not a string");
        (*metadata)[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const std::string where = "tensor '" + name + "'";
    if (!entry.is_object()) return Bad(where + " is not an object");
    auto dt = entry.find("dtype");
    auto sh = entry.find("shape");
    auto off = entry.find("data_offsets");
    if (dt == entry.end() || !dt->is_string()) return Bad(where + " has no dtype string");
    if (sh == entry.end() || !sh->is_array()) return Bad(where + " has no shape array");
    if (off == entry.end() || !off->is_array() || off->size() != 2) {
      return Bad(where + " has no data_offsets pair");
    }
    TensorView v;
    if (!ParseDType(dt->get<std::string>(), &v.dtype)) {
      return Bad(where + " has unknown dtype '" + dt->get<std::string>() + "'");
    }
    uint64_t numel = 1;
    for (const json& d : *sh) {
      if (!d.is_number_unsigned())
        return Bad(where + " has a shape entry that is not a non-negative integer");
      const uint64_t dim = d.get<uint64_t>();
      if (dim != 0 && numel > (uint64_t(1) << 62) / dim) return Bad(where + " shape overflows");
      numel *= dim;
      v.shape.push_back(int64_t(dim));
    }
    if (!(*off)[0].is_number_unsigned() || !(*off)[1].is_number_unsigned()) {
      return Bad(where + " data_offsets are not non-negative integers");
    }
    const uint64_t begin = (*off)[0].get<uint64_t>(), end = (*off)[1].get<uint64_t>();
    if (begin > end || end > data_bytes) {
      return Bad(where + " data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                 ") lie outside the " + std::to_string(data_bytes) + " data bytes");
    }
    // numel * size may not fit in 64 bits: compare by division first, so nothing wraps.
    const uint64_t size = DTypeSize(v.dtype);
    if (numel > (end - begin) / size || end - begin != numel * size) {
      const std::string need = numel <= UINT64_MAX / size
                                   ? std::to_string(numel * size)
                                   : std::to_string(numel) + " x " + std::to_string(size);
      return Bad(where + " holds " + std::to_string(end - begin) +
                 " bytes but its shape and dtype need " + need);
    }
    v.data = reinterpret_cast<const unsigned char*>(uintptr_t(begin));  // relative until mapped
    v.bytes = end - begin;
    ranges.push_back({begin, end, name});
    (*tensors)[name] = std::move(v);
  }
  std::sort(ranges.begin(), ranges.end(),
            [](const Range& a, const Range& b) { return a.begin < b.begin; });
  for (size_t i = 1; i < ranges.size(); ++i) {
    if (ranges[i].begin < ranges[i - 1].end) {
      return Bad("tensors '" + ranges[i - 1].name + "' and '" + ranges[i].name + "' overlap");
    }
  }
  return Status::Ok();
}

Result<std::shared_ptr<const SafetensorsFile>> SafetensorsFile::Open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus("open " + path, errno);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    return ErrnoStatus("stat " + path, err);
  }
  const uint64_t size = uint64_t(st.st_size);
  auto fail = [&](const Status& s) {
    ::close(fd);
    return s.Annotate(path);
  };
  if (size < 8)
    return fail(Status(StatusCode::kCorrupt,
                       "truncated: " + std::to_string(size) + " bytes, no header length"));
  std::shared_ptr<SafetensorsFile> file(new SafetensorsFile());
  file->path_ = path;
  file->map_bytes_ = size;
  file->map_ = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  if (file->map_ == MAP_FAILED) {
    file->map_ = nullptr;
    return fail(ErrnoStatus("mmap", errno));
  }
  ::close(fd);
  const auto* base = static_cast<const unsigned char*>(file->map_);
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | base[i];
  if (header_len > kMaxSafetensorsHeader) {
    return Status(StatusCode::kCorrupt, path + ": header length " + std::to_string(header_len) +
                                            " exceeds the " +
                                            std::to_string(kMaxSafetensorsHeader) + "-byte limit");
  }
  if (8 + header_len > size) {
    return Status(StatusCode::kCorrupt, path + ": truncated: header of " +
                                            std::to_string(header_len) + " bytes but only " +
                                            std::to_string(size - 8) + " follow");
  }
  const std::string text(reinterpret_cast<const char*>(base + 8), header_len);
  const uint64_t data_bytes = size - 8 - header_len;
  Status st2 = ParseHeader(text, data_bytes, &file->tensors_, &file->metadata_);
  if (!st2.ok()) return st2.Annotate(path);
  const unsigned char* data = base + 8 + header_len;
  for (auto& [name, view] : file->tensors_) view.data = data + uintptr_t(view.data);
  return std::shared_ptr<const SafetensorsFile>(std::move(file));
}

SafetensorsFile::~SafetensorsFile() {
  if (map_ != nullptr) ::munmap(map_, map_bytes_);
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  for (const auto& kv : tensors_) out.push_back(kv.first);
  return out;
}

Result<TensorView> SafetensorsFile::Get(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) {
    return Status(StatusCode::kNotFound, "no tensor '" + name + "' in " + path_);
  }
  return it->second;
}

Status WriteSafetensors(const std::string& path, const std::map<std::string, TensorView>& tensors,
                        const std::map<std::string, std::string>& metadata) {
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const auto& [name, v] : tensors) {
    if (name == "__metadata__")
      return Status(StatusCode::kInvalidArgument, "tensor name __metadata__ is reserved");
    if (uint64_t(v.numel()) * DTypeSize(v.dtype) != v.bytes) {
      return Status(StatusCode::kInvalidArgument, "tensor '" + name +
                                                      "': " + std::to_string(v.bytes) +
                                                      " bytes do not match its shape and dtype");
    }
    header[name] = {{"dtype", DTypeName(v.dtype)},
                    {"shape", v.shape},
                    {"data_offsets", {offset, offset + v.bytes}}};
    offset += v.bytes;
  }
  std::string text = header.dump();
  while ((8 + text.size()) % 8 != 0) text.push_back(' ');
  std::string blob(8, '\0');
  const uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) blob[size_t(i)] = char((n >> (8 * i)) & 0xff);
  blob += text;
  blob.reserve(blob.size() + offset);
  for (const auto& [name, v] : tensors) blob.append(reinterpret_cast<const char*>(v.data), v.bytes);
  return WriteFileAtomically(path, blob);
}

}  // namespace marlaas::model
