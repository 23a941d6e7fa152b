#include <gtest/gtest.h>

#include "ctxcache/context_cache_manager.h"

TEST(Smoke, Builds) { ctxcache::ContextCacheManager m(4, {8, 0, 0, 0}, 4); m.checkInvariants(); }
