// The reference engine end to end on the CPU backend: every reuse path of the runtime served through the facade
// with real KV, draft KV and recurrent bytes, compared with a cold run (reuse off) token for token and digest
// for digest, with the prefill starts the reference documents and the metrics counting what happened.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "ctxcache/device/device_backend.h"
#include "ctxcache/errors.h"
#include "ctxcache/sim/reference_engine.h"

namespace ctxcache::sim {
namespace {

std::vector<int32_t> iota(int32_t n, int32_t start = 1000) {
    std::vector<int32_t> v(static_cast<size_t>(n));
    std::iota(v.begin(), v.end(), start);
    return v;
}

std::vector<int32_t> concat(std::vector<int32_t> a, std::vector<int32_t> const& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
}

ReferenceEngineConfig configFor(DeploymentKind kind) {
    ReferenceEngineConfig c;
    c.deployment = kind;
    c.pageSize = 16;
    c.basePages = 256;
    c.maxBatch = 8;
    c.maxPagesPerSequence = 32;
    c.snapshotSlots = 64;
    if (char const* backend = std::getenv("CTXCACHE_TEST_ENGINE_BACKEND"))
        if (std::string(backend) == "cuda") c.backend = device::BackendKind::kCuda;
    return c;
}

// Serves `requests` warm on `engine` and cold on a fresh engine; every output must match.
std::vector<EngineOutput> serveAndCompare(ReferenceEngine& engine, std::vector<EngineRequest> const& requests) {
    std::vector<EngineOutput> warm = engine.serve(requests);
    std::vector<EngineOutput> cold = engine.coldReference(requests);
    EXPECT_EQ(warm.size(), requests.size());
    for (size_t i = 0; i < requests.size(); ++i) {
        EXPECT_EQ(warm[i].generated, cold[i].generated) << "request " << i;
        EXPECT_EQ(warm[i].stateDigest, cold[i].stateDigest) << "request " << i;
        EXPECT_EQ(cold[i].prefillStart, 0) << "request " << i;
        EXPECT_EQ(warm[i].cancelled, cold[i].cancelled) << "request " << i;
        EXPECT_EQ(warm[i].failed, cold[i].failed) << "request " << i;
    }
    engine.checkInvariants();
    return warm;
}

EngineRequest request(std::vector<int32_t> tokens, int32_t maxNew = 8, std::string lora = {}) {
    EngineRequest r;
    r.tokens = std::move(tokens);
    r.maxNewTokens = maxNew;
    r.lora = std::move(lora);
    return r;
}

TEST(ReferenceEngine, VanillaMultiTurnStartsAtTheDecodeEndPublication) {
    ReferenceEngine engine(configFor(DeploymentKind::kAttention));
    std::vector<int32_t> const turn1 = iota(40);
    auto out1 = serveAndCompare(engine, {request(turn1)});
    EXPECT_EQ(out1[0].prefillStart, 0);
    ASSERT_EQ(out1[0].generated.size(), 8u);
    // Turn 2 = turn 1's prompt + its generated tokens + a question. Committed at the end of turn 1 = 40 + 8 - 1
    // = 47 -> 2 full blocks published at decode end -> prefill starts at 32.
    std::vector<int32_t> const turn2 = concat(concat(turn1, out1[0].generated), iota(10, 5000));
    auto out2 = serveAndCompare(engine, {request(turn2)});
    EXPECT_EQ(out2[0].prefillStart, 32);
    runtime::ContextCacheMetrics const m = engine.metrics();
    EXPECT_EQ(m.admittedSequences, 2u);
    EXPECT_EQ(m.hitSequences, 1u);
    EXPECT_EQ(m.reusedTokens, 32u);
    EXPECT_GE(m.committedPublications, 2u);
}

TEST(ReferenceEngine, ExactRepeatRewindsOnePageAndStillMatches) {
    ReferenceEngine engine(configFor(DeploymentKind::kAttention));
    serveAndCompare(engine, {request(iota(32), 1)});
    auto out = serveAndCompare(engine, {request(iota(32), 4)});
    EXPECT_EQ(out[0].prefillStart, 16);
    EXPECT_EQ(engine.metrics().fullInputRewindPlans, 1u);
}

TEST(ReferenceEngine, LoraAndMediaIdentitiesDoNotCross) {
    ReferenceEngine engine(configFor(DeploymentKind::kAttention));
    std::vector<int32_t> const prompt = iota(48);
    serveAndCompare(engine, {request(prompt, 2, "adapter-a")});
    auto other = serveAndCompare(engine, {request(prompt, 2, "adapter-b")});
    EXPECT_EQ(other[0].prefillStart, 0);
    auto same = serveAndCompare(engine, {request(prompt, 2, "adapter-a")});
    EXPECT_EQ(same[0].prefillStart, 32);  // full-input rewind of 3 blocks
    // Media: placeholders 20..27; other pixels share only the block before the image.
    auto withImage = [&](std::vector<uint8_t> pixels) {
        EngineRequest r = request(iota(48, 9000), 2);
        r.media.push_back(runtime::MediaItem{std::move(pixels), 20, 8, 0});
        return r;
    };
    serveAndCompare(engine, {withImage({1, 2, 3})});
    auto otherPixels = serveAndCompare(engine, {withImage({1, 2, 4})});
    EXPECT_EQ(otherPixels[0].prefillStart, 16);
    auto samePixels = serveAndCompare(engine, {withImage({1, 2, 3})});
    EXPECT_EQ(samePixels[0].prefillStart, 32);
    EXPECT_EQ(engine.metrics().mediaAwareSequences, 3u);
}

TEST(ReferenceEngine, HybridRestoresMidPageFromADecodeEndCheckpoint) {
    ReferenceEngine engine(configFor(DeploymentKind::kHybrid));
    std::vector<int32_t> const turn1 = iota(37);
    auto out1 = serveAndCompare(engine, {request(turn1, 6)});
    // Decode-end checkpoint at committed = 37 + 6 - 1 = 42 (mid-page: 2 pages + a partial snapshot of 10 tokens).
    std::vector<int32_t> const turn2 = concat(concat(turn1, out1[0].generated), iota(9, 7000));
    auto out2 = serveAndCompare(engine, {request(turn2, 5)});
    EXPECT_EQ(out2[0].prefillStart, 42);
    runtime::ContextCacheMetrics const m = engine.metrics();
    EXPECT_EQ(m.hybridRestores, 1u);
    EXPECT_GE(m.hybridCaptureSynchronizations, 1u);
    // The prefill-end checkpoint of turn 1 (37) serves a prompt that only shares those 37 tokens.
    auto out3 = serveAndCompare(engine, {request(concat(turn1, iota(5, 8000)), 2)});
    EXPECT_EQ(out3[0].prefillStart, 37);
}

TEST(ReferenceEngine, PureRecurrentRestoresFromCheckpointsWithoutPages) {
    ReferenceEngine engine(configFor(DeploymentKind::kRecurrent));
    std::vector<int32_t> const turn1 = iota(21);
    auto out1 = serveAndCompare(engine, {request(turn1, 4)});
    auto out2 = serveAndCompare(engine, {request(concat(concat(turn1, out1[0].generated), iota(3, 100)), 3)});
    EXPECT_EQ(out2[0].prefillStart, 24);
    EXPECT_EQ(engine.metrics().baseKvPages.capacity, 0);
}

TEST(ReferenceEngine, PureRecurrentTakesZeroBasePagesAndStaysByteExact) {
    // A model without attention layers has no KV page: basePages = 0 builds no pool and serves as before.
    ReferenceEngineConfig c = configFor(DeploymentKind::kRecurrent);
    c.basePages = 0;
    ReferenceEngine engine(c);
    std::vector<int32_t> const turn1 = iota(21);
    auto out1 = serveAndCompare(engine, {request(turn1, 4), request(iota(40, 3000), 5)});
    auto out2 = serveAndCompare(engine, {request(concat(concat(turn1, out1[0].generated), iota(3, 100)), 3)});
    EXPECT_EQ(out2[0].prefillStart, 24);
    runtime::ContextCacheMetrics const m = engine.metrics();
    EXPECT_EQ(m.baseKvPages.capacity, 0);
    EXPECT_EQ(m.hybridRestores, 1u);
    EXPECT_EQ(m.reusedTokens, 24u);
}

TEST(ReferenceEngine, ZeroBasePagesIsRefusedWhereTheModelHasAttention) {
    for (DeploymentKind kind : {DeploymentKind::kAttention, DeploymentKind::kHybrid, DeploymentKind::kEagle}) {
        ReferenceEngineConfig c = configFor(kind);
        c.basePages = 0;
        try {
            ReferenceEngine engine(c);
            ADD_FAILURE() << toString(kind) << ": 0 base pages accepted";
        } catch (ContractError const& e) {
            EXPECT_EQ(std::string(e.what()), std::string("ReferenceEngine: basePages must be positive for the ") +
                                                 toString(kind) +
                                                 " deployment: it has attention layers, whose KV lives in pages (0 "
                                                 "pages is only for the pure-recurrent deployment)");
        }
    }
    ReferenceEngineConfig negative = configFor(DeploymentKind::kRecurrent);
    negative.basePages = -1;
    EXPECT_THROW(ReferenceEngine{negative}, ContractError);
}

TEST(ReferenceEngine, EaglePublishesPairsAndReplaysTheBoundaryPage) {
    ReferenceEngine engine(configFor(DeploymentKind::kEagle));
    std::vector<int32_t> const turn1 = iota(50);
    auto out1 = serveAndCompare(engine, {request(turn1, 6)});
    EXPECT_GE(engine.metrics().specPairPublications, 1u);
    // Turn 2 shares 50 + 6 - 1 = 55 committed tokens: 3 paired blocks; the third is replayed: start 32.
    auto out2 = serveAndCompare(engine, {request(concat(concat(turn1, out1[0].generated), iota(7, 300)), 4)});
    EXPECT_EQ(out2[0].prefillStart, 32);
    EXPECT_EQ(engine.metrics().specFullPageReplays, 1u);
}

TEST(ReferenceEngine, JoinersAreAdmittedInFlightAndMatchCold) {
    ReferenceEngineConfig c = configFor(DeploymentKind::kAttention);
    c.maxBatch = 2;
    ReferenceEngine engine(c);
    std::vector<int32_t> const system = iota(32, 1);
    std::vector<EngineRequest> reqs;
    for (int i = 0; i < 6; ++i) reqs.push_back(request(concat(system, iota(5 + i, 100 * (i + 1))), 2 + 3 * (i % 3)));
    auto out = serveAndCompare(engine, reqs);
    EXPECT_GE(engine.stats().joiners, 3u);
    int joined = 0;
    for (auto const& o : out) joined += o.joined ? 1 : 0;
    EXPECT_GE(joined, 3);
    EXPECT_EQ(out[5].prefillStart, 32);  // the shared system prompt
}

TEST(ReferenceEngine, CompactionOfABatchOfEightKeepsSurvivorsExact) {
    ReferenceEngine engine(configFor(DeploymentKind::kHybrid));
    std::vector<EngineRequest> reqs;
    for (int i = 0; i < 8; ++i) reqs.push_back(request(iota(20 + 3 * i, 50 * i), 1 + (i * 5) % 9));
    serveAndCompare(engine, reqs);
    EXPECT_GE(engine.stats().compactions, 4u);
}

TEST(ReferenceEngine, CancelledSequencesDoNotPublishGeneratedTokens) {
    ReferenceEngine engine(configFor(DeploymentKind::kAttention));
    EngineRequest r = request(iota(30), 20);
    r.cancelAfter = 10;
    auto out = serveAndCompare(engine, {r});
    EXPECT_TRUE(out[0].cancelled);
    EXPECT_EQ(out[0].generated.size(), 10u);
    // Had it been published at decode end, 30 + 10 - 1 = 39 tokens = 2 blocks; only the prefill end (1 block) is.
    auto next = serveAndCompare(engine, {request(concat(concat(iota(30), out[0].generated), iota(4, 77)), 2)});
    EXPECT_EQ(next[0].prefillStart, 16);
}

TEST(ReferenceEngine, FailedSequencesDoNotPublishGeneratedTokens) {
    ReferenceEngine engine(configFor(DeploymentKind::kHybrid));
    EngineRequest r = request(iota(30), 20);
    r.failAfter = 6;
    auto out = serveAndCompare(engine, {r});
    EXPECT_TRUE(out[0].failed);
    EXPECT_EQ(out[0].generated.size(), 6u);
    // Only the prefill-end checkpoint (30) exists: a decode-end one would have been at 35.
    auto next = serveAndCompare(engine, {request(concat(concat(iota(30), out[0].generated), iota(4, 77)), 2)});
    EXPECT_EQ(next[0].prefillStart, 30);
}

TEST(ReferenceEngine, RetractedJoinersAreServedLaterAndMatchCold) {
    ReferenceEngineConfig c = configFor(DeploymentKind::kAttention);
    c.maxBatch = 2;
    ReferenceEngine engine(c);
    std::vector<EngineRequest> reqs;
    for (int i = 0; i < 6; ++i) {
        reqs.push_back(request(concat(iota(20, 1), iota(9 + i, 300 * (i + 1))), 2 + i % 4));
        reqs.back().seatingFailures = i % 2 ? 2 : 0;
    }
    auto out = serveAndCompare(engine, reqs);
    EXPECT_GE(engine.stats().retractions, 2u);
    EXPECT_GE(engine.stats().joiners, 2u);
    std::string why;
    EXPECT_TRUE(engine.drainAndCheckPoolsFull(&why)) << why;
}

TEST(ReferenceEngine, FailedSynchronisationsLoseNothing) {
    for (DeploymentKind kind : {DeploymentKind::kAttention, DeploymentKind::kHybrid, DeploymentKind::kEagle}) {
        ReferenceEngineConfig c = configFor(kind);
        c.syncFailureRate = 0.25;
        c.faultSeed = 7;
        ReferenceEngine engine(c);
        std::vector<EngineRequest> reqs;
        std::vector<int32_t> const system = iota(40, 1);
        for (int i = 0; i < 24; ++i) reqs.push_back(request(concat(system, iota(3 + i % 7, 1000 * i)), 1 + i % 6));
        serveAndCompare(engine, reqs);
        EXPECT_GT(engine.stats().syncFailures, 0u) << toString(kind);
        EXPECT_GT(engine.stats().restarts, 0u) << toString(kind);
        EXPECT_FALSE(engine.coordinator().poisoned());
        std::string why;
        EXPECT_TRUE(engine.drainAndCheckPoolsFull(&why)) << toString(kind) << ": " << why;
    }
}

// A seeded mix: shared system prompts, multi-turn follow-ups, LoRA, media, cancellations, all deployment kinds,
// batches of 1 to 8 (founders and, where supported, joiners): 2,000 requests with no byte difference.
TEST(ReferenceEngine, RandomizedTwoThousandRequestsMatchCold) {
    std::mt19937 rng(2026);
    int total = 0;
    for (DeploymentKind kind :
         {DeploymentKind::kAttention, DeploymentKind::kHybrid, DeploymentKind::kRecurrent, DeploymentKind::kEagle}) {
        ReferenceEngineConfig c = configFor(kind);
        c.maxBatch = 1 + static_cast<int32_t>(rng() % 8);
        c.basePages = 96 + static_cast<int32_t>(rng() % 64);  // small enough to evict
        c.maxRecords = 40;
        c.snapshotSlots = 48;
        c.syncFailureRate = kind == DeploymentKind::kAttention ? 0.02 : 0.0;
        ReferenceEngine engine(c);
        std::vector<std::vector<int32_t>> systems;
        for (int s = 0; s < 5; ++s) systems.push_back(iota(8 + static_cast<int32_t>(rng() % 60), 10000 * (s + 1)));
        std::vector<std::vector<int32_t>> history;  // earlier prompts + outputs to continue
        for (int round = 0; round < 10; ++round) {
            std::vector<EngineRequest> reqs;
            for (int i = 0; i < 50; ++i) {
                EngineRequest r;
                int const shape = static_cast<int>(rng() % 4);
                if (shape == 0 && !history.empty()) {
                    // A follow-up turn of a recent conversation (old ones are long evicted).
                    r.tokens = history[history.size() - 1 - rng() % std::min<size_t>(history.size(), 12)];
                } else {
                    r.tokens = systems[rng() % systems.size()];
                }
                int32_t const extra = 1 + static_cast<int32_t>(rng() % 40);
                for (int32_t k = 0; k < extra; ++k) r.tokens.push_back(static_cast<int32_t>(rng() % 500));
                if (r.tokens.size() > 200) r.tokens.resize(200);
                r.maxNewTokens = 1 + static_cast<int32_t>(rng() % 10);
                if (rng() % 5 == 0) r.lora = rng() % 2 ? "lora-x" : "lora-y";
                if (kind == DeploymentKind::kAttention && rng() % 6 == 0 && r.tokens.size() > 12) {
                    int32_t const first = static_cast<int32_t>(rng() % (r.tokens.size() - 8));
                    r.media.push_back(runtime::MediaItem{{static_cast<uint8_t>(rng() % 3)}, first, 6, 0});
                }
                if (rng() % 10 == 0 && r.maxNewTokens > 2) r.cancelAfter = 1 + static_cast<int32_t>(rng() % 2);
                if (rng() % 12 == 0 && r.maxNewTokens > 2) r.failAfter = 1 + static_cast<int32_t>(rng() % 2);
                if (rng() % 8 == 0) r.seatingFailures = 1;
                reqs.push_back(std::move(r));
            }
            std::vector<EngineOutput> out = serveAndCompare(engine, reqs);
            for (size_t i = 0; i < reqs.size(); ++i)
                if (!out[i].cancelled) history.push_back(concat(reqs[i].tokens, out[i].generated));
            total += static_cast<int>(reqs.size());
        }
        EXPECT_GT(engine.metrics().hitSequences, 10u) << toString(kind);
        EXPECT_GT(engine.metrics().evictedRecords, 0u) << toString(kind);
        std::string why;
        EXPECT_TRUE(engine.drainAndCheckPoolsFull(&why)) << toString(kind) << ": " << why;
    }
    EXPECT_EQ(total, 2000);
}

// The host tier (issue 26) on the attention and EAGLE deployments (EAGLE: slots hold draft pages too, and a
// speculative hit is extended with both): a device small enough to evict every few requests, a tier small enough to
// drop blocks too, both write policies, and failed synchronisations injected (a write or load whose
// synchronisation fails is lost: the block is not in the tier, or the hit ends at the device's). Every request
// matches the cold run byte for byte, and the tier both loaded and dropped blocks.
TEST(ReferenceEngine, RandomizedRequestsWithAHostTierMatchCold) {
    for (DeploymentKind kind : {DeploymentKind::kAttention, DeploymentKind::kEagle})
        for (tier::HostWritePolicy policy : {tier::HostWritePolicy::kWriteBack, tier::HostWritePolicy::kWriteThrough}) {
            SCOPED_TRACE(std::string(toString(kind)) +
                         (policy == tier::HostWritePolicy::kWriteBack ? " back" : " through"));
            std::mt19937 rng(26 + static_cast<int>(policy));
            ReferenceEngineConfig c = configFor(kind);
            // EAGLE with write-back trims records' tails (lru-trim): each trimmed tail is written with the draft
            // page of the block before it, the kept part's last.
            if (kind == DeploymentKind::kEagle && policy == tier::HostWritePolicy::kWriteBack)
                c.evictionPolicy = EvictionPolicy::kRecordLruTrim;
            c.maxBatch = 1 + static_cast<int32_t>(rng() % 4);
            c.basePages = 64;
            c.maxRecords = 40;
            c.hostTierPages = 160;
            c.hostWritePolicy = policy;
            c.syncFailureRate = 0.02;
            ReferenceEngine engine(c);
            std::vector<std::vector<int32_t>> history;
            std::vector<int32_t> const system = iota(40, 50000);
            for (int round = 0; round < 8; ++round) {
                std::vector<EngineRequest> reqs;
                for (int i = 0; i < 40; ++i) {
                    EngineRequest r;
                    if (!history.empty() && rng() % 3 != 0)
                        r.tokens = history[history.size() - 1 - rng() % std::min<size_t>(history.size(), 30)];
                    else r.tokens = system;
                    int32_t const extra = 1 + static_cast<int32_t>(rng() % 40);
                    for (int32_t k = 0; k < extra; ++k) r.tokens.push_back(static_cast<int32_t>(rng() % 500));
                    if (r.tokens.size() > 200) r.tokens.resize(200);
                    r.maxNewTokens = 1 + static_cast<int32_t>(rng() % 10);
                    reqs.push_back(std::move(r));
                }
                std::vector<EngineOutput> out = serveAndCompare(engine, reqs);
                for (size_t i = 0; i < reqs.size(); ++i) history.push_back(concat(reqs[i].tokens, out[i].generated));
            }
            runtime::ContextCacheMetrics const m = engine.metrics();
            EXPECT_GT(m.hostLoadedTokens, 0u);
            EXPECT_GT(m.hostWrittenBlocks, 0u);
            EXPECT_GT(m.hostDroppedBlocks, 0u) << "the tier never had to make room";
            EXPECT_GT(m.hostBytesToDevice, 0u);
            EXPECT_LE(m.hostResidentBlocks, 160u);
            if (c.evictionPolicy == EvictionPolicy::kRecordLruTrim)
                EXPECT_GT(engine.coordinator().manager().metrics().trimmedRecords, 0u);
            std::string why;
            EXPECT_TRUE(engine.drainAndCheckPoolsFull(&why)) << why;
        }
}

// One conversation prefix, then a flood that evicts it from the 32-page device, then the prefix again: without a
// tier it is recomputed; with one it is loaded (prefill starts after it) and the outputs still match cold. On
// attention its six full pages load. On EAGLE the six full blocks are six slots, and slot j holds the draft page of
// block j - 1 (block j's first token completes it), so the six slots load five blocks, base and draft pages.
TEST(ReferenceEngine, AHostTierReusesWhatTheDeviceEvicted) {
    std::vector<int32_t> const prefix = iota(100, 7000);
    std::vector<EngineRequest> reqs{request(prefix, 4)};
    for (int f = 0; f < 6; ++f) reqs.push_back(request(iota(150, 20000 + 1000 * f), 4));
    reqs.push_back(request(concat(prefix, iota(5, 90000)), 4));
    for (auto [kind, loadedTokens] : {std::pair{DeploymentKind::kAttention, 96}, std::pair{DeploymentKind::kEagle, 80}})
        for (int32_t tierPages : {0, 64}) {
            SCOPED_TRACE(std::string(toString(kind)) + ", tier pages " + std::to_string(tierPages));
            ReferenceEngineConfig c = configFor(kind);
            c.basePages = 32;
            c.maxBatch = 1;
            c.hostTierPages = tierPages;
            ReferenceEngine engine(c);
            std::vector<EngineOutput> out;
            for (EngineRequest const& r : reqs) out.push_back(serveAndCompare(engine, {r})[0]);
            if (tierPages == 0) {
                EXPECT_EQ(out.back().prefillStart, 0);
            } else {
                EXPECT_EQ(out.back().prefillStart, loadedTokens);
                EXPECT_EQ(engine.metrics().hostLoadedTokens, static_cast<uint64_t>(loadedTokens));
                EXPECT_GT(engine.metrics().hostBytesToDevice, 0u);
            }
            std::string why;
            EXPECT_TRUE(engine.drainAndCheckPoolsFull(&why)) << why;
        }
}

TEST(ReferenceEngine, MalformedRequestsAreRefusedBeforeServing) {
    ReferenceEngine engine(configFor(DeploymentKind::kAttention));
    EXPECT_THROW(engine.serve({request({})}), ContractError);
    EXPECT_THROW(engine.serve({request(iota(4), 0)}), ContractError);
    EXPECT_THROW(engine.serve({request(iota(16 * 32), 1)}), ContractError);  // beyond the page table
    EngineRequest media = request(iota(8), 1);
    media.media.push_back(runtime::MediaItem{{1}, 6, 4, 0});
    EXPECT_THROW(engine.serve({media}), ContractError);
    EXPECT_EQ(engine.metrics().admittedSequences, 0u);
    ReferenceEngineConfig bad = configFor(DeploymentKind::kAttention);
    bad.pageSize = 0;
    EXPECT_THROW(ReferenceEngine{bad}, ContractError);
}

// ---- a batch that cannot all be seated: waves and preemption ----------------------------------------------

// 48 distinct prompts of 64 tokens with 40 new tokens each: one needs 7 pages, a wave of 32 founders 160 for its
// prompts alone, and the pool holds 40 pages. Before waves the engine retried the batch with joiners that filled
// the pool again and threw every decode step away: it never finished. Now each deployment serves every request
// exactly as cold does, seating halves of the batch and preempting the newest rows when a step cannot grow.
TEST(ReferenceEngine, ABatchThatCannotAllBeSeatedIsServedInWavesByteExact) {
    for (DeploymentKind kind : {DeploymentKind::kAttention, DeploymentKind::kEagle, DeploymentKind::kHybrid}) {
        ReferenceEngineConfig c = configFor(kind);
        c.maxBatch = 32;
        c.basePages = 40;
        c.snapshotSlots = 64;
        c.commitPolicy = runtime::ContextCacheCommitPolicy::kPrefillStateOnly;
        ReferenceEngine engine(c);
        std::vector<EngineRequest> requests;
        for (int32_t i = 0; i < 48; ++i) requests.push_back(request(iota(64, 100000 * (i + 1)), 40));
        // Repeats of earlier prompts: a wave of hits too.
        for (int32_t i = 0; i < 8; ++i) requests.push_back(request(iota(64, 100000 * (i + 1)), 40));
        std::vector<EngineOutput> const out = serveAndCompare(engine, requests);
        for (size_t i = 0; i < out.size(); ++i) {
            EXPECT_EQ(out[i].generated.size(), 40u) << toString(kind) << " request " << i;
            EXPECT_EQ(out[i].attempts, 1) << toString(kind) << " request " << i;
        }
        EngineStats const& st = engine.stats();
        EXPECT_GT(st.capacityRetries, 0u) << toString(kind);  // 32 founders never fit 40 pages
        EXPECT_GT(st.batches, 2u) << toString(kind);
        if (kind == DeploymentKind::kAttention) EXPECT_GT(st.preemptions, 0u) << toString(kind);  // joiners filled it
        std::string why;
        EXPECT_TRUE(engine.drainAndCheckPoolsFull(&why)) << toString(kind) << ": " << why;
    }
}

// A preempted request reports the reuse its first admission found (its recompute hits its own prompt).
TEST(ReferenceEngine, APreemptedRequestReportsItsFirstAdmissionsReuse) {
    ReferenceEngineConfig c = configFor(DeploymentKind::kAttention);
    c.maxBatch = 32;
    c.basePages = 40;
    c.commitPolicy = runtime::ContextCacheCommitPolicy::kPrefillStateOnly;
    ReferenceEngine engine(c);
    std::vector<EngineRequest> requests;
    for (int32_t i = 0; i < 48; ++i) requests.push_back(request(iota(64, 100000 * (i + 1)), 40));
    std::vector<EngineOutput> const out = serveAndCompare(engine, requests);
    ASSERT_GT(engine.stats().preemptions, 0u);
    for (size_t i = 0; i < out.size(); ++i) EXPECT_EQ(out[i].prefillStart, 0) << "request " << i;  // all distinct
}

TEST(ReferenceEngine, AnInterruptStopsTheNextServeAndIsConsumed) {
    ReferenceEngine engine(configFor(DeploymentKind::kAttention));
    engine.requestInterrupt();
    EXPECT_THROW(engine.serve({request(iota(40))}), InterruptedError);
    engine.checkInvariants();  // no live request, every resident slot free
    EXPECT_EQ(engine.serve({request(iota(40))}).size(), 1u);  // consumed: the next serve runs
    engine.requestInterrupt();
    engine.requestInterrupt(false);  // withdrawn
    EXPECT_EQ(engine.serve({request(iota(40))}).size(), 1u);
    engine.requestInterrupt();
    EXPECT_THROW(engine.coldReference({request(iota(40))}), InterruptedError);  // a cold run watches it too
    EXPECT_EQ(engine.serve({request(iota(40))}).size(), 1u);
    std::string why;
    EXPECT_TRUE(engine.drainAndCheckPoolsFull(&why)) << why;
}

// ---- sliding window (bounded-SWA paging) -------------------------------------------------------------------

ReferenceEngineConfig windowedConfig(int32_t window, int32_t pageSize) {
    ReferenceEngineConfig c = configFor(DeploymentKind::kAttention);
    c.reuse = false;
    c.slidingWindow = window;
    c.pageSize = pageSize;
    c.basePages = 256;
    c.maxPagesPerSequence = 64;
    return c;
}

// Prompts shorter than, equal to and longer than the window (chunked prefill), decodes that cross page and window
// boundaries, a cancellation and rows finishing at different steps (compaction): every generated token and every
// retained position's bytes equal the full-history run of the same windowed model.
TEST(ReferenceEngine, SlidingWindowMatchesTheFullHistory) {
    for (auto [window, page] : {std::pair{32, 8}, std::pair{20, 8}, std::pair{7, 4}}) {
        ReferenceEngine engine(windowedConfig(window, page));
        ASSERT_NE(engine.swaManager(), nullptr);
        std::vector<EngineRequest> reqs;
        for (int32_t len : {1, 5, window - 1, window, window + 1, 2 * window + 3, 70, 9})
            reqs.push_back(request(iota(len, 100 * len), 3 + (len * 7) % 60));
        reqs[3].cancelAfter = 4;
        reqs.push_back(request(iota(33, 5), 90));
        std::vector<EngineOutput> const out = serveAndCompare(engine, reqs);
        EXPECT_TRUE(out[3].cancelled);
        int32_t const R = engine.swaManager()->privatePagesPerSequence();
        EXPECT_EQ(R, 2 * ((window + page - 1) / page + 1) + 1);
        EXPECT_GT(engine.peakPagesPerSequence(), 0);
        EXPECT_LE(engine.peakPagesPerSequence(), R) << "window " << window;
        EXPECT_GT(engine.stats().compactions, 0u);
        std::string why;
        EXPECT_TRUE(engine.drainAndCheckPoolsFull(&why)) << why;
        // The window matters: the same requests on a model that reads its whole history generate other tokens.
        ReferenceEngineConfig full = windowedConfig(0, page);
        std::vector<EngineOutput> const unwindowed = ReferenceEngine(full).serve(reqs);
        EXPECT_NE(unwindowed[8].generated, out[8].generated) << "window " << window;
    }
}

// Long decodes stay within the reservation: a window of 32 on pages of 8 holds at most 2 * (4 + 1) + 1 pages.
TEST(ReferenceEngine, SlidingWindowLongDecodeHoldsOnlyItsWindow) {
    ReferenceEngineConfig c = windowedConfig(32, 8);
    c.maxPagesPerSequence = 64;
    c.basePages = 11;  // exactly one reservation: the full history (400+ tokens, 50+ pages) could never fit
    ReferenceEngine engine(c);
    std::vector<EngineRequest> reqs{request(iota(100, 3), 400)};
    std::vector<EngineOutput> const out = engine.serve(reqs);
    EXPECT_LE(engine.peakPagesPerSequence(), 11);
    ReferenceEngineConfig cold = c;
    cold.swaPaging = false;
    cold.basePages = 256;
    std::vector<EngineOutput> const truth = ReferenceEngine(cold).serve(reqs);
    EXPECT_EQ(out[0].generated, truth[0].generated);
    EXPECT_EQ(out[0].stateDigest, truth[0].stateDigest);
    std::string why;
    EXPECT_TRUE(engine.drainAndCheckPoolsFull(&why)) << why;
    engine.checkInvariants();
}

TEST(ReferenceEngine, SlidingWindowFailedSynchronisationsLoseNothing) {
    ReferenceEngineConfig c = windowedConfig(16, 4);
    c.syncFailureRate = 0.2;
    c.faultSeed = 3;
    ReferenceEngine engine(c);
    std::vector<EngineRequest> reqs;
    for (int i = 0; i < 20; ++i) reqs.push_back(request(iota(3 + (i * 11) % 40, 1000 * i), 2 + (i * 5) % 30));
    serveAndCompare(engine, reqs);
    EXPECT_GT(engine.stats().syncFailures, 0u);
    EXPECT_GT(engine.stats().restarts, 0u);
    EXPECT_FALSE(engine.swaManager()->poisoned());
    std::string why;
    EXPECT_TRUE(engine.drainAndCheckPoolsFull(&why)) << why;
}

TEST(ReferenceEngine, SlidingWindowConfigurationIsChecked) {
    ReferenceEngineConfig reuse = windowedConfig(16, 4);
    reuse.reuse = true;
    EXPECT_THROW(ReferenceEngine{reuse}, ContractError);
    ReferenceEngineConfig eagle = windowedConfig(16, 4);
    eagle.deployment = DeploymentKind::kEagle;
    EXPECT_THROW(ReferenceEngine{eagle}, ContractError);
    ReferenceEngineConfig wide = windowedConfig(16 * 64, 16);  // a window wider than the table
    EXPECT_THROW(ReferenceEngine{wide}, ContractError);
    ReferenceEngineConfig negative = windowedConfig(-1, 4);
    EXPECT_THROW(ReferenceEngine{negative}, ContractError);
    ReferenceEngine engine(windowedConfig(16, 4));
    EXPECT_THROW(engine.coordinator(), ContractError);
}

// ---- Hybrid+MTP -------------------------------------------------------------------------------------------

ReferenceEngineConfig mtpConfig() {
    ReferenceEngineConfig c = configFor(DeploymentKind::kHybrid);
    c.speculative = SpeculativeKind::kMtp;
    c.commitPolicy = runtime::ContextCacheCommitPolicy::kPrefillStateOnly;
    return c;
}

// Mid-page (37), page-aligned (32: its whole last base page is in the snapshot) and one past a page (33: no
// partial draft token): the next turn starts at the checkpoint and every byte and token equals the cold run's.
TEST(ReferenceEngine, HybridMtpNextTurnRestoresTheCheckpointAndMatchesCold) {
    for (int32_t n : {37, 32, 33}) {
        ReferenceEngine engine(mtpConfig());
        std::vector<int32_t> const turn1 = iota(n);
        auto out1 = serveAndCompare(engine, {request(turn1, 6)});
        EXPECT_EQ(out1[0].prefillStart, 0);
        std::vector<int32_t> const turn2 = concat(concat(turn1, out1[0].generated), iota(9, 7000));
        auto out2 = serveAndCompare(engine, {request(turn2, 5)});
        EXPECT_EQ(out2[0].prefillStart, n) << "n = " << n;
        runtime::ContextCacheMetrics const m = engine.metrics();
        EXPECT_EQ(m.hybridRestores, 1u) << "n = " << n;
        EXPECT_EQ(m.committedPublications, 2u) << "n = " << n;
        EXPECT_EQ(m.specPairPublications, 2u) << "n = " << n;
        // The same first turn again is one token short of reusing itself (its boundary token is private)...
        auto again = serveAndCompare(engine, {request(turn1, 3)});
        EXPECT_EQ(again[0].prefillStart, 0) << "n = " << n;
        // ...and a different continuation of it starts at the checkpoint too.
        auto out3 = serveAndCompare(engine, {request(concat(turn1, iota(4, 9000)), 2)});
        EXPECT_EQ(out3[0].prefillStart, n) << "n = " << n;
        std::string why;
        EXPECT_TRUE(engine.drainAndCheckPoolsFull(&why)) << why;
    }
}

// Two snapshot slots for three interleaved conversations: checkpoints are evicted between turns (with their
// paired pages and both slots) and every turn, hit or miss, equals the cold run.
TEST(ReferenceEngine, HybridMtpUnderEvictionPressureMatchesCold) {
    ReferenceEngineConfig c = mtpConfig();
    c.snapshotSlots = 2;
    ReferenceEngine engine(c);
    std::vector<std::vector<int32_t>> conversations = {iota(20, 1), iota(27, 5000), iota(16, 9000)};
    uint64_t hits = 0, misses = 0;
    int turn = 0;
    for (size_t k : {0, 1, 0, 2, 0, 1, 2, 0, 1, 1, 2, 0}) {
        bool const continued = conversations[k].size() > 27;  // not its first turn
        auto out = serveAndCompare(engine, {request(conversations[k], 3)});
        if (out[0].prefillStart > 0) ++hits;
        else if (continued) ++misses;
        conversations[k] = concat(concat(conversations[k], out[0].generated), iota(5, 100 * ++turn + 7));
    }
    EXPECT_GT(hits, 0u);
    EXPECT_GT(misses, 0u);  // a follow-up turn whose checkpoint was evicted in between
    EXPECT_GT(engine.metrics().evictedRecords, 0u);
    EXPECT_EQ(engine.metrics().hybridRestores, hits);
    std::string why;
    EXPECT_TRUE(engine.drainAndCheckPoolsFull(&why)) << why;
}

TEST(ReferenceEngine, HybridMtpFailedSynchronisationsLoseNothing) {
    ReferenceEngineConfig c = mtpConfig();
    c.syncFailureRate = 0.25;
    c.faultSeed = 11;
    ReferenceEngine engine(c);
    std::vector<EngineRequest> reqs;
    std::vector<int32_t> const system = iota(40, 1);
    for (int i = 0; i < 16; ++i) reqs.push_back(request(concat(system, iota(3 + i % 7, 1000 * i)), 1 + i % 4));
    serveAndCompare(engine, reqs);
    EXPECT_GT(engine.stats().syncFailures, 0u);
    EXPECT_FALSE(engine.coordinator().poisoned());
    std::string why;
    EXPECT_TRUE(engine.drainAndCheckPoolsFull(&why)) << why;
}

TEST(ReferenceEngine, HybridMtpConfigurationIsChecked) {
    ReferenceEngineConfig attention = mtpConfig();
    attention.deployment = DeploymentKind::kAttention;
    EXPECT_THROW(ReferenceEngine{attention}, ContractError);
    ReferenceEngineConfig decodeEnd = mtpConfig();
    decodeEnd.commitPolicy = runtime::ContextCacheCommitPolicy::kIncludingGeneratedTokens;
    EXPECT_THROW(ReferenceEngine{decodeEnd}, ContractError);
    // Media are refused (text-only), before anything is held.
    ReferenceEngine engine(mtpConfig());
    EngineRequest r = request(iota(20), 2);
    r.media.push_back(runtime::MediaItem{{1, 2, 3}, 4, 3, 0});
    EXPECT_THROW(engine.serve({r}), ContractError);
}

// ---- retention (issue 29) ---------------------------------------------------------------------------------

// A 32-token system prompt at priority 90 (a retention range on each request that carries it) outlives a flood
// of default requests that needs two evictions, byte-exact; under plain LRU (no spec) it is the first evicted.
// Each request's arrival time drives the retention clock as it is seated.
TEST(ReferenceEngine, RetainedSystemPromptOutlivesAFloodByteExact) {
    std::vector<int32_t> const system = iota(32, 100);
    for (bool retain : {true, false}) {
        SCOPED_TRACE(retain ? "priority 90" : "plain LRU");
        ReferenceEngineConfig c = configFor(DeploymentKind::kAttention);
        c.basePages = 16;
        c.maxBatch = 1;
        c.commitPolicy = runtime::ContextCacheCommitPolicy::kPrefillStateOnly;
        ReferenceEngine engine(c);
        std::vector<EngineRequest> requests;
        auto add = [&](std::vector<int32_t> tokens, bool system) {
            EngineRequest r = request(std::move(tokens));
            if (system && retain) r.retention.ranges.push_back({0, 32, 90, kNoRetentionDuration});
            r.arrivalNs = 1000 * static_cast<int64_t>(requests.size() + 1);
            requests.push_back(std::move(r));
        };
        add(concat(system, iota(8, 7000)), true);
        // 40 prompt tokens + 8 new: 4 pages while served, a 2-page record after: the 7th and 8th must evict.
        for (int32_t i = 0; i < 8; ++i) add(iota(40, 10000 + 100 * i), false);
        add(concat(system, iota(8, 8000)), true);
        std::vector<EngineOutput> const out = serveAndCompare(engine, requests);
        EXPECT_EQ(out.back().prefillStart, retain ? 32 : 0);
        runtime::ContextCacheMetrics const m = engine.metrics();
        EXPECT_EQ(m.evictedRecords, retain ? 2u : 3u);  // plain LRU also evicts the system prompt's record
        ContextCacheManager const& manager = engine.coordinator().manager();
        EXPECT_EQ(manager.retentionMetrics().evictedRecordsByPriority[kDefaultRetentionPriority], retain ? 2u : 3u);
        EXPECT_TRUE(manager.retentionClockDriven());
        EXPECT_EQ(manager.retentionTime(), 10000);  // the last request's arrival
        engine.setRetentionTime(20000);
        EXPECT_THROW(engine.setRetentionTime(19999), ContractError);
    }
}

// Joiners carry their spec too: two founders (maxBatch 2), then two requests join in flight; each publishes its
// prompt with blocks 0-1 (the shared 32 tokens) at a priority of its own, so every record ranks at its request's.
TEST(ReferenceEngine, JoinersCarryTheirRetentionSpecs) {
    ReferenceEngineConfig c = configFor(DeploymentKind::kAttention);
    c.maxBatch = 2;
    c.commitPolicy = runtime::ContextCacheCommitPolicy::kPrefillStateOnly;
    ReferenceEngine engine(c);
    std::vector<int32_t> const system = iota(32, 1);
    std::vector<EngineRequest> reqs;
    for (int32_t i = 0; i < 4; ++i) {
        reqs.push_back(request(concat(system, iota(17, 100 * (i + 1))), i == 0 ? 12 : 2));
        reqs.back().retention.ranges.push_back({32, kRetentionOpenEnd, 60 + i, kNoRetentionDuration});
    }
    std::vector<EngineOutput> const out = serveAndCompare(engine, reqs);
    EXPECT_FALSE(out[0].joined);
    EXPECT_TRUE(out[2].joined && out[3].joined);
    ContextCacheManager const& m = engine.coordinator().manager();
    std::vector<int32_t> priorities;
    for (RecordId id : m.records().lruToMru()) priorities.push_back(m.recordPriority(id));
    std::sort(priorities.begin(), priorities.end());
    // 49 tokens: 3 full blocks, the third (tokens 32..47) in each request's own range [32, 49).
    EXPECT_EQ(priorities, (std::vector<int32_t>{60, 61, 62, 63}));
}

TEST(ReferenceEngine, BadRetentionSpecIsRefusedBeforeServing) {
    ReferenceEngine engine(configFor(DeploymentKind::kAttention));
    EngineRequest bad = request(iota(20), 2);
    bad.retention.ranges.push_back({0, 16, 101, kNoRetentionDuration});
    EXPECT_THROW(engine.serve({request(iota(20, 50), 2), bad}), ContractError);
    EXPECT_EQ(engine.metrics().admittedSequences, 0u);
    EXPECT_EQ(engine.stats().batches, 0u);
}

}  // namespace
}  // namespace ctxcache::sim
