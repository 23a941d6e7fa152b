// HugePageAllocator: the allocator of the large flat arrays of metadata (the base index's table and reverse map,
// the resource pools' counts and freed ring, FlatHashMap's slots, the draft index's page heads, the host tier's
// index and slots). An array of at least 2 MiB is placed on 2 MiB boundaries and offered to the kernel as
// transparent-huge-page memory (madvise MADV_HUGEPAGE, Linux; where the kernel's setting is "madvise", the usual
// default, nothing else asks for it). The manager's accesses into these arrays are random by design (a hash's
// home slot, a page's counts); on 4 KiB pages each one of a table of tens of MiB needs its own TLB entry, and once
// a forward pass has swept the caches between two requests, each prefetch waits for a page walk that itself
// misses. With 2 MiB pages a table of 64 MiB needs 32 entries.
//
// Invariants: a smaller array (or any, with CTXCACHE_HUGE_PAGES=0) is an ordinary std::allocator allocation; a
//             large one is rounded up to whole 2 MiB pages of address space (the kernel backs what is touched, in
//             huge pages where it can and in 4 KiB pages where it cannot, which changes speed, never contents).
// Errors:     std::bad_alloc, as std::allocator (callers turn it into OutOfMemoryError).
// Threading:  stateless (the setting is read once, thread-safely, by a function-local static).
#pragma once

#include <cstddef>
#include <cstdlib>
#include <memory>
#include <new>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace ctxcache::detail {

inline constexpr size_t kHugePageBytes = size_t{2} << 20;

// Whether large arrays go on huge pages: yes unless the environment says CTXCACHE_HUGE_PAGES=0 (read once, at
// the first large allocation of the process; a kernel that compacts memory on a huge-page fault (its THP defrag
// setting) can stall that fault, and this is the way out without a rebuild).
inline bool hugePagesWantedBy(char const* setting) noexcept {
    return !(setting && setting[0] == '0' && setting[1] == '\0');
}
inline bool hugePagesWanted() noexcept {
    static bool const wanted = hugePagesWantedBy(std::getenv("CTXCACHE_HUGE_PAGES"));
    return wanted;
}

// Whether an array of `bytes` is allocated on huge pages (the rule allocate and deallocate share).
inline bool onHugePages(size_t bytes) noexcept { return bytes >= kHugePageBytes && hugePagesWanted(); }

template <class T>
struct HugePageAllocator {
    using value_type = T;

    HugePageAllocator() noexcept = default;
    template <class U>
    HugePageAllocator(HugePageAllocator<U> const&) noexcept {}  // NOLINT(google-explicit-constructor): rebinding

    T* allocate(size_t n) {
        if (n > static_cast<size_t>(-1) / sizeof(T)) throw std::bad_alloc();
        size_t const bytes = n * sizeof(T);
        if (!onHugePages(bytes)) return std::allocator<T>{}.allocate(n);
        size_t const rounded = (bytes + kHugePageBytes - 1) & ~(kHugePageBytes - 1);
        void* p = nullptr;
        if (posix_memalign(&p, kHugePageBytes, rounded) != 0 || p == nullptr) throw std::bad_alloc();
#if defined(__linux__) && defined(MADV_HUGEPAGE)
        madvise(p, rounded, MADV_HUGEPAGE);  // a hint: refused (no THP), the memory is ordinary pages
#endif
        return static_cast<T*>(p);
    }

    void deallocate(T* p, size_t n) noexcept {
        if (!onHugePages(n * sizeof(T))) std::allocator<T>{}.deallocate(p, n);
        else std::free(p);
    }

    template <class U>
    bool operator==(HugePageAllocator<U> const&) const noexcept {
        return true;
    }
    template <class U>
    bool operator!=(HugePageAllocator<U> const&) const noexcept {
        return false;
    }
};

}  // namespace ctxcache::detail
