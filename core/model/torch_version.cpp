// Parsing and printing PyTorch release numbers.
#include "model/torch_version.h"

#include <charconv>

namespace autocastgen::model {

namespace {

// Reads one decimal component; `strict` refuses leading zeros (policies write `2.4`, not `2.04`).
std::optional<uint16_t> component(std::string_view& text, bool strict) {
  uint16_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end == text.data()) return std::nullopt;
  const size_t length = static_cast<size_t>(end - text.data());
  if (strict && length > 1 && text[0] == '0') return std::nullopt;
  text.remove_prefix(length);
  return value;
}

std::optional<TorchVersion> parse_prefix(std::string_view& text, bool strict) {
  auto major = component(text, strict);
  if (!major || text.empty() || text[0] != '.') return std::nullopt;
  text.remove_prefix(1);
  auto minor = component(text, strict);
  if (!minor) return std::nullopt;
  std::optional<uint16_t> patch;
  if (!text.empty() && text[0] == '.') {
    std::string_view rest = text.substr(1);
    if (auto p = component(rest, strict)) {
      patch = p;
      text = rest;
    } else if (strict) {
      return std::nullopt;
    }
  }
  return TorchVersion(*major, *minor, patch);
}

}  // namespace

std::optional<TorchVersion> TorchVersion::parse(std::string_view text) {
  auto version = parse_prefix(text, /*strict=*/true);
  if (!version || !text.empty()) return std::nullopt;
  return version;
}

std::optional<TorchVersion> TorchVersion::parse_reported(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\'' || text.front() == '"')) text.remove_prefix(1);
  return parse_prefix(text, /*strict=*/false);
}

std::string TorchVersion::str() const {
  std::string out = std::to_string(major_) + "." + std::to_string(minor_);
  if (patch_) out += "." + std::to_string(*patch_);
  return out;
}

bool is_supported_release(const TorchVersion& v) {
  if (v == TorchVersion{1, 13}) return true;
  return v.major() == 2 && v <= kNewestRelease;
}

}  // namespace autocastgen::model
