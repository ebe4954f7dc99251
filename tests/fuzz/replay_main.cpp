// A main() for the fuzz entry points outside libFuzzer: replays every file under the given
// files or directories (sorted, recursively) once, and fails if there was nothing to replay.
// With `--mutate-seconds=N` first, it then feeds mutations of those inputs for N seconds (a
// bounded run for CI where libFuzzer cannot link: random byte edits and splices from a fixed seed,
// not coverage-guided; AUTOCASTGEN_FUZZ_SEED changes the seed).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

// One to four random edits of `bytes`, sometimes splicing in part of `other`.
std::string mutate(std::string bytes, const std::string& other, std::mt19937_64& rng) {
  auto pick = [&](size_t n) { return n == 0 ? size_t{0} : static_cast<size_t>(rng() % n); };
  for (size_t edits = 1 + pick(4); edits > 0; --edits) {
    const size_t at = pick(bytes.size() + 1);
    switch (pick(6)) {
      case 0: if (at < bytes.size()) bytes[at] = static_cast<char>(bytes[at] ^ (1 << pick(8))); break;
      case 1: bytes.insert(at, 1, static_cast<char>(pick(256))); break;
      case 2: bytes.erase(at, pick(8)); break;
      case 3: bytes.insert(at, bytes.substr(pick(bytes.size() + 1), pick(16))); break;
      case 4: bytes.insert(at, other.substr(pick(other.size() + 1), pick(64))); break;
      default: bytes.insert(at, 1, "\x1f\n[{:\"\\\0"[pick(9)]); break;
    }
  }
  return bytes;
}

void run(const std::string& bytes) {
  LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::filesystem::path> inputs;
  long mutate_seconds = 0;
  if (argc > 1 && std::string(argv[1]).rfind("--mutate-seconds=", 0) == 0) {
    mutate_seconds = std::atol(argv[1] + 17);
    --argc;
    ++argv;
  }
  for (int i = 1; i < argc; ++i) {
    const std::filesystem::path path = argv[i];
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec)) {
      for (const auto& entry : std::filesystem::recursive_directory_iterator(path))
        if (entry.is_regular_file() && entry.path().filename().string().front() != '.') inputs.push_back(entry.path());
    } else if (std::filesystem::is_regular_file(path, ec)) {
      inputs.push_back(path);
    } else {
      std::printf("(no %s)\n", path.c_str());
    }
  }
  std::sort(inputs.begin(), inputs.end());
  std::vector<std::string> corpus;
  for (const auto& path : inputs) {
    std::ifstream in(path, std::ios::binary);
    corpus.emplace_back((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::printf("%s\n", path.c_str());
    std::fflush(stdout);
    run(corpus.back());
  }
  std::printf("replayed %zu inputs\n", inputs.size());
  if (inputs.empty()) return 1;
  if (mutate_seconds > 0) {
    const char* seed = std::getenv("AUTOCASTGEN_FUZZ_SEED");
    std::mt19937_64 rng(seed != nullptr ? std::strtoull(seed, nullptr, 10) : 19);
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(mutate_seconds);
    size_t runs = 0;
    std::string last;
    while (std::chrono::steady_clock::now() < end) {
      last = mutate(corpus[rng() % corpus.size()], corpus[rng() % corpus.size()], rng);
      run(last);
      ++runs;
    }
    std::printf("ran %zu mutated inputs in %ld s\n", runs, mutate_seconds);
  }
  return 0;
}
