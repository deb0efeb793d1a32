// Model-free driver for upstream llama.cpp's common/ngram-cache.cpp (lookupkit's side-by-side benchmark).
//
// llama-lookup-create and llama-lookup-stats need a model only to tokenize; llama_token is int32, so
// this program runs their two loops on raw little-endian int32 token files instead, calling
// llama.cpp's own common_ngram_cache_{update,draft,merge,save,load} unchanged:
//
//   driver create TOKENS.i32 OUT.lcs
//       2-gram update over the whole stream (as lookup-create), saved with common_ngram_cache_save.
//   driver stats TOKENS.i32 N_CTX N_DRAFT [LCS|-] [LCD|-]
//       the lookup-stats replay: chunks of N_CTX tokens, draft + accept + one sampled token,
//       context cache merged into the dynamic cache after each chunk.
//
// Each prints one JSON line on stdout. Differences from the real tools, all outside the measured code:
// N_CTX is used as given (lookup-stats pads -c up to a multiple of 32), a missing LCD file is an
// error (lookup-stats silently ignores it), and negative token ids are rejected (-1 is the padding).
// Bad input: one line on stderr starting with "error:" and exit 2; a llama.cpp assertion exits 3.

#include "ngram-cache.h"

#include <sys/resource.h>

#include <chrono>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <new>
#include <string>
#include <vector>

// The two ggml symbols ngram-cache.cpp links against (GGML_ASSERT and the progress ETA); ggml itself
// is not built.
extern "C" void ggml_abort(const char * file, int line, const char * fmt, ...) {
    std::fprintf(stderr, "error: llama.cpp assertion at %s:%d: ", file, line);
    va_list args;
    va_start(args, fmt);
    std::vfprintf(stderr, fmt, args);
    va_end(args);
    std::fputc('\n', stderr);
    std::exit(3);
}

extern "C" int64_t ggml_time_ms(void) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
        std::chrono::steady_clock::now().time_since_epoch()).count();
}

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
    return std::chrono::duration<double>(Clock::now() - start).count();
}

[[noreturn]] void die(const std::string & message) {
    std::fprintf(stderr, "error: %s\n", message.c_str());
    std::exit(2);
}

// Peak RSS of this program's own address space: VmHWM. getrusage's ru_maxrss is not that: exec keeps
// the spawning process's peak (a Python parent holding 2 GB makes every child report 2 GB).
long peak_rss_kb() {
    std::ifstream status("/proc/self/status");
    std::string line;
    while (std::getline(status, line)) {
        if (line.rfind("VmHWM:", 0) == 0) {
            return std::strtol(line.c_str() + 6, nullptr, 10);
        }
    }
    struct rusage usage;  // no procfs: the best there is (kilobytes on Linux)
    getrusage(RUSAGE_SELF, &usage);
    return usage.ru_maxrss;
}

std::vector<llama_token> read_tokens(const std::string & path) {
    std::ifstream in(path, std::ios::binary | std::ios::ate);
    if (!in) {
        die("cannot open token file " + path);
    }
    const std::streamoff n_bytes = in.tellg();
    if (n_bytes % (std::streamoff) sizeof(llama_token) != 0) {
        die(path + " is not a whole number of int32 token ids (" + std::to_string(n_bytes) + " bytes)");
    }
    std::vector<llama_token> tokens(n_bytes / sizeof(llama_token));
    in.seekg(0);
    if (!in.read(reinterpret_cast<char *>(tokens.data()), n_bytes)) {
        die("cannot read token file " + path);
    }
    for (size_t i = 0; i < tokens.size(); ++i) {
        if (tokens[i] < 0) {
            die(path + ": negative token id " + std::to_string(tokens[i]) + " at index " + std::to_string(i));
        }
    }
    return tokens;
}

int parse_positive(const char * text, const char * what) {
    char * end = nullptr;
    const long value = std::strtol(text, &end, 10);
    if (end == text || *end != '\0' || value < 1 || value > (1L << 30)) {
        die(std::string(what) + " must be a positive integer, got '" + text + "'");
    }
    return (int) value;
}

// The file common_ngram_cache_save must have written; it checks no stream state itself.
uint64_t expected_file_bytes(const common_ngram_cache & cache, uint64_t & n_pairs) {
    n_pairs = 0;
    for (const auto & item : cache) {
        n_pairs += item.second.size();
    }
    return cache.size() * (sizeof(common_ngram) + sizeof(int32_t)) + n_pairs * 2 * sizeof(int32_t);
}

common_ngram_cache load_cache(const std::string & path) {
    try {
        return common_ngram_cache_load(path);
    } catch (const std::ios_base::failure &) {
        die("cannot open cache file " + path);
    }
}

int cmd_create(const std::string & tokens_path, const std::string & out_path) {
    std::vector<llama_token> tokens = read_tokens(tokens_path);
    if (tokens.size() > (size_t) INT32_MAX) {
        die("more than 2^31-1 tokens: llama.cpp's update takes an int count");
    }

    const Clock::time_point t_start = Clock::now();
    common_ngram_cache cache;
    common_ngram_cache_update(cache, LLAMA_NGRAM_STATIC, LLAMA_NGRAM_STATIC, tokens, (int) tokens.size(), true);
    const double update_s = seconds_since(t_start);

    const Clock::time_point t_save = Clock::now();
    common_ngram_cache_save(cache, out_path);
    const double save_s = seconds_since(t_save);

    uint64_t n_pairs = 0;
    const uint64_t want = expected_file_bytes(cache, n_pairs);
    std::ifstream written(out_path, std::ios::binary | std::ios::ate);
    if (!written || (uint64_t) written.tellg() != want) {
        die("could not write " + out_path + " completely (" + std::to_string(want) + " bytes expected)");
    }

    std::printf("{\"cmd\": \"create\", \"n_tokens\": %zu, \"n_ngrams\": %zu, \"n_pairs\": %llu, "
                "\"file_bytes\": %llu, \"seconds\": %.6f, \"update_s\": %.6f, \"save_s\": %.6f, "
                "\"peak_rss_kb\": %ld}\n",
                tokens.size(), cache.size(), (unsigned long long) n_pairs, (unsigned long long) want,
                update_s + save_s, update_s, save_s, peak_rss_kb());
    return 0;
}

struct Replay {
    common_ngram_cache context;
    common_ngram_cache dynamic;
    common_ngram_cache statik;
    int64_t n_drafted = 0;
    int64_t n_accept = 0;
    Clock::duration t_draft{0};  // drafting and context updates, as lookup-stats' t_draft

    void append(std::vector<llama_token> & out, llama_token token) {
        out.push_back(token);
        const Clock::time_point t = Clock::now();
        common_ngram_cache_update(context, LLAMA_NGRAM_MIN, LLAMA_NGRAM_MAX, out, 1, false);
        t_draft += Clock::now() - t;
    }

    // One chunk as one simulated generation with known tokens; the context cache is empty on entry.
    void chunk(const std::vector<llama_token> & truth, int n_draft) {
        const size_t n_ctx = truth.size();
        std::vector<llama_token> out;
        out.push_back(truth[0]);
        while (out.size() < n_ctx) {
            std::vector<llama_token> draft;  // built like lookup-stats': its heap neighbours are read (UB)
            draft.push_back(out.back());
            const Clock::time_point t = Clock::now();
            common_ngram_cache_draft(out, draft, n_draft, LLAMA_NGRAM_MIN, LLAMA_NGRAM_MAX, context, dynamic, statik);
            t_draft += Clock::now() - t;
            n_drafted += (int64_t) draft.size() - 1;

            for (size_t j = 1; j < draft.size() && out.size() < n_ctx && draft[j] == truth[out.size()]; ++j) {
                ++n_accept;
                append(out, draft[j]);
            }
            if (out.size() < n_ctx) {
                append(out, truth[out.size()]);  // the token the target model would have sampled
            }
        }
        common_ngram_cache_merge(dynamic, context);
        context.clear();
    }
};

int cmd_stats(const std::string & tokens_path, int n_ctx, int n_draft, const std::string & lcs, const std::string & lcd) {
    const std::vector<llama_token> tokens = read_tokens(tokens_path);
    const int64_t n_input = (int64_t) tokens.size();

    Replay replay;
    const Clock::time_point t_load = Clock::now();  // lookup-stats' t_draft_flat: both loads
    if (lcs != "-") {
        replay.statik = load_cache(lcs);
    }
    if (lcd != "-") {
        replay.dynamic = load_cache(lcd);
    }
    const double load_ms = seconds_since(t_load) * 1e3;

    for (int64_t i_start = 0; i_start + n_ctx < n_input; i_start += n_ctx) {
        const std::vector<llama_token> truth(tokens.begin() + i_start, tokens.begin() + i_start + n_ctx);
        replay.chunk(truth, n_draft);
    }

    const double draft_ms = std::chrono::duration<double, std::milli>(replay.t_draft).count();
    std::printf("{\"cmd\": \"stats\", \"n_tokens\": %lld, \"n_ctx\": %d, \"n_draft\": %d, \"n_predict\": %lld, "
                "\"n_drafted\": %lld, \"n_accept\": %lld, \"t_load_ms\": %.6f, \"t_draft_ms\": %.6f, "
                "\"us_per_drafted_token\": ",
                (long long) n_input, n_ctx, n_draft, (long long) (n_input - n_input % n_ctx),
                (long long) replay.n_drafted, (long long) replay.n_accept, load_ms, draft_ms);
    if (replay.n_drafted > 0) {
        std::printf("%.4f", draft_ms * 1e3 / (double) replay.n_drafted);
    } else {
        std::printf("null");
    }
    std::printf(", \"static_ngrams\": %zu, \"peak_rss_kb\": %ld}\n", replay.statik.size(), peak_rss_kb());
    return 0;
}

void usage() {
    std::fprintf(stderr,
                 "usage: driver create TOKENS.i32 OUT.lcs\n"
                 "       driver stats TOKENS.i32 N_CTX N_DRAFT [LCS|-] [LCD|-]\n");
}

}  // namespace

int main(int argc, char ** argv) {
    const std::string cmd = argc > 1 ? argv[1] : "";
    try {
        if (cmd == "create" && argc == 4) {
            return cmd_create(argv[2], argv[3]);
        }
        if (cmd == "stats" && argc >= 5 && argc <= 7) {
            return cmd_stats(argv[2], parse_positive(argv[3], "N_CTX"), parse_positive(argv[4], "N_DRAFT"),
                             argc > 5 ? argv[5] : "-", argc > 6 ? argv[6] : "-");
        }
    } catch (const std::bad_alloc &) {
        die("out of memory");
    }
    usage();
    return 2;
}
