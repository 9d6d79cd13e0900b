#include <algorithm>

#include "model/unicode/tables.h"

namespace marlaas::unicode {
namespace {

bool InRanges(const CodeRange* r, size_t n, uint32_t cp) {
  const CodeRange* end = r + n;
  const CodeRange* it =
      std::upper_bound(r, end, cp, [](uint32_t v, const CodeRange& x) { return v < x.first; });
  return it != r && cp <= (it - 1)->last;
}

}  // namespace

bool IsLetter(uint32_t cp) {
  if (cp < 0x80) return (cp | 0x20) >= 'a' && (cp | 0x20) <= 'z';
  return cp != kInvalid && InRanges(kLetters, kLettersCount, cp);
}

bool IsNumber(uint32_t cp) {
  if (cp < 0x80) return cp >= '0' && cp <= '9';
  return cp != kInvalid && InRanges(kNumbers, kNumbersCount, cp);
}

bool IsWhitespace(uint32_t cp) {
  switch (cp) {
    case 0x09:
    case 0x0A:
    case 0x0B:
    case 0x0C:
    case 0x0D:
    case 0x20:
    case 0x85:
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

Decoded DecodeUtf8(std::string_view s, size_t at) {
  const auto b0 = uint8_t(s[at]);
  if (b0 < 0x80) return {b0, 1};
  uint32_t need, cp, min;
  if ((b0 & 0xE0) == 0xC0) {
    need = 1, cp = b0 & 0x1F, min = 0x80;
  } else if ((b0 & 0xF0) == 0xE0) {
    need = 2, cp = b0 & 0x0F, min = 0x800;
  } else if ((b0 & 0xF8) == 0xF0) {
    need = 3, cp = b0 & 0x07, min = 0x10000;
  } else {
    return {kInvalid, 1};
  }
  for (uint32_t i = 1; i <= need; ++i) {
    if (at + i >= s.size()) return {kInvalid, 1};
    const auto b = uint8_t(s[at + i]);
    if ((b & 0xC0) != 0x80) return {kInvalid, 1};
    cp = (cp << 6) | (b & 0x3F);
  }
  // Overlong forms, surrogates and values past U+10FFFF are invalid UTF-8.
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return {kInvalid, 1};
  return {cp, need + 1};
}

}  // namespace marlaas::unicode
