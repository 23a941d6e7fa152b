#include <gtest/gtest.h>

#include "ctxcache.h"

TEST(CApi, ReportsItsAbiVersion) { EXPECT_EQ(ctxc_abi_version(), CTXC_ABI_VERSION); }
