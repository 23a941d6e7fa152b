// Two threads on one handle family through the C ABI (issue 24, item 1): the second call into a family is refused
// with CTXC_E_CONCURRENT_USE, naming both calls, and changes nothing; nothing crashes, and the invariants hold
// after 200 rounds. This file links only the shared library and includes only "ctxcache.h".
//
// Each suite makes the overlap certain before it hammers. The manager's: thread A's acquire reads its hashes from
// a page that is read-protected, so A stops inside the call (its SIGSEGV handler waits) until the other thread has
// made its call and seen the refusal; then the handler makes the page readable and A's acquire goes on. The
// coordinator's: its synchronizer, which the coordinator calls from inside ctxc_kv_request_finish, waits the same
// way. Without the detection the other thread's call runs beside A's (on main it returns CTXC_OK, or, for a
// destroy, frees what A is using), so each certain round fails there.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "cpu_kv_device.h"
#include "ctxcache.h"
#include "decoding_batch.h"
#include "device_creates.h"

namespace {

constexpr int kRounds = 200;
constexpr int kWaitSeconds = 20;  // a bound on every wait, so that a failure cannot hang the suite

void sleepBriefly() {
    timespec const t{0, 200 * 1000};  // nanosleep: async-signal-safe, also used inside the fault handler
    nanosleep(&t, nullptr);
}

// Waits (bounded) until `ready` holds.
template <class Ready>
bool waitFor(Ready&& ready) {
    auto const deadline = std::chrono::steady_clock::now() + std::chrono::seconds(kWaitSeconds);
    while (!ready()) {
        if (std::chrono::steady_clock::now() > deadline) return false;
        sleepBriefly();
    }
    return true;
}

// A refusal as the contract states it: the status, the refused call's own name first, then the call in progress.
std::string refusalProblem(ctxc_status_t status, char const* call, char const* holder) {
    std::string const message = ctxc_last_error();
    if (status != CTXC_E_CONCURRENT_USE)
        return std::string(call) + " returned " + ctxc_status_string(status) + " (" + message + ")";
    if (message.rfind(std::string(call) + ": ", 0) != 0) return "message does not start with the call: " + message;
    if (message.find(std::string(holder) + " is in progress on the same ") == std::string::npos)
        return "message does not name the call in progress (" + std::string(holder) + "): " + message;
    if (message.find("on another thread") == std::string::npos) return "message does not say why: " + message;
    return "";
}

// Calls `call` again while another thread is inside the family (a refusal changed nothing, so a retry is the
// same call); returns the first other status. Counts the refusals.
ctxc_status_t retry(std::function<ctxc_status_t()> const& call, std::atomic<int>& refusals) {
    for (int attempt = 0; attempt < 10'000'000; ++attempt) {
        ctxc_status_t const s = call();
        if (s != CTXC_E_CONCURRENT_USE) return s;
        refusals.fetch_add(1, std::memory_order_relaxed);
        std::this_thread::yield();
    }
    return CTXC_E_CONCURRENT_USE;
}

// Records a status that is neither OK nor a refusal (a worker thread cannot assert).
struct Problems {
    std::atomic<int> count{0};
    std::string first;
    std::atomic_flag firstTaken = ATOMIC_FLAG_INIT;
    void check(ctxc_status_t s, char const* what) {
        if (s == CTXC_OK || s == CTXC_E_CONCURRENT_USE) return;
        if (count.fetch_add(1) == 0 && !firstTaken.test_and_set())
            first = std::string(what) + ": " + ctxc_status_string(s) + " (" + ctxc_last_error() + ")";
    }
};

// ---- the fault gate: hashes on a page that stops the reading thread until released --------------------------

class FaultGate {
public:
    FaultGate() : size_(static_cast<size_t>(sysconf(_SC_PAGESIZE))) {
        void* p = mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        page_ = p == MAP_FAILED ? nullptr : static_cast<char*>(p);
        current_ = this;
        struct sigaction action{};
        action.sa_sigaction = &FaultGate::onFault;
        action.sa_flags = SA_SIGINFO;
        sigemptyset(&action.sa_mask);
        installed_ = sigaction(SIGSEGV, &action, &previous_) == 0;
    }
    ~FaultGate() {
        if (installed_) sigaction(SIGSEGV, &previous_, nullptr);
        current_ = nullptr;
        if (page_) munmap(page_, size_);
    }
    FaultGate(FaultGate const&) = delete;
    FaultGate& operator=(FaultGate const&) = delete;

    bool ready() const { return page_ && installed_; }
    ctxc_hash128_t* hashes() { return reinterpret_cast<ctxc_hash128_t*>(page_); }
    size_t capacity() const { return size_ / sizeof(ctxc_hash128_t); }

    // The next read of the page stops its thread until release().
    void arm() {
        held_.store(false);
        released_.store(false);
        mprotect(page_, size_, PROT_NONE);
    }
    bool held() const { return held_.load(); }
    void release() { released_.store(true); }

private:
    static void onFault(int signal, siginfo_t* info, void* context) {
        FaultGate* g = current_;
        char* const address = static_cast<char*>(info->si_addr);
        if (!g || address < g->page_ || address >= g->page_ + g->size_) {
            // Not the gate: the fault is real. Put the previous handler back; the access faults again under it.
            sigaction(SIGSEGV, g ? &g->previous_ : nullptr, nullptr);
            if (!g) signal_default(signal);
            (void)context;
            return;
        }
        g->held_.store(true);
        for (int i = 0; i < kWaitSeconds * 5000 && !g->released_.load(); ++i) sleepBriefly();
        mprotect(g->page_, g->size_, PROT_READ | PROT_WRITE);  // the faulting read runs again, and succeeds
    }
    static void signal_default(int signal) {
        struct sigaction action{};
        action.sa_handler = SIG_DFL;
        sigaction(signal, &action, nullptr);
    }

    static inline FaultGate* current_ = nullptr;
    size_t size_;
    char* page_ = nullptr;
    bool installed_ = false;
    struct sigaction previous_{};
    std::atomic<bool> held_{false};
    std::atomic<bool> released_{false};
};

// ---- a manager ------------------------------------------------------------------------------------------------

constexpr int32_t kPageSize = 4;
constexpr int32_t kBlocks = 8;          // per prompt of the certain rounds
constexpr int32_t kLongBlocks = 256;    // per prompt of the hammering: long calls, so that they overlap often

// The full-block hashes of prompt `p` (`blocks` blocks of distinct tokens).
std::vector<ctxc_hash128_t> promptHashes(int32_t p, int32_t blocks = kBlocks) {
    std::vector<int32_t> tokens(static_cast<size_t>(blocks * kPageSize));
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = p * 1000 + static_cast<int32_t>(i);
    std::vector<ctxc_hash128_t> hashes(static_cast<size_t>(blocks));
    size_t count = 0;
    EXPECT_EQ(ctxc_hash_full_blocks(nullptr, tokens.data(), tokens.size(), kPageSize, nullptr, 0, nullptr,
                                    hashes.data(), hashes.size(), &count),
              CTXC_OK);
    return hashes;
}

class ManagerPair : public ::testing::Test {
protected:
    void SetUp() override {
        ctxc_manager_options_t o;
        ctxc_manager_options_init(&o);
        o.page_size = kPageSize;
        o.capacities.base_kv_pages = 4 * kLongBlocks;  // 4 long prompts: the threads evict each other's records
        o.max_records = 8;
        ASSERT_EQ(ctxc_manager_create(&o, &manager), CTXC_OK);
        for (int32_t p = 0; p < 32; ++p) prompts.push_back(promptHashes(p));
        for (int32_t p = 0; p < 16; ++p) longPrompts.push_back(promptHashes(100 + p, kLongBlocks));
    }
    void TearDown() override { EXPECT_EQ(ctxc_manager_destroy(manager), CTXC_OK) << ctxc_last_error(); }

    ctxc_status_t acquire(ctxc_hash128_t const* hashes, ctxc_lease_t** lease, int32_t* acquired = nullptr,
                          int32_t blocks = kBlocks) {
        ctxc_acquire_result_t r{};
        r.struct_size = sizeof r;
        ctxc_status_t const s = ctxc_manager_acquire_vanilla(manager, hashes, static_cast<size_t>(blocks),
                                                             blocks * kPageSize, CTXC_LOOKUP_USE_CACHE, &r, lease);
        if (acquired) *acquired = s == CTXC_OK && r.status == CTXC_ACQUIRE_ACQUIRED;
        return s;
    }
    ctxc_status_t publish(ctxc_lease_t* lease, ctxc_hash128_t const* hashes, int32_t blocks = kBlocks) {
        ctxc_publish_result_t r{};
        r.struct_size = sizeof r;
        return ctxc_manager_publish(manager, lease, hashes, static_cast<size_t>(blocks), blocks * kPageSize, &r);
    }
    size_t liveLeases() {
        size_t n = 99;
        EXPECT_EQ(ctxc_manager_live_lease_count(manager, &n), CTXC_OK);
        return n;
    }

    ctxc_manager_t* manager = nullptr;
    std::vector<std::vector<ctxc_hash128_t>> prompts;
    std::vector<std::vector<ctxc_hash128_t>> longPrompts;  // 8 per thread
};

// Certain overlap: A stops inside ctxc_manager_acquire_vanilla; every call the other thread makes on the manager, a
// lease of it or its KV events (mutating, read-only, destroys) is refused, and changes nothing.
TEST_F(ManagerPair, EveryCallIntoTheFamilyIsRefusedWhileAnotherIsInside) {
    FaultGate gate;
    ASSERT_TRUE(gate.ready());
    ASSERT_GE(gate.capacity(), static_cast<size_t>(kBlocks));
    ctxc_lease_t* mine = nullptr;  // the other thread's own lease
    int32_t acquired = 0;
    ASSERT_EQ(acquire(prompts[31].data(), &mine, &acquired), CTXC_OK);
    ASSERT_TRUE(acquired);
    size_t records = 0;
    ASSERT_EQ(ctxc_manager_record_count(manager, &records), CTXC_OK);

    ctxc_hash128_t const* other = prompts[30].data();
    std::vector<std::pair<char const*, std::function<ctxc_status_t()>>> const calls = {
        {"ctxc_manager_acquire_vanilla",
         [&] {
        ctxc_lease_t* l = nullptr;
        return acquire(other, &l);
    }},
        {"ctxc_manager_publish", [&] { return publish(mine, prompts[31].data()); }},
        {"ctxc_manager_grow_base_pages",
         [&] {
        int32_t ok = 0;
        return ctxc_manager_grow_base_pages(manager, mine, 1, &ok);
    }},
        {"ctxc_lease_info",
         [&] {
        ctxc_lease_info_t i{};
        i.struct_size = sizeof i;
        return ctxc_lease_info(mine, &i);
    }},
        {"ctxc_lease_base_pages",
         [&] {
        int32_t const* p = nullptr;
        size_t n = 0;
        return ctxc_lease_base_pages(mine, &p, &n);
    }},
        {"ctxc_lease_release", [&] { return ctxc_lease_release(mine); }},
        {"ctxc_lease_destroy", [&] { return ctxc_lease_destroy(mine); }},
        {"ctxc_manager_record_count",
         [&] {
        size_t n = 0;
        return ctxc_manager_record_count(manager, &n);
    }},
        {"ctxc_manager_check_invariants", [&] { return ctxc_manager_check_invariants(manager); }},
        {"ctxc_kv_events_status", [&] { return ctxc_kv_events_status(manager, nullptr, nullptr, nullptr); }},
        {"ctxc_kv_events_enable", [&] { return ctxc_kv_events_enable(manager, 0); }},
        {"ctxc_manager_clear", [&] { return ctxc_manager_clear(manager); }},
        {"ctxc_manager_destroy", [&] { return ctxc_manager_destroy(manager); }},
    };
    for (int round = 0; round < kRounds; ++round) {
        std::vector<ctxc_hash128_t> const& hashes = prompts[static_cast<size_t>(round % 8)];
        std::memcpy(gate.hashes(), hashes.data(), hashes.size() * sizeof(ctxc_hash128_t));
        gate.arm();
        ctxc_status_t statusA = CTXC_E_INTERNAL;
        ctxc_lease_t* leaseA = nullptr;
        std::thread a([&] { statusA = acquire(gate.hashes(), &leaseA); });
        bool const stopped = waitFor([&] { return gate.held(); });
        auto const& [name, call] = calls[static_cast<size_t>(round) % calls.size()];
        std::string const problem =
            stopped ? refusalProblem(call(), name, "ctxc_manager_acquire_vanilla") : "A never stopped inside its call";
        gate.release();
        a.join();
        ASSERT_TRUE(problem.empty()) << "round " << round << ": " << problem;
        ASSERT_EQ(statusA, CTXC_OK) << ctxc_last_error();
        if (leaseA) {
            ASSERT_EQ(publish(leaseA, hashes.data()), CTXC_OK) << ctxc_last_error();
            ASSERT_EQ(ctxc_lease_destroy(leaseA), CTXC_OK);
        }
        ASSERT_EQ(ctxc_manager_check_invariants(manager), CTXC_OK) << ctxc_last_error();
    }
    // The refused calls changed nothing: the other thread's lease is still live and publishes, then goes.
    ctxc_lease_info_t info{};
    info.struct_size = sizeof info;
    ASSERT_EQ(ctxc_lease_info(mine, &info), CTXC_OK);
    EXPECT_EQ(info.state, CTXC_LEASE_LIVE);
    int32_t enabled = 1;
    ASSERT_EQ(ctxc_kv_events_status(manager, &enabled, nullptr, nullptr), CTXC_OK);
    EXPECT_EQ(enabled, 0);  // ctxc_kv_events_enable was refused every time
    EXPECT_EQ(publish(mine, prompts[31].data()), CTXC_OK) << ctxc_last_error();
    EXPECT_EQ(ctxc_lease_destroy(mine), CTXC_OK);
    EXPECT_EQ(liveLeases(), 0u);
    EXPECT_EQ(ctxc_manager_check_invariants(manager), CTXC_OK) << ctxc_last_error();
}

// Two threads hammering: acquire, grow, publish and destroy, with reads between; every call answers CTXC_OK or
// CTXC_E_CONCURRENT_USE (then retried), nothing crashes, every lease goes, and the invariants hold.
TEST_F(ManagerPair, TwoThreadsHammeringEndWithRefusalsOrResultsNeverCorruption) {
    Problems problems;
    std::atomic<int> refusals{0};
    std::atomic<int> published{0};
    std::atomic<int> waiting{2};
    auto worker = [&](int id) {
        waiting.fetch_sub(1);
        while (waiting.load() > 0) std::this_thread::yield();  // both start at once
        for (int round = 0; round < kRounds; ++round) {
            ctxc_hash128_t const* hashes = longPrompts[static_cast<size_t>(id * 8 + round % 8)].data();
            ctxc_lease_t* lease = nullptr;
            int32_t acquired = 0;
            problems.check(retry([&] { return acquire(hashes, &lease, &acquired, kLongBlocks); }, refusals), "acquire");
            size_t n = 0;
            problems.check(ctxc_manager_record_count(manager, &n), "record_count");  // refused or answered
            problems.check(retry([&] { return ctxc_manager_check_invariants(manager); }, refusals), "invariants");
            if (!acquired) continue;
            int32_t ok = 0;
            problems.check(retry([&] { return ctxc_manager_grow_base_pages(manager, lease, 1, &ok); }, refusals),
                           "grow");
            problems.check(retry([&] { return publish(lease, hashes, kLongBlocks); }, refusals), "publish");
            problems.check(retry([&] { return ctxc_lease_destroy(lease); }, refusals), "destroy");
            published.fetch_add(1);
        }
    };
    std::thread a(worker, 0), b(worker, 1);
    a.join();
    b.join();
    EXPECT_EQ(problems.count.load(), 0) << problems.first;
    EXPECT_EQ(published.load(), 2 * kRounds);  // every round acquired (there is room for both threads' leases)
    EXPECT_EQ(liveLeases(), 0u);
    size_t records = 99;
    ASSERT_EQ(ctxc_manager_record_count(manager, &records), CTXC_OK);
    EXPECT_LE(records, 8u);
    EXPECT_EQ(ctxc_manager_check_invariants(manager), CTXC_OK) << ctxc_last_error();
    std::printf("[          ] %d refusals, %d leases published\n", refusals.load(), published.load());
}

// ---- a coordinator over device objects ------------------------------------------------------------------------

std::vector<int32_t> iota(int32_t first, int32_t count) {
    std::vector<int32_t> out;
    for (int32_t i = 0; i < count; ++i) out.push_back(first + i);
    return out;
}

// The synchronizer: when armed, the first call stops until released (the coordinator calls it from inside
// ctxc_kv_request_finish).
struct SlowSync {
    std::atomic<bool> armed{false};
    std::atomic<bool> held{false};
    std::atomic<bool> released{false};
    std::atomic<int> calls{0};
    ctxc_coordinator_t* reenter = nullptr;  // when set, the synchronizer calls back into this coordinator
    ctxc_status_t reentered = CTXC_OK;
    std::string reenteredMessage;
};

int slowSynchronize(void* user, void*) {
    SlowSync& s = *static_cast<SlowSync*>(user);
    s.calls.fetch_add(1);
    if (s.reenter && s.reentered == CTXC_OK) {
        ctxc_coordinator_info_t i{};
        i.struct_size = sizeof i;
        s.reentered = ctxc_coordinator_info(s.reenter, &i);
        s.reenteredMessage = ctxc_last_error();
    }
    if (!s.armed.exchange(false)) return 0;
    s.held.store(true);
    waitFor([&] { return s.released.load(); });
    return 0;
}

class CoordinatorPair : public ::testing::Test, protected CpuKvDevice {
protected:
    void SetUp() override {
        ASSERT_NO_FATAL_FAILURE(createDevice(16, 8, CTXC_PAGE_TABLE_DENSE));
        ctxc_coordinator_resources_t const r = baseResources();
        ctxc_coordinator_options_t const o = coordinatorOptions(CTXC_MODEL_ATTENTION_ONLY, slowSynchronize, &sync);
        ASSERT_EQ(ctxc_coordinator_create(&r, &o, &coordinator), CTXC_OK) << ctxc_last_error();
    }
    void TearDown() override {
        EXPECT_EQ(ctxc_coordinator_destroy(coordinator), CTXC_OK) << ctxc_last_error();
        destroyDevice(true);
    }

    // One request's whole life (begin, prefill, one decode step, finish, destroy); each call retried while
    // refused. The first status that is neither OK nor a refusal, or OK.
    ctxc_status_t serve(int32_t prompt, std::atomic<int>& refusals) {
        Batch batch;
        batch.add(iota(prompt * 100 + 1, 10), 0, epoch.fetch_add(1) + 1);  // slot 0: each admission a new epoch
        ctxc_sequence_request_t const seq = sequenceOf(batch.tokens[0]);
        ctxc_kv_request_options_t o;
        ctxc_kv_request_options_init(&o);
        ctxc_kv_request_t* request = nullptr;
        ctxc_status_t s =
            retry([&] { return ctxc_kv_request_begin(coordinator, &seq, 1, batch(), &o, &request); }, refusals);
        if (s != CTXC_OK) return s;
        std::vector<std::function<ctxc_status_t()>> const steps = {
            [&] { return ctxc_kv_request_prepare_prefill(request); },
            [&] { return ctxc_kv_request_enqueue_prefill_captures(request); },
            [&] {
            if (batch.generated[0] == 0) batch.sample(0, 7);
            return ctxc_kv_request_complete_prefill(request, batch(), nullptr, 0);
        },
            [&] { return ctxc_kv_request_prepare_decode_step(request, batch(), nullptr); },
            [&] {
            if (batch.generated[0] == 1) batch.sample(0, 8);
            return ctxc_kv_request_complete_decode_step(request, batch(), nullptr, 0);
        },
            [&] { return ctxc_kv_request_finish(request); },
        };
        for (auto const& step : steps) {
            s = retry(step, refusals);
            if (s != CTXC_OK) break;
        }
        ctxc_status_t const destroyed = retry([&] { return ctxc_kv_request_destroy(request); }, refusals);
        return s != CTXC_OK ? s : destroyed;
    }
    ctxc_coordinator_info_t info() {
        ctxc_coordinator_info_t i{};
        i.struct_size = sizeof i;
        EXPECT_EQ(ctxc_coordinator_info(coordinator, &i), CTXC_OK);
        return i;
    }

    SlowSync sync;
    std::atomic<uint64_t> epoch{0};
    ctxc_coordinator_t* coordinator = nullptr;
};

// Certain overlap: A's finish stops in the synchronizer; the coordinator, a second request, its KV events and the
// device objects it was built over (one family: the backend's) all refuse the other thread.
TEST_F(CoordinatorPair, EveryCallIntoTheFamilyIsRefusedWhileAnotherIsInside) {
    Batch next;
    next.add(iota(9000, 8), 1, 1);
    ctxc_sequence_request_t const seq = sequenceOf(next.tokens[0]);
    ctxc_kv_request_options_t ro;
    ctxc_kv_request_options_init(&ro);
    std::vector<std::pair<char const*, std::function<ctxc_status_t()>>> const calls = {
        {"ctxc_coordinator_info",
         [&] {
        ctxc_coordinator_info_t i{};
        i.struct_size = sizeof i;
        return ctxc_coordinator_info(coordinator, &i);
    }},
        {"ctxc_coordinator_metrics",
         [&] {
        ctxc_context_cache_metrics_t m{};
        m.struct_size = sizeof m;
        return ctxc_coordinator_metrics(coordinator, &m);
    }},
        {"ctxc_coordinator_check_invariants", [&] { return ctxc_coordinator_check_invariants(coordinator); }},
        {"ctxc_kv_request_begin",
         [&] {
        ctxc_kv_request_t* r = nullptr;
        return ctxc_kv_request_begin(coordinator, &seq, 1, next(), &ro, &r);
    }},
        {"ctxc_kv_events_status", [&] { return ctxc_kv_events_status(coordinator, nullptr, nullptr, nullptr); }},
        {"ctxc_kv_page_table_check_invariants", [&] { return ctxc_kv_page_table_check_invariants(table); }},
        {"ctxc_device_backend_synchronize", [&] { return ctxc_device_backend_synchronize(backend); }},
        {"ctxc_coordinator_shutdown", [&] { return ctxc_coordinator_shutdown(coordinator); }},
        {"ctxc_kv_pool_destroy", [&] { return ctxc_kv_pool_destroy(pool); }},
        {"ctxc_coordinator_destroy", [&] { return ctxc_coordinator_destroy(coordinator); }},
    };
    std::atomic<int> refusals{0};
    for (int round = 0; round < kRounds; ++round) {
        sync.held.store(false);
        sync.released.store(false);
        sync.armed.store(true);
        ctxc_status_t statusA = CTXC_E_INTERNAL;
        std::thread a([&] { statusA = serve(round % 5, refusals); });
        bool const stopped = waitFor([&] { return sync.held.load(); });
        auto const& [name, call] = calls[static_cast<size_t>(round) % calls.size()];
        std::string const problem =
            stopped ? refusalProblem(call(), name, "ctxc_kv_request_finish") : "A never stopped inside finish";
        sync.released.store(true);
        a.join();
        ASSERT_TRUE(problem.empty()) << "round " << round << ": " << problem;
        ASSERT_EQ(statusA, CTXC_OK) << ctxc_last_error();
        ASSERT_EQ(ctxc_coordinator_check_invariants(coordinator), CTXC_OK) << ctxc_last_error();
    }
    EXPECT_EQ(refusals.load(), 0);  // A never met the other thread's calls: they were all made while A was inside
    ctxc_coordinator_info_t const i = info();
    EXPECT_EQ(i.active_requests, 0);
    EXPECT_EQ(i.poisoned, 0);
}

// Two threads hammering: one serves requests, the other reads the coordinator, its KV events and its page table;
// every call answers CTXC_OK or CTXC_E_CONCURRENT_USE, and the invariants hold at the end.
TEST_F(CoordinatorPair, TwoThreadsHammeringEndWithRefusalsOrResultsNeverCorruption) {
    Problems problems;
    std::atomic<int> refusals{0};
    std::atomic<bool> done{false};
    std::atomic<int> waiting{2};
    auto startTogether = [&] {
        waiting.fetch_sub(1);
        while (waiting.load() > 0) std::this_thread::yield();
    };
    std::thread server([&] {
        startTogether();
        for (int round = 0; round < kRounds; ++round) problems.check(serve(round % 7, refusals), "serve");
        done.store(true);
    });
    std::thread reader([&] {
        startTogether();
        for (int round = 0; round < kRounds || !done.load(); ++round) {
            ctxc_context_cache_metrics_t m{};
            m.struct_size = sizeof m;
            ctxc_status_t s = ctxc_coordinator_metrics(coordinator, &m);
            if (s == CTXC_E_CONCURRENT_USE) refusals.fetch_add(1);
            problems.check(s, "metrics");
            problems.check(ctxc_kv_events_status(coordinator, nullptr, nullptr, nullptr), "kv_events_status");
            problems.check(ctxc_kv_page_table_check_invariants(table), "page table invariants");
            problems.check(ctxc_coordinator_check_invariants(coordinator), "check_invariants");
        }
    });
    server.join();
    reader.join();
    EXPECT_EQ(problems.count.load(), 0) << problems.first;
    EXPECT_EQ(info().active_requests, 0);
    EXPECT_EQ(ctxc_coordinator_check_invariants(coordinator), CTXC_OK) << ctxc_last_error();
    std::printf("[          ] %d refusals\n", refusals.load());
}

// ---- a sim engine ---------------------------------------------------------------------------------------------

// Certain overlap: A's serve reads its prompt from the gated page; the engine's other calls (and its KV events)
// refuse the other thread, which a results object of the engine's does not (it is a family of its own).
TEST(SimEnginePair, EveryCallIntoTheEngineIsRefusedWhileAServeIsInside) {
    FaultGate gate;
    ASSERT_TRUE(gate.ready());
    ctxc_sim_engine_options_t o;
    ctxc_sim_engine_options_init(&o);
    ctxc_sim_engine_t* engine = nullptr;
    ASSERT_EQ(ctxc_sim_engine_create(&o, &engine), CTXC_OK) << ctxc_last_error();
    std::vector<int32_t> const prompt = iota(1, 40);
    ctxc_sim_request_t request{};
    request.token_count = prompt.size();
    request.max_new_tokens = 4;
    request.tokens = prompt.data();
    ctxc_sim_results_t* earlier = nullptr;
    ASSERT_EQ(ctxc_sim_engine_serve(engine, &request, 1, 0, &earlier), CTXC_OK) << ctxc_last_error();
    std::vector<std::pair<char const*, std::function<ctxc_status_t()>>> const calls = {
        {"ctxc_sim_engine_stats",
         [&] {
        ctxc_sim_engine_stats_t st{};
        st.struct_size = sizeof st;
        return ctxc_sim_engine_stats(engine, &st);
    }},
        {"ctxc_sim_engine_check_invariants", [&] { return ctxc_sim_engine_check_invariants(engine); }},
        {"ctxc_sim_engine_serve",
         [&] {
        ctxc_sim_results_t* r = nullptr;
        return ctxc_sim_engine_serve(engine, &request, 1, 0, &r);
    }},
        {"ctxc_kv_events_status", [&] { return ctxc_kv_events_status(engine, nullptr, nullptr, nullptr); }},
        {"ctxc_sim_engine_destroy", [&] { return ctxc_sim_engine_destroy(engine); }},
    };
    ctxc_sim_request_t gated = request;
    gated.tokens = reinterpret_cast<int32_t const*>(gate.hashes());
    for (int round = 0; round < kRounds / 4; ++round) {
        std::memcpy(gate.hashes(), prompt.data(), prompt.size() * sizeof(int32_t));
        gate.arm();
        ctxc_status_t statusA = CTXC_E_INTERNAL;
        ctxc_sim_results_t* results = nullptr;
        std::thread a([&] { statusA = ctxc_sim_engine_serve(engine, &gated, 1, 0, &results); });
        bool const stopped = waitFor([&] { return gate.held(); });
        auto const& [name, call] = calls[static_cast<size_t>(round) % calls.size()];
        std::string const problem =
            stopped ? refusalProblem(call(), name, "ctxc_sim_engine_serve") : "A never stopped inside its call";
        size_t count = 0;
        ctxc_status_t const other = ctxc_sim_results_count(earlier, &count);  // another family: answered
        gate.release();
        a.join();
        ASSERT_TRUE(problem.empty()) << "round " << round << ": " << problem;
        ASSERT_EQ(other, CTXC_OK) << ctxc_last_error();
        EXPECT_EQ(count, 1u);
        ASSERT_EQ(statusA, CTXC_OK) << ctxc_last_error();
        EXPECT_EQ(ctxc_sim_results_destroy(results), CTXC_OK);
    }
    EXPECT_EQ(ctxc_sim_engine_check_invariants(engine), CTXC_OK) << ctxc_last_error();
    EXPECT_EQ(ctxc_sim_results_destroy(earlier), CTXC_OK);
    EXPECT_EQ(ctxc_sim_engine_destroy(engine), CTXC_OK);
}

// A synchronizer that calls back into the family of the call that invoked it is refused (the outer call is in the
// middle of changing it), with a message that says so; the outer call goes on.
TEST_F(CoordinatorPair, ACallbackCallingBackIntoItsFamilyIsRefused) {
    sync.reenter = coordinator;
    std::atomic<int> refusals{0};
    ASSERT_EQ(serve(1, refusals), CTXC_OK) << ctxc_last_error();
    EXPECT_EQ(refusals.load(), 0);
    EXPECT_EQ(sync.reentered, CTXC_E_CONCURRENT_USE) << sync.reenteredMessage;
    EXPECT_EQ(sync.reenteredMessage.rfind("ctxc_coordinator_info: ctxc_kv_request_", 0), 0u) << sync.reenteredMessage;
    EXPECT_NE(sync.reenteredMessage.find("on this thread (a callback it called is calling back into it)"),
              std::string::npos)
        << sync.reenteredMessage;
    sync.reenter = nullptr;
    EXPECT_EQ(info().active_requests, 0);
    EXPECT_EQ(ctxc_coordinator_check_invariants(coordinator), CTXC_OK) << ctxc_last_error();
}

TEST(ConcurrentUseStatus, HasANameAndIsBelowTheSentinel) {
    EXPECT_STREQ(ctxc_status_string(CTXC_E_CONCURRENT_USE), "CTXC_E_CONCURRENT_USE");
    EXPECT_LT(static_cast<int>(CTXC_E_CONCURRENT_USE), static_cast<int>(CTXC_STATUS_COUNT));
}

}  // namespace
