// ParseCriteoLine on hand-written lines: complete, empty fields, negative
// integers, CRLF, and every way a line can be malformed (each error names
// the field).
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "shardrec/core/data/criteo_line.h"

namespace shardrec::data {
namespace {

// label, 13 integers, 26 hex ids.
std::string Line(const std::string& label, const std::vector<std::string>& ints, const std::vector<std::string>& cats) {
  std::string s = label;
  for (int i = 0; i < kCriteoDense; ++i) s += "\t" + (i < static_cast<int>(ints.size()) ? ints[static_cast<size_t>(i)] : "");
  for (int i = 0; i < kCriteoSparse; ++i) s += "\t" + (i < static_cast<int>(cats.size()) ? cats[static_cast<size_t>(i)] : "");
  return s;
}

TEST(CriteoLine, ParsesEveryField) {
  CriteoRow row;
  const std::string line =
      Line("1", {"5", "-1", "0", "12", "3", "100", "7", "8", "9", "10", "11", "12", "13"},
           {"68fd1e64", "80e26c9b", "fb936136", "7b4723c4", "25c83c98", "7e0ccccf", "de7995b8", "1f89b562", "a73ee510",
            "a8cd5504", "b2cb9c98", "37c9c164", "2824a5f6", "1adce6ef", "8ba8b39a", "891b62e7", "e5ba7672", "f54016b9",
            "21ddcdc9", "b1252a9d", "07b5194c", "0", "3a171ecb", "c5c50484", "e8b83407", "9727dd16"});
  ASSERT_TRUE(ParseCriteoLine(line, &row).ok());
  EXPECT_EQ(row.label, 1.0f);
  EXPECT_EQ(row.dense[0], 5);
  EXPECT_EQ(row.dense[1], -1);
  EXPECT_EQ(row.dense[12], 13);
  EXPECT_EQ(row.sparse[0], 0x68fd1e64u);
  EXPECT_EQ(row.sparse[21], 0u);
  EXPECT_EQ(row.sparse[25], 0x9727dd16u);
}

TEST(CriteoLine, EmptyFieldsAreZeroAndCrlfIsIgnored) {
  CriteoRow row;
  row.dense[3] = 99;
  row.sparse[4] = 99;
  ASSERT_TRUE(ParseCriteoLine(Line("", {"1", "", "2"}, {"ff", ""}) + "\r", &row).ok());
  EXPECT_EQ(row.label, 0.0f);
  EXPECT_EQ(row.dense[0], 1);
  EXPECT_EQ(row.dense[1], 0);
  EXPECT_EQ(row.dense[3], 0);
  EXPECT_EQ(row.sparse[0], 0xffu);
  EXPECT_EQ(row.sparse[4], 0u);
  // Uppercase hex is hex too.
  ASSERT_TRUE(ParseCriteoLine(Line("0", {}, {"ABCDEF01"}), &row).ok());
  EXPECT_EQ(row.sparse[0], 0xabcdef01u);
}

TEST(CriteoLine, MalformedLinesNameTheField) {
  CriteoRow row;
  auto error = [&](const std::string& line) {
    Status st = ParseCriteoLine(line, &row);
    EXPECT_FALSE(st.ok()) << line;
    return st.message();
  };
  EXPECT_NE(error(Line("1", {"1", "x1"}, {})).find("field 3 (int_1): 'x1' is not an integer"), std::string::npos);
  EXPECT_NE(error(Line("1", {"1.5"}, {})).find("field 2 (int_0): '1.5' is not an integer"), std::string::npos);
  EXPECT_NE(error(Line("1", {}, {"zz"})).find("field 15 (cat_0): 'zz' is not a hex hash"), std::string::npos);
  EXPECT_NE(error(Line("1", {}, {"", "-5"})).find("field 16 (cat_1)"), std::string::npos);
  EXPECT_NE(error(Line("1", {}, {"12345678901234567"})).find("at most 16 digits"), std::string::npos);
  EXPECT_NE(error(Line("2", {}, {})).find("field 1 (label): '2' is not a label"), std::string::npos);
  EXPECT_NE(error("1\t2\t3").find("3 tab-separated fields, a Criteo line has 40"), std::string::npos);
  EXPECT_NE(error(Line("1", {}, {}) + "\textra").find("more than 40"), std::string::npos);
  EXPECT_NE(error("").find("1 tab-separated field,"), std::string::npos);
  // A control character is shown as '?', and long text is cut.
  EXPECT_NE(error(Line("1", {std::string("4\x01") + std::string(40, '9')}, {})).find("'4?99"), std::string::npos);
}

TEST(CriteoLine, DenseTransformIsLogOnePlusClampedX) {
  EXPECT_EQ(CriteoDenseTransform(0), 0.0f);
  EXPECT_EQ(CriteoDenseTransform(-3), 0.0f);
  EXPECT_FLOAT_EQ(CriteoDenseTransform(1), std::log(2.0f));
  EXPECT_FLOAT_EQ(CriteoDenseTransform(1000000), static_cast<float>(std::log1p(1e6)));
}

}  // namespace
}  // namespace shardrec::data
