// BoundedSwaKVPageManager: bounded sliding-window paging for a model whose attention reads only the last W
// positions and whose context reuse is off (reference c.14, d.4). Each admitted sequence takes a fixed private
// reservation of 2 * (ceil(W / P) + 1) + 1 pages of a reduced KV pool up front and keeps its retained window in
// them: the retained logical pages for KV endpoint e are [floor(max(0, e - W) / P), ceil(e / P)), bound in a
// sparse-window page table (a page's logical index is its table column; the pages that left the window are holes).
// It owns page ids and table entries only; the pool owns the bytes.
//
// Lifecycle of one request (one at a time; a step out of order is a ContractError that changes nothing):
//   beginRequest -> { preparePrefill -> [engine prefill chunk] -> completePrefill }+
//                -> { prepareDecodeStep -> [engine step] -> completeDecodeStep
//                     | beginBatchCompaction -> compactBatch }* -> finish
//
// Invariants (checkInvariants() verifies them):
//   - per sequence: bound pages + pages pending retirement + reserved pages == the private reservation, always;
//     bound pages are exactly the retained range of its endpoint (after the prepare that set it), contiguous;
//   - a page is on the free list, in exactly one sequence's reservation, or held by a quarantined request;
//   - new bindings are written to the table at once (and uploaded before the step runs); a page that left the
//     window keeps its table entry until the completion point (complete*, after a synchronisation) and only then
//     returns to its sequence's reservation;
//   - a request whose synchronisation failed is quarantined: its pages stay off the free list and its table rows
//     stay mapped (the device may still read them) and beginRequest answers kPoisoned until shutdown()
//     synchronises successfully.
// Errors: a broken contract (bad or stale resident refs, endpoints that go back or skip tokens in a decode step,
//   endpoints past the table, a bad compaction map) throws ContractError and changes nothing; too few free pages
//   for every sequence is kRequestFailed with nothing held; device failure is kPoisoned.
// Cost: a decode step is O(1) host work per sequence (two divisions and compares) without a page crossing, plus
//   one setEntry at a crossing, one table upload per step that changed it, and one synchronisation per step that
//   retires a page; the general path (prefill chunks) is O(pages of the window).
// Handles: every handle that names the manager (its live request's, a quarantined request's, or one whose
//   quarantine shutdown() has since resolved) is on the manager's intrusive list until it is finished, destroyed
//   or moved from (a move hands the place on); the manager's destructor detaches each of them, so a handle never
//   reaches a destroyed manager, whatever order handles and manager die in and however often the manager was
//   reused after shutdown(). A detached handle is empty: valid() is false and finish() is a no-op.
// Threading: single writer. Handles should be finished or destroyed before the manager; one still alive then is
//   detached (a live request's pages are released first).
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "ctxcache/device/kv_lengths.h"
#include "ctxcache/device/kv_page_pool.h"
#include "ctxcache/device/kv_page_table.h"
#include "ctxcache/runtime/runtime_types.h"
#include "ctxcache/types.h"

namespace ctxcache::runtime {

// The C ABI answers these as CTXC_OK, CTXC_E_REQUEST_FAILED and CTXC_E_POISONED.
enum class SwaKVCacheStatus : uint8_t { kOk = 0, kRequestFailed = 1, kPoisoned = 2 };

struct SwaPageBinding {
    int32_t logicalPage = 0;
    PageId page = 0;
};

// One sequence's window (reference (b), 0.11).
struct SwaKVCacheState {
    ResidentRef resident;
    int32_t pageSizeTokens = 0;
    int32_t windowSizeTokens = 0;
    int32_t exactResidentTokenCount = 0;  // the KV endpoint completed so far
    int32_t retainedLogicalPageBegin = 0;
    int32_t retainedLogicalPageEnd = 0;
    std::deque<SwaPageBinding> pageBindings;          // the retained range, ascending, contiguous
    std::vector<PageId> reservedPages;                // the unbound rest of the private reservation
    std::vector<SwaPageBinding> newPageBindings;      // bound by the pending prepare
    std::vector<SwaPageBinding> pendingRetireBindings;  // left the window; still mapped until complete*
    std::optional<int32_t> pendingEndpoint;           // the endpoint the pending step moves to
    int32_t peakBoundPages = 0;                       // most pages ever mapped at once (bound + pending retire)
};

struct BoundedSwaConfig {
    int32_t maxBatch = 8;          // sequences one request may hold (<= the table's maxBatch)
    int32_t windowSizeTokens = 0;  // W > 0
};

class BoundedSwaKVPageManager {
public:
    using StreamSynchronizer = std::function<bool(StreamHandle)>;  // false: the stream's work failed

    class RequestHandle {
    public:
        RequestHandle() noexcept = default;
        ~RequestHandle();
        RequestHandle(RequestHandle&& other) noexcept;
        RequestHandle& operator=(RequestHandle&& other) noexcept;
        RequestHandle(RequestHandle const&) = delete;
        RequestHandle& operator=(RequestHandle const&) = delete;

        bool valid() const noexcept;  // bound to the live, unfinished request of a live manager
        int32_t batchSize() const noexcept;

    private:
        friend class BoundedSwaKVPageManager;
        void detach() noexcept;  // off the owner's list (if any), empty
        BoundedSwaKVPageManager* owner_ = nullptr;
        uint64_t id_ = 0;
        RequestHandle* prev_ = nullptr;  // the owner's list of handles naming it
        RequestHandle* next_ = nullptr;
    };

    struct BeginRequestResult {
        SwaKVCacheStatus status = SwaKVCacheStatus::kOk;
        std::optional<RequestHandle> request;  // set iff kOk
        std::string failure;
    };

    // ContractError when the table is not in sparse-window mode or does not address the pool, W <= 0, the window
    // needs more table columns than the table has (ceil(W / P) + 1 > maxPagesPerSeq), or maxBatch exceeds the
    // table's (or the lengths', when given). lengths (optional) is compacted with the batch.
    BoundedSwaKVPageManager(BoundedSwaConfig const& config, device::KvPagePool& pool, device::KvPageTable& swaTable,
                            device::KvLengths* lengths = nullptr, StreamSynchronizer synchronizer = {});
    ~BoundedSwaKVPageManager();
    BoundedSwaKVPageManager(BoundedSwaKVPageManager const&) = delete;
    BoundedSwaKVPageManager& operator=(BoundedSwaKVPageManager const&) = delete;

    // Admit a batch over its resident refs (row i = residents[i]): every sequence takes its private reservation.
    // kRequestFailed (nothing held) when the free list cannot cover all of them or a request is already live;
    // kPoisoned while quarantined work is unresolved. ContractError on an empty or oversized batch, a slot out of
    // range or repeated, epoch 0 or an epoch not above the slot's last one (stale).
    BeginRequestResult beginRequest(std::vector<ResidentRef> const& residents, StreamHandle stream = nullptr);
    // One prefill chunk: row i's KV endpoint moves to effectiveInputLengths[i] (>= its current one). The pages of
    // the new retained range are bound and uploaded; those that left it are staged for retirement.
    SwaKVCacheStatus preparePrefill(RequestHandle& request, std::vector<int32_t> const& effectiveInputLengths);
    // After the chunk's device work: synchronise and apply the staged retirements.
    SwaKVCacheStatus completePrefill(RequestHandle& request);
    // One decode step: endpoints[i] is row i's current endpoint (held) or one more (the single-token fast path).
    SwaKVCacheStatus prepareDecodeStep(RequestHandle& request, std::vector<int32_t> const& endpoints);
    // After the step: synchronise when a page retires, and apply the retirements.
    SwaKVCacheStatus completeDecodeStep(RequestHandle& request);
    // Validate an order-preserving dense map (-1 retires a row) and copy it to deviceBatchMapping (int32, at least
    // batch entries; data may be null to skip the copy).
    SwaKVCacheStatus beginBatchCompaction(RequestHandle& request, std::vector<int32_t> const& oldToNew,
                                          int32_t newBatchSize, TensorView& deviceBatchMapping);
    // Retired rows: table rows cleared, one synchronisation, their reservations back to the free list, resident
    // slots freed; lengths compacted; survivors keep their rows.
    SwaKVCacheStatus compactBatch(RequestHandle& request);
    // Synchronise pending work and release the request. An empty or finished handle is a no-op (kOk).
    SwaKVCacheStatus finish(RequestHandle& request);
    // Re-synchronise quarantined requests and free them. kOk clears the poison; kPoisoned when a sync still fails;
    // kRequestFailed when a request is still live.
    SwaKVCacheStatus shutdown() noexcept;

    int32_t freePageCount() const noexcept { return static_cast<int32_t>(freePages_.size()); }
    int32_t privatePagesPerSequence() const noexcept { return reservation_; }
    int32_t pageSize() const noexcept { return pageSize_; }
    int32_t windowSize() const noexcept { return config_.windowSizeTokens; }
    // The window of batch row `row` of a live request (ContractError otherwise).
    SwaKVCacheState const& state(RequestHandle const& request, int32_t row) const;
    bool poisoned() const noexcept { return poisoned_; }
    bool hasLiveRequest() const noexcept { return live_.has_value(); }
    size_t quarantinedRequestCount() const noexcept { return quarantine_.size(); }
    int32_t peakBoundPages() const noexcept { return peakBoundPages_; }  // over every sequence served
    std::string const& lastFailure() const noexcept { return lastFailure_; }
    // Throws InvariantError naming the first violation.
    void checkInvariants() const;

    // The retained logical range [begin, end) for KV endpoint e with window W and page size P.
    static int32_t retainedBegin(int32_t e, int32_t W, int32_t P) noexcept { return (e > W ? e - W : 0) / P; }
    static int32_t retainedEnd(int32_t e, int32_t P) noexcept { return (e + P - 1) / P; }

private:
    enum class Phase : uint8_t { kAdmitted, kPrefillPending, kIdle, kDecodePending, kCompactionPending };
    struct Live {
        uint64_t id = 0;
        Phase phase = Phase::kAdmitted;
        bool decoded = false;  // a decode step ran: no more prefill chunks
        StreamHandle stream = nullptr;
        std::vector<SwaKVCacheState> rows;
        std::vector<int32_t> pendingMap;
        int32_t pendingNewBatch = 0;
        bool devicePending = false;  // work enqueued since the last successful synchronisation
    };
    struct Quarantined {
        uint64_t id = 0;
        StreamHandle stream = nullptr;
        std::vector<SwaKVCacheState> rows;
        // Per row: 1 where compactBatch had cleared the row's page-table entries (a row the compaction drops)
        // before its synchronisation failed; such a row still holds its pages, but the table no longer maps them.
        std::vector<uint8_t> unmapped;
    };

    Live* live(RequestHandle const& request, char const* op);  // nullptr: the request is quarantined
    void requirePhase(char const* op, Live const& l, Phase phase) const;
    void checkEndpoints(char const* op, Live const& l, std::vector<int32_t> const& endpoints, bool decode) const;
    void advance(SwaKVCacheState& s, int32_t endpoint);
    void applyRetirements(SwaKVCacheState& s);
    bool synchronize(Live& l) noexcept;
    SwaKVCacheStatus quarantine(std::string why);
    void releaseRow(SwaKVCacheState& s) noexcept;
    void upload() noexcept;
    void link(RequestHandle& handle) noexcept;
    void unlink(RequestHandle& handle) noexcept;
    void relink(RequestHandle& from, RequestHandle& to) noexcept;  // `to` takes `from`'s place on the list

    BoundedSwaConfig config_;
    device::KvPagePool* pool_;
    device::KvPageTable* table_;
    device::KvLengths* lengths_;
    StreamSynchronizer synchronizer_;
    int32_t pageSize_ = 0;
    int32_t reservation_ = 0;
    std::vector<PageId> freePages_;
    std::vector<uint64_t> lastEpochs_;  // per slot: the highest epoch ever admitted
    std::vector<uint8_t> slotBusy_;     // per slot: held by the live or a quarantined request
    std::optional<Live> live_;
    RequestHandle* handles_ = nullptr;  // every handle with owner_ == this (detached at destruction)
    std::vector<Quarantined> quarantine_;
    uint64_t nextId_ = 1;
    int32_t peakBoundPages_ = 0;
    bool poisoned_ = false;
    std::string lastFailure_;
};

}  // namespace ctxcache::runtime
