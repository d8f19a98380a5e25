#include "ptx_invariants.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"
#include "sparkrt/signature.h"

namespace sparkrt::fuzz {
namespace {

using Signatures = std::vector<KernelSignature>;

[[noreturn]] void violated(const std::string& what) {
  std::fprintf(stderr, "ptx invariant violated: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

bool is_ascii_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool is_follow(char c) { return is_ascii_alpha(c) || (c >= '0' && c <= '9') || c == '_' || c == '$'; }

// The PTX ISA's identifier: [a-zA-Z]{followsym}* or [_$%]{followsym}+, with
// followsym [a-zA-Z0-9_$].
bool is_identifier(std::string_view s) {
  if (s.empty()) return false;
  if (!is_ascii_alpha(s[0]) && ((s[0] != '_' && s[0] != '$' && s[0] != '%') || s.size() < 2))
    return false;
  for (char c : s.substr(1))
    if (!is_follow(c)) return false;
  return true;
}

uint64_t line_count(std::string_view s) {
  uint64_t n = 1;
  for (char c : s) n += c == '\n';
  return n;
}

// The first "line N:" in `message` (a word "line", digits, a colon), or
// nullopt. Numbers too long to be a line of any input count as 0.
std::optional<uint64_t> named_line(std::string_view message) {
  for (size_t at = message.find("line "); at != std::string_view::npos;
       at = message.find("line ", at + 1)) {
    if (at > 0 && is_follow(message[at - 1])) continue;
    size_t i = at + 5, digits = 0;
    uint64_t n = 0;
    for (; i < message.size() && message[i] >= '0' && message[i] <= '9'; ++i, ++digits)
      if (digits < 18) n = n * 10 + static_cast<uint64_t>(message[i] - '0');
    if (digits == 0 || i >= message.size() || message[i] != ':') continue;
    return digits < 18 ? n : 0;
  }
  return std::nullopt;
}

bool is_power_of_two(uint32_t v) { return v != 0 && (v & (v - 1)) == 0; }

void check_error(std::string_view ptx, const absl::Status& status) {
  if (status.code() != absl::StatusCode::kInvalidArgument)
    violated(absl::StrFormat("error is not InvalidArgument: %s", status.ToString()));
  const auto line =
      named_line(std::string_view(status.message().data(), status.message().size()));
  if (!line) violated(absl::StrFormat("error names no line ('line N:'): %s", status.ToString()));
  const uint64_t lines = line_count(ptx);
  if (*line < 1 || *line > lines)
    violated(absl::StrFormat("error names line %d of an input with %d lines: %s", *line, lines,
                             status.ToString()));
}

// The width in bytes of a scalar spelled ".u32", ".f16", ...; 0 otherwise.
uint32_t scalar_width(std::string_view spelling) {
  if (spelling.size() < 3 || spelling[0] != '.') return 0;
  uint32_t bits = 0;
  for (char c : spelling.substr(2)) {
    if (c < '0' || c > '9' || bits > 1024) return 0;
    bits = bits * 10 + static_cast<uint32_t>(c - '0');
  }
  return bits % 8 == 0 ? bits / 8 : 0;
}

void check_signatures(const Signatures& sigs) {
  absl::flat_hash_set<std::string> names;
  for (const KernelSignature& sig : sigs) {
    if (!is_identifier(sig.entry))
      violated(absl::StrFormat("entry name '%s' is not a PTX identifier", sig.entry));
    if (!names.insert(sig.entry).second)
      violated(absl::StrFormat("entry '%s' returned twice", sig.entry));
    uint64_t end = 0;
    absl::flat_hash_set<std::string> param_names;
    for (size_t i = 0; i < sig.params.size(); ++i) {
      const Param& p = sig.params[i];
      const std::string where = absl::StrFormat("%s parameter #%d (%s)", sig.entry, i, p.name);
      // ptxas takes a lone '_' as a parameter's name (not as an entry's).
      if (!is_identifier(p.name) && p.name != "_")
        violated(where + ": name is not a PTX identifier");
      if (!param_names.insert(p.name).second)
        violated(where + ": name declared twice (ptxas: duplicate definition)");
      if (p.size == 0) violated(where + ": size 0");
      if (!is_power_of_two(p.align))
        violated(absl::StrFormat("%s: alignment %d is not a power of two", where, p.align));
      if (p.offset % p.align != 0)
        violated(absl::StrFormat("%s: offset %d is not a multiple of its alignment %d", where,
                                 p.offset, p.align));
      if (p.offset < end)
        violated(absl::StrFormat("%s: offset %d overlaps the parameter before, which ends at %d",
                                 where, p.offset, end));
      const std::string type = param_type_name(p.type, p.size);
      if (type == "?") violated(where + ": type has no PTX spelling");
      // ptxas places a scalar (and each element of a scalar array) at a
      // multiple of its width whatever `.align` or `.ptr .align` says.
      const uint32_t width = p.type == ParamType::kBytes ? 1 : scalar_width(type);
      if (width == 0) violated(where + ": cannot tell the width of " + type);
      if (p.align < width || p.size % width != 0)
        violated(absl::StrFormat("%s: %s with alignment %d and size %d (ptxas aligns it to %d)",
                                 where, type, p.align, p.size, width));
      end = uint64_t{p.offset} + p.size;
    }
    if (sig.params_size != end)
      violated(absl::StrFormat("%s: params_size %d, but the last parameter ends at %d", sig.entry,
                               sig.params_size, end));
    const EntryDirectives& d = sig.directives;
    for (const auto& [name, dims] : {std::pair{".reqntid", d.reqntid}, {".maxntid", d.maxntid},
                                     {".reqnctapercluster", d.reqnctapercluster}})
      if (!(dims == Dim3{0, 0, 0}) && (dims.x == 0 || dims.y == 0 || dims.z == 0))
        violated(absl::StrFormat("%s: %s {%d, %d, %d} is neither absent nor whole", sig.entry,
                                 name, dims.x, dims.y, dims.z));
    if (d.reqntid.x != 0 && d.maxntid.x != 0)
      violated(sig.entry + ": both .reqntid and .maxntid (ptxas: conflicting directives)");
  }
}

std::string dims_text(Dim3 d) { return absl::StrFormat("{%d, %d, %d}", d.x, d.y, d.z); }

std::string directives_text(const EntryDirectives& d) {
  return absl::StrFormat(
      "reqntid %s maxntid %s minnctapersm %d maxnreg %d reqnctapercluster %s maxclusterrank %d "
      "explicitcluster %d",
      dims_text(d.reqntid), dims_text(d.maxntid), d.minnctapersm, d.maxnreg,
      dims_text(d.reqnctapercluster), d.maxclusterrank, d.explicitcluster);
}

void check_same(const Signatures& a, const Signatures& b, std::string_view what) {
  if (a.size() != b.size())
    violated(absl::StrFormat("%s: %d entries, then %d", what, a.size(), b.size()));
  for (size_t e = 0; e < a.size(); ++e) {
    const KernelSignature& x = a[e];
    const KernelSignature& y = b[e];
    if (x.entry != y.entry || x.params_size != y.params_size || x.params.size() != y.params.size())
      violated(absl::StrFormat("%s: entry #%d is %s (%d parameters, %d bytes), then %s (%d, %d)",
                               what, e, x.entry, x.params.size(), x.params_size, y.entry,
                               y.params.size(), y.params_size));
    if (directives_text(x.directives) != directives_text(y.directives))
      violated(absl::StrFormat("%s: %s has directives %s, then %s", what, x.entry,
                               directives_text(x.directives), directives_text(y.directives)));
    if (x.unsupported.empty() != y.unsupported.empty())
      violated(absl::StrFormat("%s: %s is launchable in one parse, not in the other: '%s', then '%s'",
                               what, x.entry, x.unsupported, y.unsupported));
    for (size_t i = 0; i < x.params.size(); ++i) {
      const Param& p = x.params[i];
      const Param& q = y.params[i];
      if (p.name != q.name || p.type != q.type || p.size != q.size || p.align != q.align ||
          p.offset != q.offset)
        violated(absl::StrFormat(
            "%s: %s parameter #%d is %s %s size %d align %d offset %d, then %s %s size %d align "
            "%d offset %d",
            what, x.entry, i, p.name, param_type_name(p.type, p.size), p.size, p.align, p.offset,
            q.name, param_type_name(q.type, q.size), q.size, q.align, q.offset));
    }
  }
}

}  // namespace

void check_ptx_signatures(std::string_view ptx) {
  const absl::StatusOr<Signatures> first = parse_ptx_signatures(ptx);
  const absl::StatusOr<Signatures> again = parse_ptx_signatures(ptx);
  if (first.ok() != again.ok() || (!first.ok() && first.status() != again.status()))
    violated(absl::StrFormat("two parses of one input differ: %s, then %s",
                             first.status().ToString(), again.status().ToString()));
  if (!first.ok()) {
    check_error(ptx, first.status());
    return;
  }
  check_signatures(*first);
  check_same(*first, *again, "two parses of one input differ");

  const std::string written = format_signature_file(*first);
  const absl::StatusOr<Signatures> reread = parse_ptx_signatures(written);
  if (!reread.ok())
    violated(absl::StrFormat("the signatures written as a signature file do not parse: %s\n%s",
                             reread.status().ToString(), written));
  check_same(*first, *reread, "the signatures written as a signature file parse differently");
  if (const std::string diff = signature_difference(*first, "the input", *reread, "the file");
      !diff.empty())
    violated("signature_difference finds a difference check_same does not: " + diff);
}

}  // namespace sparkrt::fuzz
