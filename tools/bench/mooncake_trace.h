// The public Mooncake trace format (one JSON object per line: timestamp, input_length, output_length, hash_ids),
// read strictly for the benchmarks in tools/bench: every field present, integers only, hash_ids covering
// input_length (each hash id names one 512-token block). Requests come back stably sorted by timestamp.
// Errors: std::runtime_error naming the line and what is wrong; the caller reports it and exits.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace bench {

constexpr int32_t kTraceBlock = 512;  // tokens per trace hash id

struct Request {
    int64_t timestamp = 0;
    int32_t inputLength = 0;
    int32_t outputLength = 0;
    std::vector<uint64_t> hashIds;
};

class LineParser {
public:
    LineParser(std::string const& line, size_t lineNo) : s_(line), lineNo_(lineNo) {}

    Request parse() {
        Request r;
        bool seen[4] = {};
        expect('{');
        skipSpace();
        if (peek() == '}') throw std::runtime_error(where("empty object"));
        do {
            std::string const key = string();
            expect(':');
            if (key == "timestamp") r.timestamp = integer(), seen[0] = true;
            else if (key == "input_length") r.inputLength = static_cast<int32_t>(integer()), seen[1] = true;
            else if (key == "output_length") r.outputLength = static_cast<int32_t>(integer()), seen[2] = true;
            else if (key == "hash_ids") {
                expect('[');
                skipSpace();
                if (peek() == ']') ++i_;
                else do {
                        int64_t const id = integer();
                        if (id < 0) throw std::runtime_error(where("negative hash id"));
                        r.hashIds.push_back(static_cast<uint64_t>(id));
                    } while (another(']'));
                seen[3] = true;
            } else {
                throw std::runtime_error(where("unknown key \"" + key + "\""));
            }
        } while (another('}'));
        if (!(seen[0] && seen[1] && seen[2] && seen[3])) throw std::runtime_error(where("missing field"));
        if (r.inputLength < 0 || r.outputLength < 0) throw std::runtime_error(where("negative length"));
        if (static_cast<int64_t>(r.hashIds.size()) * kTraceBlock < r.inputLength)
            throw std::runtime_error(where("hash_ids do not cover input_length"));
        return r;
    }

private:
    std::string where(std::string const& why) const { return "trace line " + std::to_string(lineNo_) + ": " + why; }
    void skipSpace() {
        while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\r' || s_[i_] == '\n')) ++i_;
    }
    char peek() {
        skipSpace();
        return i_ < s_.size() ? s_[i_] : '\0';
    }
    void expect(char c) {
        if (peek() != c) throw std::runtime_error(where(std::string("expected '") + c + "'"));
        ++i_;
    }
    // After a member of an array or object: true on ',' (another member follows), false on `close` (consumed).
    bool another(char close) {
        if (peek() == ',') {
            ++i_;
            return true;
        }
        expect(close);
        return false;
    }
    std::string string() {
        expect('"');
        size_t const end = s_.find('"', i_);
        if (end == std::string::npos) throw std::runtime_error(where("unterminated string"));
        std::string out = s_.substr(i_, end - i_);
        i_ = end + 1;
        return out;
    }
    int64_t integer() {
        skipSpace();
        bool negative = false;
        if (i_ < s_.size() && s_[i_] == '-') negative = true, ++i_;
        if (i_ >= s_.size() || s_[i_] < '0' || s_[i_] > '9') throw std::runtime_error(where("expected an integer"));
        int64_t v = 0;
        while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') v = v * 10 + (s_[i_++] - '0');
        if (i_ < s_.size() && (s_[i_] == '.' || s_[i_] == 'e' || s_[i_] == 'E'))
            throw std::runtime_error(where("expected an integer"));
        return negative ? -v : v;
    }

    std::string const& s_;
    size_t lineNo_;
    size_t i_ = 0;
};

inline std::vector<Request> loadTrace(std::string const& path, int64_t limit) {
    std::ifstream in(path);
    if (!in) throw std::runtime_error("cannot open trace " + path);
    std::vector<Request> requests;
    std::string line;
    size_t lineNo = 0;
    while ((limit < 0 || static_cast<int64_t>(requests.size()) < limit) && std::getline(in, line)) {
        ++lineNo;
        if (line.find_first_not_of(" \t\r\n") == std::string::npos) continue;
        requests.push_back(LineParser(line, lineNo).parse());
    }
    std::stable_sort(requests.begin(), requests.end(),
                     [](Request const& a, Request const& b) { return a.timestamp < b.timestamp; });
    return requests;
}

}  // namespace bench
