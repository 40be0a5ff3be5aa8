// Status and StatusOr.
#include "shardrec/core/status.h"

#include <gtest/gtest.h>

namespace shardrec {
namespace {

StatusOr<int> Half(int x) {
  if (x % 2) return InvalidArgumentError(std::to_string(x) + " is odd");
  return x / 2;
}

Status Quarter(int x, int* out) {
  SR_ASSIGN_OR_RETURN(int h, Half(x));
  SR_ASSIGN_OR_RETURN(*out, Half(h));
  return Status::Ok();
}

TEST(Status, OkAndErrors) {
  EXPECT_TRUE(Status().ok());
  EXPECT_EQ(Status().ToString(), "OK");
  Status e = NotFoundError("no table 't9'");
  EXPECT_EQ(e.ToString(), "NOT_FOUND: no table 't9'");
  EXPECT_EQ(e.WithContext("plan.json").message(), "plan.json: no table 't9'");
  EXPECT_TRUE(Status().WithContext("x").ok());
  EXPECT_STREQ(StatusCodeName(SR_DEADLINE_EXCEEDED), "DEADLINE_EXCEEDED");
}

TEST(Status, MacrosPropagate) {
  int q = 0;
  EXPECT_TRUE(Quarter(8, &q).ok());
  EXPECT_EQ(q, 2);
  Status s = Quarter(6, &q);
  EXPECT_EQ(s.message(), "3 is odd");
}

}  // namespace
}  // namespace shardrec
