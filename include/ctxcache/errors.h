// ctxcache exceptions. Capacity shortage is never an exception (it is a status, false or nullopt); these are
// for callers that broke a contract, for internal state that failed its own checks, and for memory the host
// cannot give (OutOfMemoryError: a std::bad_alloc that says what was being allocated and how many bytes).
//
// Every throwing public operation validates before it mutates, so a thrown ContractError leaves the state as it
// was (strong guarantee).
#pragma once

#include <cstddef>
#include <new>
#include <stdexcept>
#include <string>
#include <utility>

namespace ctxcache {

// Base of every exception ctxcache throws on purpose.
class Error : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// The caller broke a documented contract: an argument out of range, a lease of the wrong kind, hashes that no
// longer describe the acquired prefix, an id that does not exist. The message names the argument and the call.
class ContractError : public Error {
public:
    using Error::Error;
};

// checkInvariants() found the state inconsistent. Always a ctxcache bug or memory corruption, never the caller's.
class InvariantError : public Error {
public:
    using Error::Error;
};

// A host allocation failed. A std::bad_alloc (so every handler of one still applies, and the C ABI answers
// CTXC_E_NO_MEMORY) whose message names what was being allocated and the bytes it needed.
class OutOfMemoryError : public std::bad_alloc {
public:
    explicit OutOfMemoryError(std::string message) : message_(std::move(message)) {}
    char const* what() const noexcept override { return message_.c_str(); }

private:
    std::string message_;
};

// "<what>: cannot allocate <bytes> bytes (<human size>)": the message of an OutOfMemoryError.
std::string describeAllocationFailure(std::string const& what, size_t bytes);

// A long-running call stopped early because its caller asked it to (ReferenceEngine::requestInterrupt): not a
// failure of the call's inputs. The object is left consistent (no live request) and may be used again.
class InterruptedError : public Error {
public:
    using Error::Error;
};

}  // namespace ctxcache
