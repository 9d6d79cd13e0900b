// safetensors files, read and written by our own code: an 8-byte little-endian header length,
// a JSON header {name: {dtype, shape, data_offsets:[begin, end]}, "__metadata__": {...}}, then
// the raw little-endian tensor bytes. Reading memory-maps the file read-only (processes loading
// the same base model share its pages) and validates the whole header before any tensor is
// touched: a truncated file, an oversized or malformed header, an unknown dtype, a shape whose
// size overflows, or offsets outside the data or overlapping another tensor are errors that say
// which, never a crash or an out-of-bounds read. A SafetensorsFile is immutable after Open and
// may be read from any thread. No LibTorch here: model/tensor_io.h converts to tensors.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"

namespace marlaas::model {

enum class DType { kF32, kF16, kBF16, kF64, kI64, kI32, kI16, kI8, kU8, kBool };
const char* DTypeName(DType d);  // safetensors spelling: "F32", "BF16", ...
size_t DTypeSize(DType d);
bool ParseDType(const std::string& name, DType* out);

struct TensorView {
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  const unsigned char* data = nullptr;  // inside the mapping (or caller memory when writing)
  size_t bytes = 0;
  int64_t numel() const;
};

inline constexpr uint64_t kMaxSafetensorsHeader = 100u << 20;  // as the reference implementation

class SafetensorsFile {
 public:
  static Result<std::shared_ptr<const SafetensorsFile>> Open(const std::string& path);
  ~SafetensorsFile();

  const std::string& path() const { return path_; }
  std::vector<std::string> names() const;  // sorted
  bool contains(const std::string& name) const { return tensors_.count(name) != 0; }
  // kNotFound names the tensor and the file.
  Result<TensorView> Get(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  // Parses a header held in memory (exposed for the fuzz tests): `data_bytes` is what follows it.
  static Status ParseHeader(const std::string& json, uint64_t data_bytes,
                            std::map<std::string, TensorView>* tensors,
                            std::map<std::string, std::string>* metadata);

 private:
  SafetensorsFile() = default;
  std::string path_;
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
  std::map<std::string, TensorView> tensors_;  // data pointers relative to the data area
  std::map<std::string, std::string> metadata_;
};

// Writes `tensors` (name -> view over caller memory) atomically: a temporary file in the same
// folder, fsync, rename. The header is padded to a multiple of 8 bytes so f32/f64 data is aligned.
Status WriteSafetensors(const std::string& path, const std::map<std::string, TensorView>& tensors,
                        const std::map<std::string, std::string>& metadata = {});

}  // namespace marlaas::model
