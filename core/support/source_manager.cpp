// Buffer ownership and offset -> line:column translation.
#include "support/source_manager.h"

#include "support/paths.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <system_error>

namespace autocastgen {

uint32_t SourceManager::add_buffer(std::string name, std::string contents) {
  auto buffer = std::make_unique<Buffer>();
  buffer->name = std::move(name);
  buffer->text = std::move(contents);
  buffer->line_starts.push_back(0);
  const char* data = buffer->text.data();
  const size_t size = buffer->text.size();
  for (const char* p = data; (p = static_cast<const char*>(std::memchr(p, '\n', size - (p - data))));) {
    ++p;
    buffer->line_starts.push_back(static_cast<uint32_t>(p - data));
  }
  buffers_.push_back(std::move(buffer));
  return static_cast<uint32_t>(buffers_.size());
}

std::string input_too_large(size_t max_bytes, std::string_view files) {
  const std::string size = max_bytes % (size_t{1} << 20) == 0 ? std::to_string(max_bytes >> 20) + " MiB"
                                                              : std::to_string(max_bytes) + " bytes";
  return "larger than " + size + ", the limit for " + std::string(files);
}

std::optional<uint32_t> SourceManager::add_file(const std::filesystem::path& path, std::string& error, size_t max_bytes,
                                                std::string_view files) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    error = "is a directory";
    return std::nullopt;
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    error = std::strerror(errno);
    return std::nullopt;
  }
  // In pieces, never past the limit: a huge file or /dev/zero costs max_bytes, not all of it.
  max_bytes = std::min(max_bytes, kMaxSourceBytes);
  std::string text;
  constexpr size_t kPiece = size_t{1} << 16;
  while (in) {
    const size_t had = text.size();
    text.resize(had + kPiece);
    in.read(text.data() + had, static_cast<std::streamsize>(kPiece));
    text.resize(had + static_cast<size_t>(in.gcount()));
    if (text.size() > max_bytes) {
      error = max_bytes == kMaxSourceBytes ? "file is larger than 4 GiB" : input_too_large(max_bytes, files);
      return std::nullopt;
    }
  }
  if (in.bad()) {
    error = "read error";
    return std::nullopt;
  }
  return add_buffer(path.string(), std::move(text));
}

const SourceManager::Buffer& SourceManager::buffer(uint32_t file) const {
  if (file == 0 || file > buffers_.size()) throw std::out_of_range("autocastgen: bad source buffer id");
  return *buffers_[file - 1];
}

std::string_view SourceManager::text(uint32_t file) const { return buffer(file).text; }
const std::string& SourceManager::name(uint32_t file) const { return buffer(file).name; }

LineColumn SourceManager::line_column(SourceLocation loc) const {
  const Buffer& b = buffer(loc.file);
  const uint32_t offset = std::min<uint32_t>(loc.offset, static_cast<uint32_t>(b.text.size()));
  auto it = std::upper_bound(b.line_starts.begin(), b.line_starts.end(), offset);
  const auto line = static_cast<uint32_t>(it - b.line_starts.begin());
  return {line, offset - b.line_starts[line - 1] + 1};
}

std::string_view SourceManager::line_text(SourceLocation loc) const {
  const Buffer& b = buffer(loc.file);
  const LineColumn lc = line_column(loc);
  const uint32_t begin = b.line_starts[lc.line - 1];
  uint32_t end = lc.line < b.line_starts.size() ? b.line_starts[lc.line] : static_cast<uint32_t>(b.text.size());
  while (end > begin && (b.text[end - 1] == '\n' || b.text[end - 1] == '\r')) --end;
  return std::string_view(b.text).substr(begin, end - begin);
}

std::string SourceManager::location_text(SourceLocation loc) const {
  if (!loc.valid()) return "";
  const LineColumn lc = line_column(loc);
  return display_path(name(loc.file)) + ":" + std::to_string(lc.line) + ":" + std::to_string(lc.column);
}

SourceLocation SourceManager::location_of(uint32_t file, uint32_t line, uint32_t column) const {
  const Buffer& b = buffer(file);
  if (line == 0) line = 1;
  if (line > b.line_starts.size()) return {file, static_cast<uint32_t>(b.text.size())};
  const uint32_t offset = b.line_starts[line - 1] + (column ? column - 1 : 0);
  return {file, std::min<uint32_t>(offset, static_cast<uint32_t>(b.text.size()))};
}

}  // namespace autocastgen
