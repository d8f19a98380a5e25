// The mock's JSON-lines log: one object per recorded event, fields in a fixed
// order, device pointers written as "alloc#<id>+<offset>" and handles as the
// per-device numbers the mock issues, so the same program writes the same
// bytes on every run and a test can compare it with a checked-in file.
//
//   {"seq":3,"op":"copy","kind":"h2d","dst":"alloc#1+0","bytes":64,"stream":0,"blocking":true}
//
// Not thread-safe: the device's mutex guards it. Each line is flushed as it
// is written, so a crashing test still leaves its trace behind, and a write
// that fails (a full disk) is known at once: the log then writes nothing
// more and status() says what failed until the next open.
#ifndef SPARKRT_BACKENDS_MOCK_MOCK_LOG_H_
#define SPARKRT_BACKENDS_MOCK_MOCK_LOG_H_

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace sparkrt::mock {

class JsonLog {
 public:
  JsonLog() = default;
  JsonLog(const JsonLog&) = delete;
  JsonLog& operator=(const JsonLog&) = delete;
  ~JsonLog() { close().IgnoreError(); }  // the device reports failures before this

  // Starts writing to `path` (truncating, or appending when `append`);
  // replaces any previous file. Sequence numbers restart at 1.
  absl::Status open(const std::string& path, bool append);
  // Closes the file and returns status() (or the close's own failure),
  // which is then OK again.
  absl::Status close();
  bool is_open() const { return file_ != nullptr; }
  // OK, or the first failed write since open (DataLoss naming the file, the
  // seq of the lost line and the errno text).
  const absl::Status& status() const { return status_; }

  // Line building: begin(op), fields, end().
  void begin(std::string_view op);
  void field(std::string_view key, std::string_view value);  // JSON string
  void field(std::string_view key, const char* value) { field(key, std::string_view(value)); }
  void field(std::string_view key, uint64_t value);
  void field(std::string_view key, bool value);
  // `raw` must already be valid JSON (an array or object).
  void raw_field(std::string_view key, std::string_view raw);
  void end();

  // Appends `s` as a quoted, escaped JSON string.
  static void append_string(std::string& out, std::string_view s);

 private:
  void key(std::string_view k);

  void write_failed(int err);

  std::FILE* file_ = nullptr;
  std::string path_;
  absl::Status status_;
  uint64_t seq_ = 0;
  std::string line_;  // reused: no allocation per line once warm
};

}  // namespace sparkrt::mock

#endif  // SPARKRT_BACKENDS_MOCK_MOCK_LOG_H_
