// Unicode character classes used by byte-level BPE pre-tokenizers: \p{L} (letters), \p{N}
// (numbers) and \s (the White_Space property), plus UTF-8 decoding that tolerates invalid bytes.
// Pure functions; any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace marlaas::unicode {

struct CodeRange {
  uint32_t first, last;
};
extern const CodeRange kLetters[];
extern const size_t kLettersCount;
extern const CodeRange kNumbers[];
extern const size_t kNumbersCount;

bool IsLetter(uint32_t cp);
bool IsNumber(uint32_t cp);
bool IsWhitespace(uint32_t cp);

// A code point decoded from UTF-8 at some offset. An invalid or truncated sequence decodes as
// one byte with cp = kInvalid, which is in no class above (so it behaves like punctuation).
inline constexpr uint32_t kInvalid = 0xFFFFFFFF;
struct Decoded {
  uint32_t cp;
  uint32_t bytes;  // 1..4
};
Decoded DecodeUtf8(std::string_view s, size_t at);

}  // namespace marlaas::unicode
