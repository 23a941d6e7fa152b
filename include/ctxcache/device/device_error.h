// Exceptions of the device layer, beside ctxcache::ContractError (bad geometry, out-of-range ids, invalid
// compaction maps, wrong dtypes), which the device layer throws like the core does.
//
// A throwing device-layer operation validates before it touches host or device state, so a ContractError
// leaves everything as it was. A DeviceError may leave device memory partially written (the failed work was
// already queued); the objects stay usable for destruction.
#pragma once

#include <string>

#include "ctxcache/errors.h"

namespace ctxcache::device {

// The CUDA runtime reported a failure (the message holds the call and cudaGetErrorString).
class DeviceError : public Error {
public:
    using Error::Error;
};

// External memory that cannot hold the object built over it: a null pointer, a misaligned one, fewer bytes
// than the object's footprint, or memory the backend cannot use. Thrown before anything changes.
class ExternalMemoryError : public ContractError {
public:
    using ContractError::ContractError;
};

// A backend kind that cannot be used here: CUDA requested but not compiled in, or no device visible.
class BackendUnavailableError : public Error {
public:
    using Error::Error;
};

}  // namespace ctxcache::device
