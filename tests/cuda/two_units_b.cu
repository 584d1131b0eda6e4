// Second translation unit using every kernel header; linking it with two_units_a.cu is the test.
#include <gtest/gtest.h>

#include "two_units_uses.hpp"

int two_units_a(bool launch);

TEST(CudaHeaders, EveryKernelHeaderLinksFromTwoTranslationUnits) {
  // Reaching this line means the program linked; the calls do not launch anything.
  EXPECT_EQ(two_units_a(false), 1);
  EXPECT_EQ(use_every_kernel_header<2>(false), 2);
}
