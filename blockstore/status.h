// Status and Result<T>: the error value of every fallible call in blockstore/ and index/.
//
// Modelled on LevelDB's include/leveldb/status.h. No exceptions on the data path: functions return a
// Status (or a Result<T> carrying a value or a non-OK Status). The FUSE layer maps a Status to an errno
// in one place (Status::ToErrno).
//
// Thread safety: Status and Result are plain values; const methods are safe to call concurrently.
#pragma once

#include <cerrno>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace kvfs {

class Status {
 public:
  enum class Code : unsigned char {
    kOk = 0,
    kNotFound,         // ENOENT
    kCorruption,       // checksum / format damage -> EIO
    kIOError,          // backing I/O failed; errno() holds the cause (EIO if unknown)
    kInvalidArgument,  // EINVAL
    kNoSpace,          // ENOSPC
    kExists,           // EEXIST
    kBusy,             // EBUSY (e.g. a node directory owned by a live mount)
    kNotSupported,     // EOPNOTSUPP
    kTimedOut,         // a backing request missed its deadline -> EIO
  };

  Status() = default;
  static Status OK() { return Status(); }
  static Status NotFound(std::string_view msg) { return Status(Code::kNotFound, ENOENT, msg); }
  static Status Corruption(std::string_view msg) { return Status(Code::kCorruption, EIO, msg); }
  // err: the errno of the failed system call (0 = EIO).
  static Status IOError(std::string_view msg, int err = EIO) {
    if (err == ENOSPC || err == EDQUOT) return Status(Code::kNoSpace, ENOSPC, msg);
    return Status(Code::kIOError, err ? err : EIO, msg);
  }
  static Status InvalidArgument(std::string_view msg) { return Status(Code::kInvalidArgument, EINVAL, msg); }
  static Status NoSpace(std::string_view msg) { return Status(Code::kNoSpace, ENOSPC, msg); }
  static Status Exists(std::string_view msg) { return Status(Code::kExists, EEXIST, msg); }
  static Status Busy(std::string_view msg) { return Status(Code::kBusy, EBUSY, msg); }
  static Status NotSupported(std::string_view msg) { return Status(Code::kNotSupported, EOPNOTSUPP, msg); }
  static Status TimedOut(std::string_view msg) { return Status(Code::kTimedOut, EIO, msg); }
  // A status carrying an arbitrary errno (used by namespace operations: ENOTEMPTY, ENOTDIR, EISDIR...).
  static Status FromErrno(int err, std::string_view msg) {
    switch (err) {
      case 0: return OK();
      case ENOENT: return NotFound(msg);
      case EEXIST: return Exists(msg);
      case ENOSPC: return NoSpace(msg);
      case EINVAL: return InvalidArgument(msg);
      case EBUSY: return Busy(msg);
      default: return Status(Code::kIOError, err, msg);
    }
  }

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  bool IsNotFound() const { return code_ == Code::kNotFound; }
  bool IsCorruption() const { return code_ == Code::kCorruption; }
  bool IsIOError() const { return code_ == Code::kIOError; }
  bool IsNoSpace() const { return code_ == Code::kNoSpace; }
  bool IsInvalidArgument() const { return code_ == Code::kInvalidArgument; }
  bool IsExists() const { return code_ == Code::kExists; }
  bool IsBusy() const { return code_ == Code::kBusy; }
  bool IsTimedOut() const { return code_ == Code::kTimedOut; }
  bool IsNotSupported() const { return code_ == Code::kNotSupported; }

  // The errno a FUSE reply or a tool should report for this status (0 when ok()).
  int ToErrno() const { return ok() ? 0 : errno_; }
  const std::string& message() const { return msg_; }
  std::string ToString() const;

 private:
  Status(Code c, int err, std::string_view msg) : code_(c), errno_(err), msg_(msg) {}
  Code code_ = Code::kOk;
  int errno_ = 0;
  std::string msg_;
};

inline std::string Status::ToString() const {
  const char* name = "OK";
  switch (code_) {
    case Code::kOk: return "OK";
    case Code::kNotFound: name = "NotFound"; break;
    case Code::kCorruption: name = "Corruption"; break;
    case Code::kIOError: name = "IOError"; break;
    case Code::kInvalidArgument: name = "InvalidArgument"; break;
    case Code::kNoSpace: name = "NoSpace"; break;
    case Code::kExists: name = "Exists"; break;
    case Code::kBusy: name = "Busy"; break;
    case Code::kNotSupported: name = "NotSupported"; break;
    case Code::kTimedOut: name = "TimedOut"; break;
  }
  return std::string(name) + ": " + msg_;
}

// A value or a non-OK Status. Accessing value() of a failed Result is a programming error.
template <class T>
class Result {
 public:
  Result(T v) : value_(std::move(v)) {}                 // NOLINT(google-explicit-constructor)
  Result(Status s) : status_(std::move(s)) {}           // NOLINT(google-explicit-constructor)
  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  T& value() { return *value_; }
  const T& value() const { return *value_; }
  T& operator*() { return *value_; }
  const T& operator*() const { return *value_; }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }

 private:
  Status status_;
  std::optional<T> value_;
};

#define KVFS_RETURN_IF_ERROR(expr)           \
  do {                                       \
    ::kvfs::Status _kvfs_s = (expr);         \
    if (!_kvfs_s.ok()) return _kvfs_s;       \
  } while (0)

}  // namespace kvfs
