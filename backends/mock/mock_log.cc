#include "mock_log.h"

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace sparkrt::mock {

absl::Status JsonLog::open(const std::string& path, bool append) {
  std::FILE* f = std::fopen(path.c_str(), append ? "a" : "w");
  if (f == nullptr) {
    const int err = errno;
    return absl::FailedPreconditionError(
        absl::StrFormat("mock log: cannot open '%s' for %s: %s; choose a writable path", path,
                        append ? "appending" : "writing", std::strerror(err)));
  }
  close().IgnoreError();  // the previous file's failure was reported when it happened
  file_ = f;
  path_ = path;
  status_ = absl::OkStatus();
  seq_ = 0;
  line_.reserve(512);
  return absl::OkStatus();
}

absl::Status JsonLog::close() {
  if (file_ != nullptr && std::fclose(file_) != 0 && status_.ok()) write_failed(errno);
  file_ = nullptr;
  return std::exchange(status_, absl::OkStatus());
}

void JsonLog::write_failed(int err) {
  status_ = absl::DataLossError(absl::StrFormat(
      "mock log: writing '%s' failed at seq %d: %s; the trace is incomplete from there (free "
      "space, or choose another path)",
      path_, seq_, std::strerror(err)));
}

void JsonLog::begin(std::string_view op) {
  line_.clear();
  absl::StrAppend(&line_, "{\"seq\":", ++seq_, ",\"op\":");
  append_string(line_, op);
}

void JsonLog::key(std::string_view k) {
  line_.push_back(',');
  append_string(line_, k);
  line_.push_back(':');
}

void JsonLog::field(std::string_view k, std::string_view value) {
  key(k);
  append_string(line_, value);
}

void JsonLog::field(std::string_view k, uint64_t value) {
  key(k);
  absl::StrAppend(&line_, value);
}

void JsonLog::field(std::string_view k, bool value) {
  key(k);
  line_.append(value ? "true" : "false");
}

void JsonLog::raw_field(std::string_view k, std::string_view raw) {
  key(k);
  line_.append(raw);
}

void JsonLog::end() {
  line_.append("}\n");
  if (file_ != nullptr && status_.ok()) {
    errno = 0;
    if (std::fwrite(line_.data(), 1, line_.size(), file_) != line_.size() ||
        std::fflush(file_) != 0) {
      write_failed(errno != 0 ? errno : EIO);
    }
  }
}

void JsonLog::append_string(std::string& out, std::string_view s) {
  out.push_back('"');
  for (const char c : s) {
    switch (c) {
      case '"': out.append("\\\""); break;
      case '\\': out.append("\\\\"); break;
      case '\n': out.append("\\n"); break;
      case '\t': out.append("\\t"); break;
      case '\r': out.append("\\r"); break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          absl::StrAppendFormat(&out, "\\u%04x", static_cast<unsigned>(c));
        } else {
          out.push_back(c);
        }
    }
  }
  out.push_back('"');
}

}  // namespace sparkrt::mock
