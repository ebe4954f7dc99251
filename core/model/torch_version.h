// A PyTorch release as a run targets it (`2.11`, `2.4.1`), and the range of releases autocastgen knows.
#pragma once

#include <compare>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace autocastgen::model {

// Major.minor[.patch]; local suffixes such as `+cu132` and pre-release tags are not part of it.
// Policies gate on major.minor; the patch is kept for display only.
class TorchVersion {
 public:
  constexpr TorchVersion(uint16_t major, uint16_t minor, std::optional<uint16_t> patch = std::nullopt)
      : major_(major), minor_(minor), patch_(patch) {}

  // `X.Y` or `X.Y.Z` (digits only, no leading zeros): what policies and --torch-version accept.
  [[nodiscard]] static std::optional<TorchVersion> parse(std::string_view text);
  // A version as torch reports it (`2.15.0+cu132`, `2.4.1a0+git3f1b2c`, `1.13.1`): the numeric
  // prefix of a `torch.__version__` string.
  [[nodiscard]] static std::optional<TorchVersion> parse_reported(std::string_view text);

  [[nodiscard]] constexpr uint16_t major() const { return major_; }
  [[nodiscard]] constexpr uint16_t minor() const { return minor_; }
  [[nodiscard]] constexpr std::optional<uint16_t> patch() const { return patch_; }
  // The minor release it belongs to (`2.4.1` -> `2.4`): what gates compare.
  [[nodiscard]] constexpr TorchVersion release() const { return {major_, minor_}; }

  // `2.4` or `2.4.1`, as written.
  [[nodiscard]] std::string str() const;

  // Orders by major.minor only: 2.4 == 2.4.1 for every comparison a policy makes.
  friend constexpr std::strong_ordering operator<=>(const TorchVersion& a, const TorchVersion& b) {
    if (auto c = a.major_ <=> b.major_; c != 0) return c;
    return a.minor_ <=> b.minor_;
  }
  friend constexpr bool operator==(const TorchVersion& a, const TorchVersion& b) { return (a <=> b) == 0; }

 private:
  uint16_t major_;
  uint16_t minor_;
  std::optional<uint16_t> patch_;
};

// The releases whose schemas autocastgen reads (codegen: schema, check, audit).
inline constexpr TorchVersion kOldestCodegenRelease{1, 13};
// The releases its generated code and runtime build against.
inline constexpr TorchVersion kOldestGeneratedCodeRelease{2, 4};
inline constexpr TorchVersion kNewestRelease{2, 15};

// Is `v` one of the minor releases from 1.13 to 2.15 (1.13, 2.0, 2.1, ..., 2.15)?
[[nodiscard]] bool is_supported_release(const TorchVersion& v);

}  // namespace autocastgen::model
