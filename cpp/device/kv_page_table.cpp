// KvPageTable: validated host edits, dirty-row tracking, and the coalesced upload.
#include "ctxcache/device/kv_page_table.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "ctxcache/device/layout.h"
#include "ctxcache/errors.h"

namespace ctxcache::device {

namespace {

[[noreturn]] void fail(char const* op, std::string const& why) {
    throw ContractError(std::string("KvPageTable::") + op + ": " + why);
}

size_t tableEntries(int32_t maxBatch, int32_t maxPagesPerSeq, int32_t numPages) {
    if (maxBatch <= 0 || maxPagesPerSeq <= 0 || numPages <= 0)
        fail("KvPageTable", "maxBatch, maxPagesPerSeq and numPages must be positive (got " + std::to_string(maxBatch) +
                                ", " + std::to_string(maxPagesPerSeq) + ", " + std::to_string(numPages) + ")");
    if (numPages > std::numeric_limits<int32_t>::max() / 2) fail("KvPageTable", "numPages too large for V ids");
    int64_t const entries = static_cast<int64_t>(maxBatch) * 2 * maxPagesPerSeq;
    if (entries > std::numeric_limits<int32_t>::max())
        fail("KvPageTable",
             "maxBatch * 2 * maxPagesPerSeq = " + std::to_string(entries) + " entries exceeds INT32_MAX");
    return static_cast<size_t>(entries);
}

}  // namespace

size_t KvPageTable::requiredBytes(int32_t maxBatch, int32_t maxPagesPerSeq, int32_t numPages) {
    return tableEntries(maxBatch, maxPagesPerSeq, numPages) * sizeof(int32_t);
}

KvPageTable::KvPageTable(DeviceBackend& backend, int32_t maxBatch, int32_t maxPagesPerSeq, int32_t numPages, Mode mode,
                         ExternalMemory external)
    : backend_(&backend),
      maxBatch_(maxBatch),
      maxPagesPerSeq_(maxPagesPerSeq),
      numPages_(numPages),
      mode_(mode),
      host_(tableEntries(maxBatch, maxPagesPerSeq, numPages), -1),
      dirtyRows_(static_cast<size_t>(maxBatch), 0),
      scratch_(host_.size()),
      device_() {
    if (mode != Mode::kDense && mode != Mode::kSparseWindow)
        fail("KvPageTable", "unknown mode " + std::to_string(static_cast<int32_t>(mode)));
    device_ = DeviceBuffer::make(backend, external, host_.size() * sizeof(int32_t), alignof(int32_t), "KvPageTable");
    if (device_.owning()) {
        backend.upload(device_.data(), host_.data(), host_.size() * sizeof(int32_t));
    } else {
        for (int32_t b = 0; b < maxBatch_; ++b) markDirty(b);
    }
}

void KvPageTable::checkSlot(char const* op, int32_t slot) const {
    if (slot < 0 || slot >= maxBatch_)
        fail(op, "slot " + std::to_string(slot) + " is outside [0, " + std::to_string(maxBatch_) + ")");
}

void KvPageTable::checkPageId(char const* op, int32_t kPage, bool allowHole) const {
    if (kPage == -1 && allowHole) return;
    if (kPage < 0 || kPage >= numPages_)
        fail(op, "page id " + std::to_string(kPage) + " is outside [0, " + std::to_string(numPages_) + ")");
}

int32_t const* KvPageTable::hostRow(int32_t slot) const {
    checkSlot("hostRow", slot);
    return host_.data() + pageTableIndex(slot, 0, 0, maxPagesPerSeq_);
}

void KvPageTable::markDirty(int32_t slot) {
    uint8_t& d = dirtyRows_[static_cast<size_t>(slot)];
    if (!d) {
        d = 1;
        ++dirtyCount_;
    }
}

void KvPageTable::writeRow(int32_t slot, int32_t const* kPages, int32_t count) {
    int32_t* k = host_.data() + pageTableIndex(slot, 0, 0, maxPagesPerSeq_);
    int32_t* v = host_.data() + pageTableIndex(slot, 1, 0, maxPagesPerSeq_);
    for (int32_t i = 0; i < maxPagesPerSeq_; ++i) {
        int32_t const page = i < count ? kPages[i] : -1;
        k[i] = page;
        v[i] = vPageOf(page, numPages_);
    }
    markDirty(slot);
}

void KvPageTable::setRow(int32_t slot, int32_t const* kPages, int32_t count) {
    checkSlot("setRow", slot);
    if (count < 0 || count > maxPagesPerSeq_)
        fail("setRow", "count " + std::to_string(count) + " is outside [0, " + std::to_string(maxPagesPerSeq_) + "]");
    if (count > 0 && !kPages) fail("setRow", "kPages is null");
    for (int32_t i = 0; i < count; ++i) checkPageId("setRow", kPages[i], mode_ == Mode::kSparseWindow);
    writeRow(slot, kPages, count);
}

void KvPageTable::setRows(std::vector<RowUpdate> const& updates) {
    std::vector<uint8_t> seen(static_cast<size_t>(maxBatch_), 0);
    for (RowUpdate const& u : updates) {
        checkSlot("setRows", u.slot);
        if (seen[static_cast<size_t>(u.slot)]++)
            fail("setRows", "slot " + std::to_string(u.slot) + " is updated twice");
        if (u.kPages.size() > static_cast<size_t>(maxPagesPerSeq_))
            fail("setRows", "slot " + std::to_string(u.slot) + " gets " + std::to_string(u.kPages.size()) +
                                " pages, more than " + std::to_string(maxPagesPerSeq_));
        for (int32_t page : u.kPages) checkPageId("setRows", page, mode_ == Mode::kSparseWindow);
    }
    for (RowUpdate const& u : updates) writeRow(u.slot, u.kPages.data(), static_cast<int32_t>(u.kPages.size()));
}

void KvPageTable::clearRow(int32_t slot) {
    checkSlot("clearRow", slot);
    writeRow(slot, nullptr, 0);
}

void KvPageTable::setIdentity() {
    if (static_cast<int64_t>(maxBatch_) * maxPagesPerSeq_ > numPages_)
        fail("setIdentity",
             "maxBatch * maxPagesPerSeq = " + std::to_string(static_cast<int64_t>(maxBatch_) * maxPagesPerSeq_) +
                 " exceeds numPages " + std::to_string(numPages_));
    std::vector<int32_t> row(static_cast<size_t>(maxPagesPerSeq_));
    for (int32_t b = 0; b < maxBatch_; ++b) {
        for (int32_t i = 0; i < maxPagesPerSeq_; ++i) row[static_cast<size_t>(i)] = b * maxPagesPerSeq_ + i;
        writeRow(b, row.data(), maxPagesPerSeq_);
    }
}

int32_t KvPageTable::liveCount(int32_t slot) const {
    int32_t const* k = host_.data() + pageTableIndex(slot, 0, 0, maxPagesPerSeq_);
    int32_t n = 0;
    while (n < maxPagesPerSeq_ && k[n] != -1) ++n;
    return n;
}

void KvPageTable::setEntry(int32_t slot, int32_t logicalPage, int32_t kPage) {
    checkSlot("setEntry", slot);
    if (logicalPage < 0 || logicalPage >= maxPagesPerSeq_)
        fail("setEntry", "logical page " + std::to_string(logicalPage) + " is outside [0, " +
                             std::to_string(maxPagesPerSeq_) + ")");
    checkPageId("setEntry", kPage, false);
    if (mode_ == Mode::kDense && logicalPage > liveCount(slot))
        fail("setEntry", "dense mode: logical page " + std::to_string(logicalPage) + " would leave a hole after the " +
                             std::to_string(liveCount(slot)) + " live pages of slot " + std::to_string(slot));
    host_[static_cast<size_t>(pageTableIndex(slot, 0, logicalPage, maxPagesPerSeq_))] = kPage;
    host_[static_cast<size_t>(pageTableIndex(slot, 1, logicalPage, maxPagesPerSeq_))] = vPageOf(kPage, numPages_);
    markDirty(slot);
}

void KvPageTable::clearEntry(int32_t slot, int32_t logicalPage) {
    checkSlot("clearEntry", slot);
    if (logicalPage < 0 || logicalPage >= maxPagesPerSeq_)
        fail("clearEntry", "logical page " + std::to_string(logicalPage) + " is outside [0, " +
                               std::to_string(maxPagesPerSeq_) + ")");
    if (mode_ == Mode::kDense) {
        int32_t const live = liveCount(slot);
        if (logicalPage < live - 1)
            fail("clearEntry", "dense mode: clearing logical page " + std::to_string(logicalPage) + " of " +
                                   std::to_string(live) + " live pages would leave a hole (use sparse-window mode)");
    }
    host_[static_cast<size_t>(pageTableIndex(slot, 0, logicalPage, maxPagesPerSeq_))] = -1;
    host_[static_cast<size_t>(pageTableIndex(slot, 1, logicalPage, maxPagesPerSeq_))] = -1;
    markDirty(slot);
}

void KvPageTable::compactRows(int32_t const* oldToNew, int32_t oldBatch, int32_t newBatch) {
    if (oldBatch < 0 || oldBatch > maxBatch_)
        fail("compactRows",
             "oldBatch " + std::to_string(oldBatch) + " is outside [0, " + std::to_string(maxBatch_) + "]");
    if (newBatch < 0 || newBatch > oldBatch)
        fail("compactRows", "newBatch " + std::to_string(newBatch) + " is outside [0, oldBatch]");
    if (oldBatch > 0 && !oldToNew) fail("compactRows", "oldToNew is null");
    std::vector<int32_t> source(static_cast<size_t>(newBatch), -1);
    for (int32_t b = 0; b < oldBatch; ++b) {
        int32_t const to = oldToNew[b];
        if (to == -1) continue;
        if (to < -1 || to >= newBatch)
            fail("compactRows", "oldToNew[" + std::to_string(b) + "] = " + std::to_string(to) + " is outside [-1, " +
                                    std::to_string(newBatch) + ")");
        if (source[static_cast<size_t>(to)] != -1)
            fail("compactRows", "overlapping map: oldToNew[" + std::to_string(b) + "] = " + std::to_string(to) +
                                    " repeats the destination of row " +
                                    std::to_string(source[static_cast<size_t>(to)]));
        source[static_cast<size_t>(to)] = b;
    }
    for (int32_t to = 0; to < newBatch; ++to)
        if (source[static_cast<size_t>(to)] == -1)
            fail("compactRows", "no row goes to " + std::to_string(to) + " (oldToNew must fill [0, newBatch))");
    size_t const rowEntries = 2 * static_cast<size_t>(maxPagesPerSeq_);
    std::copy(host_.begin(), host_.end(), scratch_.begin());
    for (int32_t b = 0; b < maxBatch_; ++b) {
        int32_t const* from = nullptr;
        if (b < newBatch) from = scratch_.data() + static_cast<size_t>(source[static_cast<size_t>(b)]) * rowEntries;
        int32_t* to = host_.data() + static_cast<size_t>(b) * rowEntries;
        bool changed = false;
        for (size_t i = 0; i < rowEntries; ++i) {
            int32_t const value = from ? from[i] : -1;
            if (to[i] != value) {
                to[i] = value;
                changed = true;
            }
        }
        if (changed) markDirty(b);
    }
}

bool KvPageTable::checkInvariants(std::string* why) const {
    auto report = [&](std::string const& message) {
        if (why) *why = message;
        return false;
    };
    for (int32_t b = 0; b < maxBatch_; ++b) {
        int32_t const* k = host_.data() + pageTableIndex(b, 0, 0, maxPagesPerSeq_);
        int32_t const* v = host_.data() + pageTableIndex(b, 1, 0, maxPagesPerSeq_);
        bool sawHole = false;
        for (int32_t i = 0; i < maxPagesPerSeq_; ++i) {
            std::string const at = "slot " + std::to_string(b) + " page " + std::to_string(i);
            if (k[i] < -1 || k[i] >= numPages_) return report(at + ": K id " + std::to_string(k[i]) + " out of range");
            if (v[i] != vPageOf(k[i], numPages_))
                return report(at + ": V id " + std::to_string(v[i]) + " is not K id + numPages");
            if (k[i] == -1) sawHole = true;
            else if (sawHole && mode_ == Mode::kDense) return report(at + ": live page after a -1 in dense mode");
        }
    }
    int32_t dirty = 0;
    for (uint8_t d : dirtyRows_) dirty += d;
    if (dirty != dirtyCount_) return report("dirty row count out of sync");
    return true;
}

int32_t KvPageTable::upload() {
    if (dirtyCount_ == 0) return 0;
    size_t const rowEntries = 2 * static_cast<size_t>(maxPagesPerSeq_);
    int32_t copies = 0;
    int32_t b = 0;
    while (b < maxBatch_) {
        if (!dirtyRows_[static_cast<size_t>(b)]) {
            ++b;
            continue;
        }
        int32_t end = b;
        while (end < maxBatch_ && dirtyRows_[static_cast<size_t>(end)]) dirtyRows_[static_cast<size_t>(end++)] = 0;
        size_t const offset = static_cast<size_t>(b) * rowEntries;
        backend_->upload(static_cast<int32_t*>(device_.data()) + offset, host_.data() + offset,
                         static_cast<size_t>(end - b) * rowEntries * sizeof(int32_t));
        ++copies;
        b = end;
    }
    dirtyCount_ = 0;
    return copies;
}

}  // namespace ctxcache::device
