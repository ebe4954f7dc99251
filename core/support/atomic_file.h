// Every file autocastgen writes is written whole or not at all: the one atomic-write helper.
#pragma once

#include <cstddef>
#include <filesystem>
#include <string>
#include <string_view>

#include <sys/types.h>

namespace autocastgen {

struct WriteOptions {
  // A record (statistics, fp8 decisions): the data reaches the disk before the rename, and the
  // rename before the call returns (fsync of the file and of its folder). Generated files are
  // not: a crash of the machine may lose the new file (the build makes it again), never cut it.
  bool durable = false;
  // Missing folders of the path are made; else a missing folder is an error ("No such file or
  // directory"), as for a path a user gave to a file of statistics.
  bool create_folders = true;
};

// Writes `content` to `path` through a temporary in the same folder (`<path>.tmp<pid>`) renamed
// over it. Returns false and sets `error` to the system's words ("File
// too large", "No space left on device", "Permission denied") on failure; the temporary is gone
// then and `path` is as it was. Survives SIGXFSZ; SIGINT, SIGTERM and SIGHUP, where they would end
// the process, remove the temporary first (Note [writes under faults] in atomic_file.cpp).
// Thread-safe: one write at a time per process.
[[nodiscard]] bool write_file_atomically(const std::filesystem::path& path, std::string_view content, std::string& error,
                                         WriteOptions options = {});

// The same, unless `path` already holds exactly `content`; `changed` says whether it wrote.
[[nodiscard]] bool write_if_changed(const std::filesystem::path& path, std::string_view content, bool& changed,
                                    std::string& error, WriteOptions options = {});

// Whether `path` is a file holding exactly `content`.
[[nodiscard]] bool file_holds(const std::filesystem::path& path, std::string_view content);

// Test seam for fault injection: the write(2) used for temporaries (nullptr: ::write).
using WriteFunction = ssize_t (*)(int fd, const void* data, size_t size);
void set_write_function_for_testing(WriteFunction write);

}  // namespace autocastgen
