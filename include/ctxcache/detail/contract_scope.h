// The error helpers the library's implementation files share, written once: str(), the decimal text of an
// integer for a message, and ContractScope, a thrower of ContractError whose message names the class and the
// operation whose contract the caller broke. Each file declares its own thrower,
//     constexpr detail::ContractScope contract{"ClassName"};
// then contract("op", why) throws ContractError("ClassName::op: why") and contract(why) throws
// ContractError("ClassName: why"); an empty scope gives "op: why" (messages that name the operation alone).
// Internal to the library, not API (ctxcache::detail). Threading: no state; callable from any thread.
#pragma once

#include <cstdint>
#include <string>

namespace ctxcache::detail {

inline std::string str(int64_t v) { return std::to_string(v); }

class ContractScope {
public:
    explicit constexpr ContractScope(char const* scope) noexcept : scope_(scope) {}

    // ContractError("<scope>::<op>: <why>"), or "<op>: <why>" when the scope is empty.
    [[noreturn]] void operator()(char const* op, std::string const& why) const;
    // ContractError("<scope>: <why>").
    [[noreturn]] void operator()(std::string const& why) const;

private:
    char const* scope_;
};

}  // namespace ctxcache::detail
