// ctxcache exceptions. Capacity shortage is never an exception (it is a status, false or nullopt); these are
// for callers that broke a contract and for internal state that failed its own checks.
//
// Every throwing public operation validates before it mutates, so a thrown ContractError leaves the state as it
// was (strong guarantee).
#pragma once

#include <stdexcept>
#include <string>

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

// A long-running call stopped early because its caller asked it to (ReferenceEngine::requestInterrupt): not a
// failure of the call's inputs. The object is left consistent (no live request) and may be used again.
class InterruptedError : public Error {
public:
    using Error::Error;
};

}  // namespace ctxcache
