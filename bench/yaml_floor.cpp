// The floor of any reader built on yaml-cpp: its event parser over a whole file with a handler that
// does nothing. bench/check_vs_torchgen.py times this process next to `autocastgen check`, so the
// table shows how much of check's time is yaml-cpp's own scanning and how much is ours.
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/exceptions.h>
#include <yaml-cpp/parser.h>

namespace {

// Counts events so that the parse cannot be optimised away and the count can be printed.
class CountingHandler : public YAML::EventHandler {
 public:
  unsigned long events = 0;
  void OnDocumentStart(const YAML::Mark&) override { ++events; }
  void OnDocumentEnd() override { ++events; }
  void OnNull(const YAML::Mark&, YAML::anchor_t) override { ++events; }
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override { ++events; }
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t, const std::string&) override { ++events; }
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {
    ++events;
  }
  void OnSequenceEnd() override { ++events; }
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {
    ++events;
  }
  void OnMapEnd() override { ++events; }
};

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: bench_yaml_floor FILE.yaml\n");
    return 2;
  }
  std::ifstream file(argv[1], std::ios::binary);
  if (!file) {
    std::fprintf(stderr, "bench_yaml_floor: cannot read %s\n", argv[1]);
    return 1;
  }
  // Read whole, then parse from memory: the same input path as autocastgen's parse_yaml.
  std::ostringstream text;
  text << file.rdbuf();
  std::istringstream in(text.str());
  CountingHandler handler;
  try {
    YAML::Parser parser(in);
    while (parser.HandleNextDocument(handler)) {
    }
  } catch (const YAML::Exception& e) {
    std::fprintf(stderr, "bench_yaml_floor: %s\n", e.what());
    return 1;
  }
  std::printf("%lu events\n", handler.events);
  return 0;
}
