// Overlapping calls into one single-writer family, detected at the C ABI.
//
// A family is the set of handles one single-writer contract covers: a manager, its leases and its KV event stream;
// a device backend and every object built on it (buffers, pools, page tables, lengths, resident state, snapshot
// storage, and the coordinators and bounded-SWA managers built over them, with their requests); a coordinator
// without device objects and its requests; a sim engine; a sim results object. Each such object holds a shared
// CallFamily, whose one atomic "current call" is the name of the C function inside the family, or null.
//
// Every C entry point runs inside guard(), which opens a CallScope for the call (thread-local, one per nested
// entry). The handle table's lookups enter the family of the object they find while they hold the table's mutex
// (HandleTable::find and remove), so a destroy on one thread cannot free an object between another thread's
// lookup and its entry: one compare-and-swap on entry, one store on exit (when the scope closes).
// A second call finds the flag taken and is refused with CTXC_E_CONCURRENT_USE and a message naming both calls,
// before it reads or changes the family's state (outputs it clears first, as on any failure, are the caller's).
// Read-only queries take the flag too (a reader beside a writer is a race as well). A call that re-enters a
// family its own thread already holds (from inside a callback, e.g. a synchronizer) is refused the same way: the
// outer call is in the middle of changing that family.
// Entering is not waiting: nothing here blocks, so it cannot deadlock; serialising is the caller's job. A call
// meant to reach an object from any thread beside a running call (an interrupt) must not look it up: it uses
// HandleTable::touchWithoutEntering, and touches only atomics.
//
// Threading: a CallFamily is shared by its objects (shared_ptr) and touched only through the atomic; a CallScope
// is its own thread's. A scope keeps the families it removed objects of alive until it releases their flags.
#pragma once

#include <atomic>
#include <memory>
#include <type_traits>

namespace ctxcache::capi {

class CallFamily {
public:
    // `members` names what the family covers in refusal messages ("manager (and its leases)"); a static string.
    explicit CallFamily(char const* members) noexcept : members_(members) {}
    CallFamily(CallFamily const&) = delete;
    CallFamily& operator=(CallFamily const&) = delete;

    char const* members() const noexcept { return members_; }

    // Null when `function` now holds the family; otherwise the name of the call that holds it.
    char const* tryEnter(char const* function) noexcept {
        char const* holder = nullptr;
        if (current_.compare_exchange_strong(holder, function, std::memory_order_acquire, std::memory_order_relaxed))
            return nullptr;
        return holder;
    }
    void exit() noexcept { current_.store(nullptr, std::memory_order_release); }

private:
    std::atomic<char const*> current_{nullptr};
    char const* members_;
};

inline std::shared_ptr<CallFamily> newFamily(char const* members) { return std::make_shared<CallFamily>(members); }

// One C call's entries (guard() opens it): the families it holds, released in reverse order when it closes.
class CallScope {
public:
    explicit CallScope(char const* function) noexcept : function_(function), parent_(current_) { current_ = this; }
    ~CallScope() {
        for (int i = count_; i-- > 0;) held_[i]->exit();
        current_ = parent_;
    }
    CallScope(CallScope const&) = delete;
    CallScope& operator=(CallScope const&) = delete;

    // The innermost open scope of this thread (null outside a C call).
    static CallScope* current() noexcept { return current_; }

    // Hold `family` for the rest of the call (a no-op when this call holds it already); CTXC_E_CONCURRENT_USE
    // when another call holds it.
    void enter(CallFamily& family) {
        for (int i = 0; i < count_; ++i)
            if (held_[i] == &family) return;
        if (count_ == kMaxFamilies) tooManyFamilies();
        if (char const* holder = family.tryEnter(function_)) refuse(family, holder);
        held_[count_++] = &family;
    }
    // enter(), and keep the family alive until the scope releases it: `family` is the reference of an object
    // being destroyed, moved here (no count changes hands) so that it outlives the object.
    void enterAndKeep(std::shared_ptr<CallFamily>&& family) {
        enter(*family);
        for (auto& k : kept_)
            if (!k) {
                k = std::move(family);
                return;
            }
        tooManyFamilies();
    }

private:
    static constexpr int kMaxFamilies = 4;
    [[noreturn]] void refuse(CallFamily const& family, char const* holder) const;
    [[noreturn]] static void tooManyFamilies();

    // The default (dynamic) TLS model: initial-exec would mark the library STATIC_TLS, and then a dlopen (Python's
    // cffi, any plugin loader) must fit the library's whole TLS segment into the loader's small static surplus;
    // a CUDA build's segment (8 KiB, 4 KiB aligned, from the static CUDA runtime) does not fit, and the load fails
    // with "cannot allocate memory in static TLS block".
    static inline thread_local CallScope* current_ = nullptr;

    char const* function_;
    CallScope* parent_;
    int count_ = 0;
    CallFamily* held_[kMaxFamilies];
    std::shared_ptr<CallFamily> kept_[2];
};

// The family of a handle's object: its `family` member when it has one (hashers and publishers have none: a
// hasher is immutable and shareable, a publisher locks itself).
template <class T, class = void>
struct HasFamily : std::false_type {};
template <class T>
struct HasFamily<T, std::void_t<decltype(std::declval<T const&>().family)>> : std::true_type {};

// Enter the family of `object` when called inside a C call. `removing`: the object is leaving its table to be
// destroyed, and its reference to the family moves into the scope (see CallScope::enterAndKeep).
template <class T>
void enterFamilyOf(T& object, bool removing) {
    if constexpr (HasFamily<T>::value) {
        CallScope* scope = CallScope::current();
        if (!scope || !object.family) return;
        if (removing) scope->enterAndKeep(std::move(object.family));
        else scope->enter(*object.family);
    }
}

}  // namespace ctxcache::capi
