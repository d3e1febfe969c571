#include "tests/unit/check.h"
TEST(placeholder) { CHECK(0, ==, 1); }
TEST_MAIN()
