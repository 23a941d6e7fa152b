// BoundedSwaKVPageManager on the CPU backend: the private reservation bound, window arithmetic at page and window
// boundaries, the fast and general paths, retirement after the completion point, compaction, quarantine,
// admission refusal and bad inputs. The byte-exact end-to-end proofs live with the reference engine.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "ctxcache/device/device_backend.h"
#include "ctxcache/errors.h"
#include "ctxcache/runtime/bounded_swa_kv_page_manager.h"
#include "ctxcache/runtime/managed_kv_cache_request.h"

namespace ctxcache::runtime {
namespace {

using device::DType;
using device::KvLengths;
using device::KvPagePool;
using device::KvPageTable;
using device::KvPoolGeometry;
using Manager = BoundedSwaKVPageManager;
using Status = SwaKVCacheStatus;

struct SwaRig {
    SwaRig(int32_t window, int32_t pageSize, int32_t pages = 256, int32_t width = 64, int32_t maxBatch = 8) {
        backend = device::createCpuBackend();
        pool = std::make_unique<KvPagePool>(*backend, KvPoolGeometry{pages, pageSize, DType::kFp32, {{1, 2}}});
        table = std::make_unique<KvPageTable>(*backend, maxBatch, width, pages, KvPageTable::Mode::kSparseWindow);
        lengths = std::make_unique<KvLengths>(*backend, maxBatch);
        manager = std::make_unique<Manager>(BoundedSwaConfig{maxBatch, window}, *pool, *table, lengths.get(),
                                            [this](StreamHandle) {
            ++syncCalls;
            return !failNextSync || (failNextSync = false);
        });
    }
    ~SwaRig() { manager.reset(); }

    Manager::RequestHandle begin(int32_t n) {
        std::vector<ResidentRef> refs;
        for (int32_t i = 0; i < n; ++i) refs.push_back({i, ++epoch});
        Manager::BeginRequestResult r = manager->beginRequest(refs);
        EXPECT_EQ(r.status, Status::kOk) << r.failure;
        return std::move(*r.request);
    }
    // The logical pages mapped in `slot`'s table row.
    std::vector<int32_t> mapped(int32_t slot) const {
        std::vector<int32_t> out;
        int32_t const* row = table->hostRow(slot);
        for (int32_t j = 0; j < table->maxPagesPerSeq(); ++j)
            if (row[j] >= 0) out.push_back(j);
        return out;
    }

    std::unique_ptr<device::DeviceBackend> backend;
    std::unique_ptr<KvPagePool> pool;
    std::unique_ptr<KvPageTable> table;
    std::unique_ptr<KvLengths> lengths;
    std::unique_ptr<Manager> manager;
    uint64_t epoch = 0;
    bool failNextSync = false;
    int syncCalls = 0;
};

std::vector<int32_t> range(int32_t begin, int32_t end) {
    std::vector<int32_t> v;
    for (int32_t i = begin; i < end; ++i) v.push_back(i);
    return v;
}

TEST(BoundedSwaKVPageManager, RetainedRangeArithmetic) {
    // W a multiple of P (8, 4) and not (6, 4).
    EXPECT_EQ(Manager::retainedBegin(0, 8, 4), 0);
    EXPECT_EQ(Manager::retainedEnd(0, 4), 0);
    EXPECT_EQ(Manager::retainedEnd(1, 4), 1);
    EXPECT_EQ(Manager::retainedEnd(4, 4), 1);
    EXPECT_EQ(Manager::retainedEnd(5, 4), 2);
    EXPECT_EQ(Manager::retainedBegin(8, 8, 4), 0);
    EXPECT_EQ(Manager::retainedBegin(11, 8, 4), 0);
    EXPECT_EQ(Manager::retainedBegin(12, 8, 4), 1);
    EXPECT_EQ(Manager::retainedBegin(9, 6, 4), 0);
    EXPECT_EQ(Manager::retainedBegin(10, 6, 4), 1);
    EXPECT_EQ(Manager::retainedBegin(14, 6, 4), 2);
}

TEST(BoundedSwaKVPageManager, ReservationIsTwoWindowsPlusOne) {
    SwaRig rig(256, 16, 512, 1400, 2);
    EXPECT_EQ(rig.manager->privatePagesPerSequence(), 2 * (16 + 1) + 1);
    SwaRig odd(6, 4);
    EXPECT_EQ(odd.manager->privatePagesPerSequence(), 2 * (2 + 1) + 1);
}

// Prefill 1,000 tokens, decode 20,000 with W = 256, P = 16: never more than the reservation, and exactly the
// retained range mapped after every step; the pool is full again after finish.
TEST(BoundedSwaKVPageManager, LongDecodeStaysWithinTheReservation) {
    int32_t const W = 256, P = 16, R = 2 * (16 + 1) + 1;
    SwaRig rig(W, P, 128, 1400, 2);
    Manager& m = *rig.manager;
    Manager::RequestHandle h = rig.begin(1);
    EXPECT_EQ(m.freePageCount(), 128 - R);
    // The engine prefills in chunks of at most W (each chunk's writes fall inside the new window).
    int32_t e = 0;
    while (e < 1000) {
        e = std::min(1000, e + W);
        ASSERT_EQ(m.preparePrefill(h, {e}), Status::kOk);
        ASSERT_EQ(m.completePrefill(h), Status::kOk);
    }
    int32_t maxMapped = 0;
    for (int32_t step = 0; step < 20000; ++step) {
        ASSERT_EQ(m.prepareDecodeStep(h, {e + 1}), Status::kOk);
        SwaKVCacheState const& s = m.state(h, 0);
        int32_t const mappedNow = static_cast<int32_t>(s.pageBindings.size() + s.pendingRetireBindings.size());
        maxMapped = std::max(maxMapped, mappedNow);
        ASSERT_LE(mappedNow, R);
        ASSERT_EQ(m.completeDecodeStep(h), Status::kOk);
        ++e;
        ASSERT_EQ(s.exactResidentTokenCount, e);
        ASSERT_EQ(rig.mapped(0), range(Manager::retainedBegin(e, W, P), Manager::retainedEnd(e, P))) << e;
        ASSERT_EQ(s.pageBindings.size() + s.reservedPages.size(), static_cast<size_t>(R));
        if (step % 997 == 0) m.checkInvariants();
    }
    EXPECT_LE(maxMapped, W / P + 1 + 1);  // one retained image plus the page staged at a crossing
    EXPECT_LE(m.peakBoundPages(), R);
    EXPECT_EQ(m.finish(h), Status::kOk);
    EXPECT_EQ(m.freePageCount(), 128);
    EXPECT_TRUE(rig.mapped(0).empty());
    m.checkInvariants();
}

// W = 8, P = 4 (a multiple): decoding from 0 maps page 1 at token 5, retires page 0 only at endpoint 12, and the
// page leaving the window stays mapped until completeDecodeStep.
TEST(BoundedSwaKVPageManager, DecodeCrossesPageAndWindowBoundaries) {
    SwaRig rig(8, 4);
    Manager& m = *rig.manager;
    Manager::RequestHandle h = rig.begin(1);
    ASSERT_EQ(m.preparePrefill(h, {1}), Status::kOk);
    ASSERT_EQ(m.completePrefill(h), Status::kOk);
    EXPECT_EQ(rig.mapped(0), range(0, 1));
    for (int32_t e = 2; e <= 11; ++e) {
        ASSERT_EQ(m.prepareDecodeStep(h, {e}), Status::kOk);
        ASSERT_EQ(m.completeDecodeStep(h), Status::kOk);
    }
    EXPECT_EQ(rig.mapped(0), range(0, 3));  // endpoint 11: [0, 3)
    ASSERT_EQ(m.prepareDecodeStep(h, {12}), Status::kOk);
    SwaKVCacheState const& s = m.state(h, 0);
    ASSERT_EQ(s.pendingRetireBindings.size(), 1u);
    EXPECT_EQ(s.pendingRetireBindings[0].logicalPage, 0);
    EXPECT_EQ(rig.mapped(0), range(0, 3));  // still mapped: the step may read it
    EXPECT_EQ(s.retainedLogicalPageBegin, 1);
    ASSERT_EQ(m.completeDecodeStep(h), Status::kOk);
    EXPECT_EQ(rig.mapped(0), range(1, 3));
    ASSERT_EQ(m.prepareDecodeStep(h, {13}), Status::kOk);  // crosses into page 3
    EXPECT_EQ(m.state(h, 0).newPageBindings.size(), 1u);
    EXPECT_EQ(rig.mapped(0), range(1, 4));
    EXPECT_FALSE(rig.table->dirty());  // new bindings are uploaded before the step
    ASSERT_EQ(m.completeDecodeStep(h), Status::kOk);
    m.checkInvariants();
    EXPECT_EQ(m.finish(h), Status::kOk);
    m.checkInvariants();
}

// W = 6, P = 4 (not a multiple): the window [e - 6, e) spans up to three pages.
TEST(BoundedSwaKVPageManager, WindowNotAMultipleOfThePage) {
    SwaRig rig(6, 4);
    Manager& m = *rig.manager;
    Manager::RequestHandle h = rig.begin(1);
    ASSERT_EQ(m.preparePrefill(h, {6}), Status::kOk);
    ASSERT_EQ(m.completePrefill(h), Status::kOk);
    EXPECT_EQ(rig.mapped(0), range(0, 2));
    for (int32_t e = 7; e <= 30; ++e) {
        ASSERT_EQ(m.prepareDecodeStep(h, {e}), Status::kOk);
        ASSERT_EQ(m.completeDecodeStep(h), Status::kOk);
        ASSERT_EQ(rig.mapped(0), range((e - 6) / 4, (e + 3) / 4)) << e;
        ASSERT_LE(rig.mapped(0).size(), 3u);
    }
    m.checkInvariants();
}

// Chunked prefill: each chunk keeps the previous window mapped until completePrefill, then retires what left it.
TEST(BoundedSwaKVPageManager, ChunkedPrefillRetiresAfterCompletion) {
    SwaRig rig(8, 4);
    Manager& m = *rig.manager;
    Manager::RequestHandle h = rig.begin(2);
    ASSERT_EQ(m.preparePrefill(h, {8, 3}), Status::kOk);
    ASSERT_EQ(m.completePrefill(h), Status::kOk);
    EXPECT_EQ(rig.mapped(0), range(0, 2));
    EXPECT_EQ(rig.mapped(1), range(0, 1));
    ASSERT_EQ(m.preparePrefill(h, {16, 3}), Status::kOk);  // row 1 holds
    EXPECT_EQ(rig.mapped(0), range(0, 4));                  // old window and new window, both mapped
    EXPECT_EQ(m.state(h, 0).pendingRetireBindings.size(), 2u);
    ASSERT_EQ(m.completePrefill(h), Status::kOk);
    EXPECT_EQ(rig.mapped(0), range(2, 4));
    // A chunk longer than the window: the gap between the windows is never mapped.
    ASSERT_EQ(m.preparePrefill(h, {40, 3}), Status::kOk);
    EXPECT_EQ(rig.mapped(0), (std::vector<int32_t>{2, 3, 8, 9}));
    ASSERT_EQ(m.completePrefill(h), Status::kOk);
    EXPECT_EQ(rig.mapped(0), range(8, 10));
    m.checkInvariants();
    ASSERT_EQ(m.prepareDecodeStep(h, {41, 4}), Status::kOk);
    EXPECT_THROW(m.preparePrefill(h, {41, 4}), ContractError);
    ASSERT_EQ(m.completeDecodeStep(h), Status::kOk);
    EXPECT_THROW(m.preparePrefill(h, {50, 4}), ContractError);  // no prefill after decoding
    EXPECT_EQ(m.finish(h), Status::kOk);
    EXPECT_EQ(m.freePageCount(), 256);
}

// A batch of 8 with survivors: retired rows' table rows cleared and reservations back on the free list, survivors
// keep their rows and windows, lengths compacted.
TEST(BoundedSwaKVPageManager, CompactionOfEightWithSurvivors) {
    SwaRig rig(8, 4);
    Manager& m = *rig.manager;
    int32_t const R = m.privatePagesPerSequence();
    Manager::RequestHandle h = rig.begin(8);
    std::vector<int32_t> lens;
    for (int32_t i = 0; i < 8; ++i) lens.push_back(5 + i);
    ASSERT_EQ(m.preparePrefill(h, lens), Status::kOk);
    ASSERT_EQ(m.completePrefill(h), Status::kOk);
    rig.lengths->set(lens.data(), 8);
    std::vector<int32_t> const map{-1, 0, -1, 1, 2, -1, -1, 3};
    int32_t mappingWords[8] = {};
    TensorView mapping{mappingWords, ScalarType::kInt32, {8}, -1};
    ASSERT_EQ(m.beginBatchCompaction(h, map, 4, mapping), Status::kOk);
    EXPECT_EQ(std::vector<int32_t>(mappingWords, mappingWords + 8), map);
    ASSERT_EQ(m.compactBatch(h), Status::kOk);
    EXPECT_EQ(h.batchSize(), 4);
    EXPECT_EQ(m.freePageCount(), 256 - 4 * R);
    for (int32_t slot : {0, 2, 5, 6}) EXPECT_TRUE(rig.mapped(slot).empty());
    EXPECT_EQ(m.state(h, 0).resident.slot, 1);
    EXPECT_EQ(m.state(h, 3).resident.slot, 7);
    EXPECT_EQ(m.state(h, 3).exactResidentTokenCount, 12);
    EXPECT_EQ(rig.lengths->read(), (std::vector<int32_t>{6, 8, 9, 12}));
    m.checkInvariants();
    ASSERT_EQ(m.prepareDecodeStep(h, {7, 9, 10, 13}), Status::kOk);
    ASSERT_EQ(m.completeDecodeStep(h), Status::kOk);
    EXPECT_EQ(m.finish(h), Status::kOk);
    EXPECT_EQ(m.freePageCount(), 256);
    m.checkInvariants();
}

// A failed synchronisation quarantines the request (its pages stay held, its rows mapped), poisons admission,
// and shutdown recovers everything.
TEST(BoundedSwaKVPageManager, FailedSyncQuarantinesUntilShutdown) {
    SwaRig rig(8, 4);
    Manager& m = *rig.manager;
    int32_t const R = m.privatePagesPerSequence();
    Manager::RequestHandle h = rig.begin(2);
    ASSERT_EQ(m.preparePrefill(h, {9, 4}), Status::kOk);
    rig.failNextSync = true;
    EXPECT_EQ(m.completePrefill(h), Status::kPoisoned);
    EXPECT_TRUE(m.poisoned());
    EXPECT_EQ(m.quarantinedRequestCount(), 1u);
    EXPECT_EQ(m.freePageCount(), 256 - 2 * R);
    EXPECT_EQ(rig.mapped(0), range(0, 3));
    EXPECT_EQ(m.prepareDecodeStep(h, {10, 5}), Status::kPoisoned);
    EXPECT_FALSE(h.valid());
    Manager::BeginRequestResult refused = m.beginRequest({{3, ++rig.epoch}});
    EXPECT_EQ(refused.status, Status::kPoisoned);
    EXPECT_EQ(m.finish(h), Status::kPoisoned);
    m.checkInvariants();
    rig.failNextSync = true;
    EXPECT_EQ(m.shutdown(), Status::kPoisoned);  // still failing: nothing freed
    EXPECT_EQ(m.freePageCount(), 256 - 2 * R);
    EXPECT_EQ(m.shutdown(), Status::kOk);
    EXPECT_FALSE(m.poisoned());
    EXPECT_EQ(m.freePageCount(), 256);
    EXPECT_TRUE(rig.mapped(0).empty());
    m.checkInvariants();
    Manager::RequestHandle again = rig.begin(1);
    EXPECT_EQ(m.finish(again), Status::kOk);
}

TEST(BoundedSwaKVPageManager, AdmissionRefusedHoldsNothing) {
    SwaRig rig(8, 4, 20);  // R = 7: two sequences fit, three do not
    Manager& m = *rig.manager;
    Manager::BeginRequestResult r = m.beginRequest({{0, 1}, {1, 1}, {2, 1}});
    EXPECT_EQ(r.status, Status::kRequestFailed);
    EXPECT_FALSE(r.request.has_value());
    EXPECT_NE(r.failure.find("private pages"), std::string::npos);
    EXPECT_EQ(m.freePageCount(), 20);
    EXPECT_FALSE(m.hasLiveRequest());
    m.checkInvariants();
    Manager::BeginRequestResult ok = m.beginRequest({{0, 2}, {1, 2}});
    ASSERT_EQ(ok.status, Status::kOk);
    EXPECT_EQ(m.freePageCount(), 6);
    Manager::BeginRequestResult second = m.beginRequest({{2, 3}});
    EXPECT_EQ(second.status, Status::kRequestFailed);  // one request at a time
    EXPECT_EQ(m.finish(*ok.request), Status::kOk);
    EXPECT_EQ(m.freePageCount(), 20);
}

TEST(BoundedSwaKVPageManager, BadInputsThrowAndChangeNothing) {
    auto backend = device::createCpuBackend();
    KvPagePool pool(*backend, KvPoolGeometry{64, 4, DType::kFp32, {{1, 2}}});
    KvPageTable sparse(*backend, 4, 3, 64, KvPageTable::Mode::kSparseWindow);
    KvPageTable dense(*backend, 4, 16, 64);
    // A window larger than the table: W = 9 spans up to 4 pages, the table has 3 per sequence.
    EXPECT_THROW(Manager(BoundedSwaConfig{4, 9}, pool, sparse), ContractError);
    EXPECT_NO_THROW(Manager(BoundedSwaConfig{4, 8}, pool, sparse));
    EXPECT_THROW(Manager(BoundedSwaConfig{4, 8}, pool, dense), ContractError);
    EXPECT_THROW(Manager(BoundedSwaConfig{4, 0}, pool, sparse), ContractError);

    SwaRig rig(8, 4, 256, 8, 4);
    Manager& m = *rig.manager;
    EXPECT_THROW(m.beginRequest({{0, 0}}), ContractError);            // epoch 0
    EXPECT_THROW(m.beginRequest({{4, 1}}), ContractError);            // slot out of range
    EXPECT_THROW(m.beginRequest({{1, 1}, {1, 2}}), ContractError);    // repeated slot
    Manager::RequestHandle h = std::move(*m.beginRequest({{0, 5}}).request);
    EXPECT_EQ(m.finish(h), Status::kOk);
    EXPECT_THROW(m.beginRequest({{0, 5}}), ContractError);            // stale epoch for slot 0
    EXPECT_THROW(m.beginRequest({{0, 4}}), ContractError);
    EXPECT_EQ(m.freePageCount(), 256);

    Manager::RequestHandle r = std::move(*m.beginRequest({{0, 6}, {1, 6}}).request);
    EXPECT_THROW(m.prepareDecodeStep(r, {1, 1}), ContractError);  // before prefill
    ASSERT_EQ(m.preparePrefill(r, {4, 4}), Status::kOk);
    ASSERT_EQ(m.completePrefill(r), Status::kOk);
    SwaKVCacheState const before = m.state(r, 0);
    EXPECT_THROW(m.prepareDecodeStep(r, {6, 5}), ContractError);   // skips a token
    EXPECT_THROW(m.prepareDecodeStep(r, {3, 5}), ContractError);   // goes back
    EXPECT_THROW(m.prepareDecodeStep(r, {5}), ContractError);      // wrong batch
    EXPECT_THROW(m.preparePrefill(r, {40, 4}), ContractError);     // past the table's 8 pages
    EXPECT_THROW(m.completeDecodeStep(r), ContractError);          // out of order
    EXPECT_THROW(m.state(r, 2), ContractError);
    SwaKVCacheState const& after = m.state(r, 0);
    EXPECT_EQ(after.exactResidentTokenCount, before.exactResidentTokenCount);
    EXPECT_EQ(after.pageBindings.size(), before.pageBindings.size());
    EXPECT_EQ(after.reservedPages, before.reservedPages);
    EXPECT_FALSE(after.pendingEndpoint.has_value());
    int32_t words[2] = {};
    TensorView mapping{words, ScalarType::kInt32, {2}, -1};
    EXPECT_THROW(m.beginBatchCompaction(r, {1, 0}, 2, mapping), ContractError);  // reorders survivors
    m.checkInvariants();
    ASSERT_EQ(m.prepareDecodeStep(r, {5, 4}), Status::kOk);
    ASSERT_EQ(m.completeDecodeStep(r), Status::kOk);
    EXPECT_EQ(m.finish(r), Status::kOk);
    EXPECT_EQ(m.freePageCount(), 256);
}

// A step that retires nothing needs no synchronisation, but its pages go back to the free list only after one.
TEST(BoundedSwaKVPageManager, SynchronisesOnlyWhereAPageCouldStillBeRead) {
    SwaRig rig(8, 4);
    Manager& m = *rig.manager;
    Manager::RequestHandle h = rig.begin(1);
    ASSERT_EQ(m.preparePrefill(h, {2}), Status::kOk);
    ASSERT_EQ(m.completePrefill(h), Status::kOk);
    EXPECT_EQ(rig.syncCalls, 1);
    for (int32_t e = 3; e <= 12; ++e) {
        ASSERT_EQ(m.prepareDecodeStep(h, {e}), Status::kOk);
        ASSERT_EQ(m.completeDecodeStep(h), Status::kOk);
    }
    EXPECT_EQ(rig.syncCalls, 2);  // only endpoint 12 retired a page (logical page 0)
    ASSERT_EQ(m.prepareDecodeStep(h, {13}), Status::kOk);
    ASSERT_EQ(m.completeDecodeStep(h), Status::kOk);
    EXPECT_EQ(rig.syncCalls, 2);
    EXPECT_EQ(m.finish(h), Status::kOk);
    EXPECT_EQ(rig.syncCalls, 3);  // the last step's work, before its pages are free
}

TEST(BoundedSwaKVPageManager, DestroyingTheHandleReleasesTheRequest) {
    SwaRig rig(8, 4);
    {
        Manager::RequestHandle h = rig.begin(3);
        ASSERT_EQ(rig.manager->preparePrefill(h, {3, 9, 20}), Status::kOk);
    }
    EXPECT_FALSE(rig.manager->hasLiveRequest());
    EXPECT_EQ(rig.manager->freePageCount(), 256);
    rig.manager->checkInvariants();
}

// Every handle that names the manager is detached when it goes, not only the newest: a request quarantined, the
// quarantine resolved by shutdown, the manager reused for another request, both handles moved (ctor and
// assignment), then the manager destroyed first. Neither handle may reach it afterwards (under ASan a stale owner
// is a heap-use-after-free in valid() and in the destructor's finish()).
TEST(BoundedSwaKVPageManager, EveryHandleNamingTheManagerIsDetachedWhenItGoes) {
    SwaRig rig(8, 4);
    Manager& m = *rig.manager;
    Manager::RequestHandle first = rig.begin(1);
    ASSERT_EQ(m.preparePrefill(first, {9}), Status::kOk);
    rig.failNextSync = true;
    ASSERT_EQ(m.completePrefill(first), Status::kPoisoned);
    ASSERT_EQ(m.shutdown(), Status::kOk);
    std::vector<Manager::RequestHandle> moved;
    moved.push_back(std::move(first));  // the list follows the move
    Manager::RequestHandle second = rig.begin(1);
    ASSERT_TRUE(second.valid());
    Manager::RequestHandle assigned;
    assigned = std::move(second);
    EXPECT_FALSE(second.valid());
    EXPECT_TRUE(assigned.valid());
    EXPECT_EQ(assigned.batchSize(), 1);
    EXPECT_FALSE(moved[0].valid());  // resolved by shutdown, but it still names the manager (not finished)
    EXPECT_EQ(m.freePageCount(), 256 - m.privatePagesPerSequence());  // the other request holds its pages
    Manager::RequestHandle third = std::move(assigned);
    rig.manager.reset();
    EXPECT_FALSE(third.valid());
    EXPECT_EQ(third.batchSize(), 0);
    EXPECT_FALSE(moved[0].valid());
    EXPECT_EQ(moved[0].batchSize(), 0);
    // third and moved[0] go out of scope after the manager: their destructors touch nothing.
}

// The same when the handle that outlives the manager was finished by hand once its quarantine was resolved: a
// finish detaches it, so a later manager destruction has nothing of it left to forget.
TEST(BoundedSwaKVPageManager, AHandleFinishedAfterShutdownIsAlreadyDetached) {
    SwaRig rig(8, 4);
    Manager& m = *rig.manager;
    Manager::RequestHandle first = rig.begin(1);
    ASSERT_EQ(m.preparePrefill(first, {9}), Status::kOk);
    rig.failNextSync = true;
    ASSERT_EQ(m.completePrefill(first), Status::kPoisoned);
    ASSERT_EQ(m.shutdown(), Status::kOk);
    Manager::RequestHandle second = rig.begin(1);
    EXPECT_EQ(m.finish(first), Status::kOk);  // resolved by shutdown: nothing left to release
    EXPECT_EQ(m.freePageCount(), 256 - m.privatePagesPerSequence());  // second keeps its pages
    EXPECT_EQ(m.finish(first), Status::kOk);  // an empty handle: a no-op
    rig.manager.reset();
    EXPECT_FALSE(first.valid());
    EXPECT_FALSE(second.valid());
}

// ---- the facade's SWA backend --------------------------------------------------------------------------------

struct FacadeBatch {
    GenerationRequest request;
    DecodingInferenceContext context;
    std::vector<std::vector<int32_t>> histories;

    FacadeBatch(std::vector<int32_t> const& promptLengths, uint64_t epoch) {
        for (size_t i = 0; i < promptLengths.size(); ++i) {
            std::vector<int32_t> tokens(static_cast<size_t>(promptLengths[i]), 7);
            request.sequences.push_back({tokens, "", {}, std::nullopt});
            histories.push_back(tokens);
            context.residentRefs.push_back({static_cast<int32_t>(i), epoch});
            context.status.push_back(SequenceStatus::kRunning);
        }
        context.activeBatchSize = static_cast<int32_t>(promptLengths.size());
        sync();
    }
    void sync() {
        context.tokenIds.assign(histories.begin(), histories.end());
        context.activeBatchSize = static_cast<int32_t>(histories.size());
    }
};

std::optional<ManagedKVCacheRequest> beginSwa(
    Manager* swa, FacadeBatch const& b, bool speculative = false, DecodingKvHeadroom headroom = {1, 0},
    DecodingTokenStateContract contract = DecodingTokenStateContract::kCommittedPlusLookahead) {
    return ManagedKVCacheRequest::begin(nullptr, swa, b.request, b.context, speculative, headroom, contract,
                                        ContextCacheCommitPolicy::kIncludingGeneratedTokens);
}

TEST(ManagedKVCacheRequestSwa, PreconditionsOfTheSwaBackend) {
    SwaRig rig(8, 4);
    FacadeBatch b({5, 6}, 1);
    EXPECT_THROW(beginSwa(rig.manager.get(), b, true), ContractError);  // speculative
    EXPECT_THROW(beginSwa(rig.manager.get(), b, false, {1, 1}), ContractError);
    EXPECT_THROW(beginSwa(rig.manager.get(), b, false, {2, 0}), ContractError);
    EXPECT_THROW(beginSwa(rig.manager.get(), b, false, {1, 0}, DecodingTokenStateContract::kFullyCommitted),
                 ContractError);
    FacadeBatch twoRefsOneInput = b;
    twoRefsOneInput.request.sequences.pop_back();
    EXPECT_THROW(beginSwa(rig.manager.get(), twoRefsOneInput), ContractError);
    EXPECT_FALSE(rig.manager->hasLiveRequest());
    EXPECT_EQ(rig.manager->freePageCount(), 256);
}

TEST(ManagedKVCacheRequestSwa, ServesAWindowAndAnswersTheBackstops) {
    SwaRig rig(8, 4);
    Manager& m = *rig.manager;
    FacadeBatch b({5, 10}, 1);
    std::optional<ManagedKVCacheRequest> r = beginSwa(&m, b);
    ASSERT_TRUE(r.has_value());
    EXPECT_FALSE(r->hasContextReuse());
    EXPECT_EQ(r->prefillStarts(), nullptr);
    EXPECT_EQ(r->contextRequest(), nullptr);
    EXPECT_TRUE(r->preparePrefill());
    EXPECT_TRUE(r->enqueuePrefillCaptures());
    EXPECT_THROW(r->reuseTokenLength(0), ContractError);
    TensorView hidden;
    EXPECT_THROW(r->publishHybridMtpEndpoint(0, 5, hidden, 0), ContractError);
    EXPECT_THROW(r->restoreHybridMtpBoundaryHidden(0, hidden, 0), ContractError);
    int32_t start = -1;
    EXPECT_EQ(r->admitSequence({1, 2, 3}, "", {1, 0}, start, ResidentRef{2, 9}, nullptr),
              ContextCacheRequest::AdmitSequenceStatus::kFailed);
    EXPECT_FALSE(r->finalizeSequenceAdmission(2, 3, 3));
    EXPECT_TRUE(r->retractSequenceAdmission());
    EXPECT_EQ(m.freePageCount(), 256 - 2 * m.privatePagesPerSequence());

    // Chunked prefill of row 1 (4 then 10 tokens); row 0 in one chunk. The second prepare completes the first.
    ASSERT_TRUE(r->prepareSwaPrefill({5, 4}));
    ASSERT_TRUE(r->prepareSwaPrefill({5, 10}));
    for (auto& h : b.histories) h.push_back(1);  // the lookahead sampled at prefill end
    b.sync();
    ASSERT_TRUE(r->completePrefill(b.context, {}));
    BoundedSwaKVPageManager::RequestHandle* h = r->swaRequest();
    ASSERT_NE(h, nullptr);
    EXPECT_EQ(m.state(*h, 1).exactResidentTokenCount, 10);
    EXPECT_EQ(rig.mapped(1), range(0, 3));
    for (int step = 0; step < 6; ++step) {
        ASSERT_TRUE(r->prepareDecodeStep(b.context, {1, 0}));
        for (auto& hist : b.histories) hist.push_back(2);
        b.sync();
        ASSERT_TRUE(r->completeDecodeStep(b.context, {}));
    }
    EXPECT_EQ(m.state(*h, 1).exactResidentTokenCount, 16);
    EXPECT_EQ(rig.mapped(1), range(2, 4));
    // A history that skips a token, or a headroom other than {1, 0}: ContractError, nothing changed.
    b.histories[0].push_back(3);
    b.sync();
    EXPECT_THROW(r->prepareDecodeStep(b.context, {1, 0}), ContractError);
    b.histories[0].pop_back();
    b.sync();
    EXPECT_THROW(r->prepareDecodeStep(b.context, {1, 1}), ContractError);
    EXPECT_EQ(m.state(*h, 0).exactResidentTokenCount, 11);
    // Row 0 cancelled: it holds while row 1 advances.
    b.context.status[0] = SequenceStatus::kCancelled;
    ASSERT_TRUE(r->prepareDecodeStep(b.context, {1, 0}));
    b.histories[1].push_back(2);
    b.sync();
    ASSERT_TRUE(r->completeDecodeStep(b.context, {}));
    EXPECT_EQ(m.state(*h, 0).exactResidentTokenCount, 11);
    int32_t words[2] = {};
    TensorView mapping{words, ScalarType::kInt32, {2}, -1};
    ASSERT_TRUE(r->beginBatchCompaction({-1, 0}, 1, mapping));
    EXPECT_THROW(r->completeBatchCompaction({0, -1}), ContractError);
    ASSERT_TRUE(r->completeBatchCompaction({-1, 0}));
    EXPECT_EQ(h->batchSize(), 1);
    EXPECT_TRUE(rig.mapped(0).empty());
    EXPECT_TRUE(r->finish());
    EXPECT_EQ(m.freePageCount(), 256);
    m.checkInvariants();
}

TEST(ManagedKVCacheRequestSwa, RefusalAndPoisonReachTheCaller) {
    SwaRig rig(8, 4, 10);  // R = 7: one sequence fits, two do not
    FacadeBatch two({3, 3}, 1);
    EXPECT_FALSE(beginSwa(rig.manager.get(), two).has_value());
    EXPECT_NE(rig.manager->lastFailure().find("private pages"), std::string::npos);
    FacadeBatch one({3}, 2);
    std::optional<ManagedKVCacheRequest> r = beginSwa(rig.manager.get(), one);
    ASSERT_TRUE(r.has_value());
    ASSERT_TRUE(r->prepareSwaPrefill({3}));
    rig.failNextSync = true;
    one.histories[0].push_back(1);
    one.sync();
    EXPECT_FALSE(r->completePrefill(one.context, {}));
    EXPECT_NE(r->lastError().find("synchronisation"), std::string::npos);
    EXPECT_FALSE(r->finish());
    EXPECT_EQ(rig.manager->shutdown(), Status::kOk);
    EXPECT_EQ(rig.manager->freePageCount(), 10);
}

}  // namespace
}  // namespace ctxcache::runtime
