// The reference model's CPU implementation (the oracle the CUDA kernels are compared to): plain loops over every
// work item of sim_math.h, sequence by sequence. Launch pointers are host memory (the CPU backend's "device").
#include <cstdint>

#include "sim_launchers.h"

namespace ctxcache::sim::detail {

void cpuSimAttention(SimAttentionLaunch const& launch) {
    for (int32_t b = 0; b < launch.count; ++b)
        for (int32_t layer = 0; layer < launch.kv.numLayers; ++layer)
            for (int32_t half = 0; half < 2; ++half)
                for (int32_t e = 0; e < launch.kv.layers[layer].elements; ++e)
                    simAttentionItem(launch.kv, launch.sequences[b], layer, half, e, launch.seed);
}

void cpuSimRecurrent(SimRecurrentLaunch const& launch) {
    for (int32_t b = 0; b < launch.count; ++b)
        for (int32_t g = 0; g < launch.segmentCount; ++g)
            for (int32_t w = 0; w < launch.segments[g].words; ++w)
                simRecurrentItem(launch.segments[g], launch.sequences[b], w, launch.seed);
}

void cpuSimDraft(SimDraftLaunch const& launch) {
    for (int32_t b = 0; b < launch.count; ++b)
        for (int32_t layer = 0; layer < launch.draft.numLayers; ++layer)
            for (int32_t half = 0; half < 2; ++half)
                for (int32_t e = 0; e < launch.draft.layers[layer].elements; ++e)
                    simDraftItem(launch, launch.sequences[b], layer, half, e);
}

void cpuSimSample(SimSampleLaunch const& launch) {
    for (int32_t b = 0; b < launch.count; ++b) {
        uint32_t sum = 0;
        for (int64_t w = 0; w < launch.totalWork; ++w) sum += simSampleTerm(launch, launch.requests[b], w);
        uint32_t const fold = simSampleFold(launch.seed, sum);
        launch.tokens[b] = simSampleToken(fold, launch.vocabSize);
        if (launch.folds) launch.folds[b] = fold;
    }
}

}  // namespace ctxcache::sim::detail
