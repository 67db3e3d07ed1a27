// SPDX-License-Identifier: Apache-2.0
// Bounded file input for everything opendnn reads from disk or a stream (Graph JSON files, .npy
// inputs, plan-cache files). Nothing here reads more than its cap or allocates more than it read,
// and every failure names the file and the operating system's reason ("cannot read x.json: Is a
// directory"). Private to the library and its tools.
#pragma once

#include <sys/stat.h>

#include <cstddef>
#include <string>

#include "opendnn/status.h"

namespace opendnn::serialize {

// "cannot <verb> <path>: <strerror(err)>".
std::string os_error(const char* verb, const std::string& path, int err);

// An open file descriptor, closed on destruction.
class InputFile {
 public:
  InputFile() = default;
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;
  ~InputFile();

  // Opens path for reading. A directory is refused ("Is a directory"). With regular_only, anything
  // but a regular file (FIFO, device, socket) is refused too, without ever blocking on it: the file
  // is opened with O_NONBLOCK and checked with fstat before a byte is read.
  Status open(const std::string& path, bool regular_only);
  // Takes a descriptor the caller opened (stdin); it is not closed.
  void adopt(int fd, const std::string& name);

  int fd() const { return fd_; }
  // The errno of a failed open() (ENOENT: there is no such file), else 0.
  int open_errno() const { return open_errno_; }
  const std::string& name() const { return name_; }
  // True for a regular file; size() is then its length in bytes.
  bool regular() const { return S_ISREG(st_.st_mode); }
  size_t size() const { return regular() && st_.st_size > 0 ? size_t(st_.st_size) : 0; }

  // Reads the rest of the file into out, failing once it holds more than max_bytes (a regular file
  // that is larger fails before anything is read). `what` names the content in that message.
  Status read_all(size_t max_bytes, const char* what, std::string& out);
  // Reads exactly n bytes into dst; a short file is "truncated: expected N bytes, found M".
  Status read_exact(void* dst, size_t n, const char* what);

 private:
  int fd_ = -1;
  int open_errno_ = 0;
  bool owned_ = false;
  std::string name_;
  struct stat st_ {};
};

// InputFile::open + read_all.
Status read_file(const std::string& path, size_t max_bytes, bool regular_only, const char* what, std::string& out);

}  // namespace opendnn::serialize
