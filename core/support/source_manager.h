// Owns the text of every input file and turns byte offsets into line:column on demand.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace autocastgen {

// A position in a buffer owned by a SourceManager. `file == 0` means "no location".
struct SourceLocation {
  uint32_t file = 0;
  uint32_t offset = 0;

  [[nodiscard]] bool valid() const { return file != 0; }
  [[nodiscard]] SourceLocation advanced(uint32_t by) const { return {file, offset + by}; }
  friend bool operator==(const SourceLocation&, const SourceLocation&) = default;
};

struct LineColumn {
  uint32_t line = 0;    // 1-based
  uint32_t column = 0;  // 1-based, in bytes
};

// Offsets are 32-bit: the most any buffer may hold.
inline constexpr size_t kMaxSourceBytes = UINT32_MAX - 1;

// "larger than 1 MiB, the limit for policy files": why an input over its limit is refused.
[[nodiscard]] std::string input_too_large(size_t max_bytes, std::string_view files);

class SourceManager {
 public:
  SourceManager() = default;
  SourceManager(const SourceManager&) = delete;
  SourceManager& operator=(const SourceManager&) = delete;

  // Adds an in-memory buffer; `name` is what diagnostics print for it.
  uint32_t add_buffer(std::string name, std::string contents);
  // Reads a whole file; on failure returns nullopt and sets `error` to the reason. A file larger
  // than `max_bytes` is refused after reading that much (Note [yaml limits] in yaml.h gives each
  // kind's; `files` names the kind in the reason).
  [[nodiscard]] std::optional<uint32_t> add_file(const std::filesystem::path& path, std::string& error,
                                                 size_t max_bytes = kMaxSourceBytes, std::string_view files = "input files");

  [[nodiscard]] std::string_view text(uint32_t file) const;
  [[nodiscard]] const std::string& name(uint32_t file) const;
  [[nodiscard]] SourceLocation start_of(uint32_t file) const { return {file, 0}; }

  [[nodiscard]] LineColumn line_column(SourceLocation loc) const;
  // The whole line holding `loc`, without its line terminator.
  [[nodiscard]] std::string_view line_text(SourceLocation loc) const;
  // Location of a 1-based line and column (clamped to the buffer).
  [[nodiscard]] SourceLocation location_of(uint32_t file, uint32_t line, uint32_t column) const;
  // `file:line:col`, the file as display_path (support/paths.h) prints it; "" for no location.
  [[nodiscard]] std::string location_text(SourceLocation loc) const;

 private:
  struct Buffer {
    std::string name;
    std::string text;
    std::vector<uint32_t> line_starts;  // offset of the first byte of each line
  };
  [[nodiscard]] const Buffer& buffer(uint32_t file) const;
  std::vector<std::unique_ptr<Buffer>> buffers_;
};

}  // namespace autocastgen
