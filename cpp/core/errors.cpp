// The message of an OutOfMemoryError (include/ctxcache/errors.h): what was being allocated and its bytes; the
// ContractError throwers of include/ctxcache/detail/contract_scope.h. No state; each allocates only the message
// it returns or throws.

#include "ctxcache/errors.h"

#include <cstdio>

#include "ctxcache/detail/contract_scope.h"

namespace ctxcache {

std::string describeAllocationFailure(std::string const& what, size_t bytes) {
    static char const* const kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    char human[32] = "";
    if (bytes >= 1024) {
        double value = static_cast<double>(bytes) / 1024.0;
        size_t unit = 0;
        while (value >= 1024.0 && unit + 1 < sizeof(kUnits) / sizeof(kUnits[0])) {
            value /= 1024.0;
            ++unit;
        }
        std::snprintf(human, sizeof(human), " (%.1f %s)", value, kUnits[unit]);
    }
    return what + ": cannot allocate " + std::to_string(bytes) + " bytes" + human;
}

namespace detail {

void ContractScope::operator()(char const* op, std::string const& why) const {
    std::string message(scope_);
    if (!message.empty()) message += "::";
    throw ContractError(message + op + ": " + why);
}

void ContractScope::operator()(std::string const& why) const { throw ContractError(std::string(scope_) + ": " + why); }

}  // namespace detail

}  // namespace ctxcache
