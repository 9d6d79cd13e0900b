#include "base/utf8.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace marlaas {
namespace {

const std::string kFffd = "\xef\xbf\xbd";

TEST(ValidUtf8Test, ValidTextIsUnchanged) {
  for (const std::string& s :
       std::vector<std::string>{"", "plain ascii", "caf\xc3\xa9", "\xe2\x82\xac 5",
                                "\xf0\x9f\x99\x82", "\xf4\x8f\xbf\xbf", std::string("nul\0in", 6)})
    EXPECT_EQ(ValidUtf8(s), s);
}

TEST(ValidUtf8Test, IllFormedBytesBecomeOneReplacementPerRun) {
  EXPECT_EQ(ValidUtf8("caf\xc3"), "caf" + kFffd);  // cut in a character
  EXPECT_EQ(ValidUtf8("a\xff"
                      "b"),
            "a" + kFffd + "b");  // never valid
  EXPECT_EQ(ValidUtf8("\xe2\x82"
                      "A"),
            kFffd + "A");                           // truncated, then ASCII
  EXPECT_EQ(ValidUtf8("\xc0\xaf"), kFffd);          // overlong '/'
  EXPECT_EQ(ValidUtf8("\xe0\x80\xaf"), kFffd);      // overlong, three bytes
  EXPECT_EQ(ValidUtf8("\xed\xa0\x80"), kFffd);      // a surrogate
  EXPECT_EQ(ValidUtf8("\xf4\x90\x80\x80"), kFffd);  // above U+10FFFF
  EXPECT_EQ(ValidUtf8("\x80 \xc3\xa9 \xbf"), kFffd + " \xc3\xa9 " + kFffd);
}

}  // namespace
}  // namespace marlaas
