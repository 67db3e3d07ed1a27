// SPDX-License-Identifier: Apache-2.0
#include "serialize/file_read.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace opendnn::serialize {

namespace {

constexpr ErrorCode kIo = ErrorCode::INVALID_VALUE;
constexpr size_t kChunk = size_t(64) << 10;

std::string mib_text(size_t bytes) {
  if (bytes >= (size_t(1) << 20) && bytes % (size_t(1) << 20) == 0) return std::to_string(bytes >> 20) + " MiB";
  return std::to_string(bytes) + " bytes";
}

const char* kind_of(mode_t m) {
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISSOCK(m)) return "a socket";
  return "not a regular file";
}

// read(2), retried on EINTR. Returns bytes read, 0 at the end, -1 with errno set.
ssize_t read_some(int fd, void* dst, size_t n) {
  for (;;) {
    ssize_t r = ::read(fd, dst, n);
    if (r >= 0 || errno != EINTR) return r;
  }
}

}  // namespace

std::string os_error(const char* verb, const std::string& path, int err) {
  return std::string("cannot ") + verb + " " + path + ": " + std::strerror(err);
}

InputFile::~InputFile() {
  if (owned_ && fd_ >= 0) ::close(fd_);
}

Status InputFile::open(const std::string& path, bool regular_only) {
  name_ = path;
  int flags = O_RDONLY | O_CLOEXEC | (regular_only ? O_NONBLOCK : 0);
  int fd = ::open(path.c_str(), flags);
  if (fd < 0) {
    open_errno_ = errno;
    return {kIo, os_error("read", path, open_errno_)};
  }
  fd_ = fd;
  owned_ = true;
  if (::fstat(fd_, &st_) != 0) return {kIo, os_error("read", path, errno)};
  if (S_ISDIR(st_.st_mode)) return {kIo, os_error("read", path, EISDIR)};
  if (regular_only && !S_ISREG(st_.st_mode))
    return {kIo, "cannot read " + path + ": " + kind_of(st_.st_mode) + ", not a regular file"};
  if (regular_only) {
    // Back to blocking reads for the regular file (O_NONBLOCK only kept the open from waiting).
    int fl = ::fcntl(fd_, F_GETFL);
    if (fl >= 0) (void)::fcntl(fd_, F_SETFL, fl & ~O_NONBLOCK);
  }
  return {};
}

void InputFile::adopt(int fd, const std::string& name) {
  fd_ = fd;
  owned_ = false;
  name_ = name;
  if (::fstat(fd_, &st_) != 0) st_ = {};
}

Status InputFile::read_all(size_t max_bytes, const char* what, std::string& out) {
  out.clear();
  auto too_large = [&] {
    return Status{kIo, name_ + ": " + what + " larger than " + mib_text(max_bytes) + " (the limit)"};
  };
  if (regular() && size() > max_bytes) return too_large();
  if (regular()) out.reserve(size());
  char buf[kChunk];
  for (;;) {
    ssize_t r = read_some(fd_, buf, sizeof buf);
    if (r < 0) return {kIo, os_error("read", name_, errno)};
    if (r == 0) return {};
    if (out.size() + size_t(r) > max_bytes) {
      out.clear();
      out.shrink_to_fit();
      return too_large();
    }
    out.append(buf, size_t(r));
  }
}

Status InputFile::read_exact(void* dst, size_t n, const char* what) {
  auto* p = static_cast<char*>(dst);
  size_t got = 0;
  while (got < n) {
    ssize_t r = read_some(fd_, p + got, std::min(n - got, size_t(1) << 30));
    if (r < 0) return {kIo, os_error("read", name_, errno)};
    if (r == 0)
      return {kIo, name_ + ": truncated " + what + ": expected " + std::to_string(n) + " bytes, found " +
                       std::to_string(got)};
    got += size_t(r);
  }
  return {};
}

Status read_file(const std::string& path, size_t max_bytes, bool regular_only, const char* what, std::string& out) {
  InputFile f;
  OPENDNN_RETURN_IF_ERROR(f.open(path, regular_only));
  return f.read_all(max_bytes, what, out);
}

}  // namespace opendnn::serialize
