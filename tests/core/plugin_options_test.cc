// --plugin-opt parsing and the C view of option lists.
#include "shardrec/core/plugin_options.h"

#include <gtest/gtest.h>

#include <string>

namespace shardrec {
namespace {

TEST(PluginOptions, RoutesKeyValuesToTheirComponent) {
  PluginOptions o;
  ASSERT_TRUE(o.Add("eviction.lru.decay_exponent=2.5").ok());
  ASSERT_TRUE(o.Add("eviction.lru.note=a=b").ok());  // the value may contain '='
  ASSERT_TRUE(o.Add("kernel.cpu.threads=4").ok());
  const OptionList lru = o.For("eviction", "lru");
  const sr_named_value_list v = lru.view();
  ASSERT_EQ(v.count, 2u);
  EXPECT_STREQ(v.values[0].name, "decay_exponent");
  EXPECT_EQ(v.values[0].type, SR_VALUE_STRING);
  EXPECT_EQ(std::string(v.values[0].value.string_value, v.values[0].value_size), "2.5");
  EXPECT_EQ(std::string(v.values[1].value.string_value, v.values[1].value_size), "a=b");
  EXPECT_EQ(o.For("eviction", "lfu").view().count, 0u);
}

TEST(PluginOptions, MalformedFlagsAreRefusedWithTheFormat) {
  PluginOptions o;
  Status s = o.Add("lru.decay=2");
  EXPECT_EQ(s.code(), SR_INVALID_ARGUMENT);
  EXPECT_NE(s.message().find("KIND.NAME.KEY=VALUE"), std::string::npos);
  s = o.Add("evicton.lru.decay=2");
  EXPECT_NE(s.message().find("unknown kind 'evicton'"), std::string::npos) << s.message();
}

TEST(OptionList, CopiesOwnTheirStrings) {
  OptionList copy;
  {
    OptionList original({{"k", "v"}});
    copy = original;
  }
  EXPECT_STREQ(copy.view().values[0].name, "k");
  EXPECT_STREQ(copy.view().values[0].value.string_value, "v");
}

}  // namespace
}  // namespace shardrec
