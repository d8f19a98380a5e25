// PTX entry-signature parser. Reads only what precedes each kernel body:
//   [.visible|.weak] .entry <name> [( <param>, ... )] <directive>* {
//   <param> := .param (.align A)* <type> [.ptr [<space>]] [.align P] <name>[[<N>]]
// Bodies, functions and module directives are skipped. The grammar and the
// layout follow ptxas (checked against the cubins it writes, see
// tests/unit/ptxas_layout_test.cc): a leading `.align` aligns the parameter,
// an `.align` after the type (with or without `.ptr`) describes the memory a
// pointer points to and leaves the layout alone. Inputs are untrusted, so every
// size is bounded and every error names the line.
#include "sparkrt/signature.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"

namespace sparkrt {
namespace {

// Far above any real kernel (CUDA allows 32764 bytes of parameters), low
// enough that hostile sizes cannot overflow 32-bit offsets.
constexpr uint64_t kMaxParamsBytes = 1 << 20;
constexpr size_t kMaxParams = 4096;
constexpr size_t kMaxEntries = 100000;
// ptxas places a parameter aligned above this within the constant bank, whose
// parameter base differs by architecture (0x210 on sm_90, 0x380 on sm_120), so
// its offset cannot be known from the PTX.
constexpr uint64_t kMaxPortableAlign = 16;
constexpr uint64_t kMaxAlign = uint64_t{1} << 31;

struct Token {
  std::string_view text;
  int line = 0;
};

bool is_ident_start(char c) {
  return std::isalpha(static_cast<unsigned char>(c)) || c == '_' || c == '$' || c == '%';
}
bool is_ident_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '$';
}

// A PTX identifier: [a-zA-Z][a-zA-Z0-9_$]* or [_$%][a-zA-Z0-9_$]+ (the lexer
// has already taken the longest run of identifier characters). ptxas also
// takes a lone `_` as a parameter's name, but not as an entry's.
bool is_identifier(std::string_view t, bool lone_underscore) {
  if (t.empty() || !is_ident_start(t[0])) return false;
  if (std::isalpha(static_cast<unsigned char>(t[0]))) return true;
  return t.size() > 1 || (lone_underscore && t == "_");
}

class Lexer {
 public:
  explicit Lexer(std::string_view src) : src_(src) {}

  // Next token, or nullopt at end of input. Strings and comments are skipped;
  // any other byte is a one-character token.
  absl::StatusOr<std::optional<Token>> next() {
    for (;;) {
      while (pos_ < src_.size() && std::isspace(static_cast<unsigned char>(src_[pos_]))) {
        if (src_[pos_] == '\n') ++line_;
        ++pos_;
      }
      if (pos_ >= src_.size()) return std::optional<Token>();
      if (src_.compare(pos_, 2, "//") == 0) {
        while (pos_ < src_.size() && src_[pos_] != '\n') ++pos_;
        continue;
      }
      if (src_.compare(pos_, 2, "/*") == 0) {
        const int start = line_;
        const size_t end = src_.find("*/", pos_ + 2);
        if (end == std::string_view::npos)
          return absl::InvalidArgumentError(
              absl::StrFormat("line %d: unterminated /* comment", start));
        for (size_t i = pos_; i < end; ++i) line_ += src_[i] == '\n';
        pos_ = end + 2;
        continue;
      }
      if (src_[pos_] == '"') {
        const size_t end = src_.find('"', pos_ + 1);
        if (end == std::string_view::npos)
          return absl::InvalidArgumentError(absl::StrFormat("line %d: unterminated string", line_));
        for (size_t i = pos_; i < end; ++i) line_ += src_[i] == '\n';
        pos_ = end + 1;
        continue;
      }
      break;
    }
    const size_t start = pos_;
    const char c = src_[pos_];
    if (c == '.' || is_ident_start(c) || std::isdigit(static_cast<unsigned char>(c))) {
      ++pos_;
      while (pos_ < src_.size() && (is_ident_char(src_[pos_]))) ++pos_;
    } else {
      ++pos_;
    }
    return std::optional<Token>(Token{src_.substr(start, pos_ - start), line_});
  }

 private:
  std::string_view src_;
  size_t pos_ = 0;
  int line_ = 1;
};

struct ScalarType {
  std::string_view spelling;
  ParamType type;
  uint32_t size;
};

constexpr ScalarType kScalarTypes[] = {
    {".u8", ParamType::kU8, 1},   {".s8", ParamType::kS8, 1},   {".u16", ParamType::kU16, 2},
    {".s16", ParamType::kS16, 2}, {".u32", ParamType::kU32, 4}, {".s32", ParamType::kS32, 4},
    {".u64", ParamType::kU64, 8}, {".s64", ParamType::kS64, 8}, {".b8", ParamType::kB8, 1},
    {".b16", ParamType::kB16, 2}, {".b32", ParamType::kB32, 4}, {".b64", ParamType::kB64, 8},
    {".f16", ParamType::kF16, 2}, {".f32", ParamType::kF32, 4}, {".f64", ParamType::kF64, 8},
};

const ScalarType* scalar_type(std::string_view spelling) {
  for (const auto& t : kScalarTypes)
    if (t.spelling == spelling) return &t;
  return nullptr;
}

bool is_state_space(std::string_view t) {
  return t == ".global" || t == ".const" || t == ".local" || t == ".shared";
}

// A PTX integer literal: decimal, 0x hex, 0b binary or 0-prefixed octal, with
// an optional U suffix. nullopt unless it is one and fits in 32 bits.
std::optional<uint64_t> parse_uint(std::string_view t) {
  if (!t.empty() && (t.back() == 'U' || t.back() == 'u')) t.remove_suffix(1);
  if (t.empty() || !std::isdigit(static_cast<unsigned char>(t[0]))) return std::nullopt;
  uint64_t base = 10;
  if (t.size() > 2 && t[0] == '0' && (t[1] == 'x' || t[1] == 'X')) {
    base = 16;
    t.remove_prefix(2);
  } else if (t.size() > 2 && t[0] == '0' && (t[1] == 'b' || t[1] == 'B')) {
    base = 2;
    t.remove_prefix(2);
  } else if (t.size() > 1 && t[0] == '0') {
    base = 8;
    t.remove_prefix(1);
  }
  uint64_t v = 0;
  for (char c : t) {
    const int d = std::isdigit(static_cast<unsigned char>(c)) ? c - '0'
                  : std::isxdigit(static_cast<unsigned char>(c))
                      ? std::tolower(static_cast<unsigned char>(c)) - 'a' + 10
                      : 99;
    if (static_cast<uint64_t>(d) >= base) return std::nullopt;
    v = v * base + static_cast<uint64_t>(d);
    if (v > UINT32_MAX) return std::nullopt;
  }
  return v;
}

// A token as a message shows it: bytes outside printable ASCII in hex.
std::string shown(std::string_view t) {
  std::string out;
  for (char c : t) {
    const auto u = static_cast<unsigned char>(c);
    if (u >= 0x20 && u < 0x7f) {
      out += c;
    } else {
      out += absl::StrFormat("\\x%02x", u);
    }
  }
  return out;
}

class Parser {
 public:
  explicit Parser(std::string_view ptx) : lex_(ptx) {}

  absl::StatusOr<std::vector<KernelSignature>> run() {
    std::vector<KernelSignature> out;
    absl::flat_hash_set<std::string> names;
    for (;;) {
      auto tok = take();
      if (!tok.ok()) return tok.status();
      if (!tok->has_value()) break;
      if ((*tok)->text != ".entry") continue;
      const int line = (*tok)->line;
      if (out.size() >= kMaxEntries)
        return error(line, absl::StrFormat("more than %d entries; not a kernel module", kMaxEntries));
      auto sig = entry();
      if (!sig.ok()) return sig.status();
      if (!names.insert(sig->entry).second)
        return error(line, absl::StrFormat("entry '%s' is declared twice", sig->entry));
      out.push_back(*std::move(sig));
    }
    return out;
  }

 private:
  static absl::Status error(int line, const std::string& what) {
    return absl::InvalidArgumentError(absl::StrFormat("line %d: %s", line, what));
  }

  absl::StatusOr<std::optional<Token>> take() {
    if (peeked_) {
      auto t = std::move(peeked_);
      peeked_.reset();
      return t;
    }
    auto t = lex_.next();
    if (t.ok() && t->has_value()) last_line_ = (*t)->line;
    return t;
  }

  absl::StatusOr<Token> expect_any(std::string_view what) {
    auto t = take();
    if (!t.ok()) return t.status();
    if (!t->has_value())
      return error(last_line_, absl::StrFormat("input ends where %s was expected", what));
    return **t;
  }

  absl::StatusOr<Token> peek_any(std::string_view what) {
    auto t = expect_any(what);
    if (t.ok()) peeked_ = *t;
    return t;
  }

  absl::StatusOr<uint64_t> number(std::string_view context, std::string_view what) {
    auto n = expect_any(what);
    if (!n.ok()) return n.status();
    auto v = parse_uint(n->text);
    if (!v)
      return error(n->line, absl::StrFormat("%s: expected %s, found '%s'", context, what,
                                            shown(n->text)));
    return *v;
  }

  absl::StatusOr<uint64_t> alignment(std::string_view context) {
    auto n = expect_any("an alignment");
    if (!n.ok()) return n.status();
    auto v = parse_uint(n->text);
    if (!v || *v == 0 || *v > kMaxAlign || (*v & (*v - 1)) != 0)
      return error(n->line, absl::StrFormat("%s: bad alignment '%s' (a power of two)", context,
                                            shown(n->text)));
    return *v;
  }

  absl::StatusOr<KernelSignature> entry() {
    KernelSignature sig;
    auto name = expect_any("the entry name");
    if (!name.ok()) return name.status();
    if (!is_identifier(name->text, false))
      return error(name->line, absl::StrFormat("expected an entry name after .entry, found '%s'",
                                               shown(name->text)));
    sig.entry = std::string(name->text);

    auto open = peek_any("'(', a directive or '{'");
    if (!open.ok()) return open.status();
    if (open->text == "(") {
      take().IgnoreError();  // the '(' just peeked
      if (auto st = params(sig); !st.ok()) return st;
    }
    if (auto st = directives(sig); !st.ok()) return st;
    return sig;
  }

  absl::Status params(KernelSignature& sig) {
    uint64_t offset = 0;
    absl::flat_hash_set<std::string> names;
    for (;;) {
      auto t = expect_any("'.param' or ')'");
      if (!t.ok()) return t.status();
      if (t->text == ")") break;
      if (!sig.params.empty()) {
        if (t->text != ",")
          return error(t->line, absl::StrFormat("%s: expected ',' or ')' after parameter #%d, "
                                                "found '%s'",
                                                sig.entry, sig.params.size() - 1, shown(t->text)));
        t = expect_any("'.param'");
        if (!t.ok()) return t.status();
      }
      if (t->text != ".param")
        return error(t->line, absl::StrFormat("%s: expected '.param', found '%s'", sig.entry,
                                              shown(t->text)));
      const int line = t->line;
      if (sig.params.size() >= kMaxParams)
        return error(line, absl::StrFormat("%s: more than %d parameters", sig.entry, kMaxParams));
      auto p = param(sig, line);
      if (!p.ok()) return p.status();
      if (!names.insert(p->name).second)
        return error(line, absl::StrFormat("%s: parameter #%d: the name '%s' is used twice",
                                           sig.entry, sig.params.size(), p->name));
      offset = (offset + p->align - 1) / p->align * p->align;
      if (offset + p->size > kMaxParamsBytes)
        return error(line, absl::StrFormat("%s: parameters exceed %d bytes", sig.entry,
                                           kMaxParamsBytes));
      p->offset = static_cast<uint32_t>(offset);
      offset += p->size;
      sig.params.push_back(*std::move(p));
    }
    sig.params_size = static_cast<uint32_t>(offset);
    return absl::OkStatus();
  }

  // One parameter, after its `.param`.
  absl::StatusOr<Param> param(KernelSignature& sig, int line) {
    const std::string context = absl::StrFormat("%s: parameter #%d", sig.entry, sig.params.size());
    Param p;
    // Leading alignments: the largest one aligns the parameter.
    uint64_t align = 0;
    auto t = expect_any("a parameter type");
    if (!t.ok()) return t.status();
    while (t->text == ".align") {
      auto a = alignment(context);
      if (!a.ok()) return a.status();
      align = std::max(align, *a);
      t = expect_any("a parameter type");
      if (!t.ok()) return t.status();
    }
    const ScalarType* type = scalar_type(t->text);
    if (type == nullptr) {
      if (t->text[0] != '.')
        return error(t->line, absl::StrFormat("%s (%s) has no type", context, shown(t->text)));
      return error(t->line, absl::StrFormat("%s: '%s' is not a parameter type (.u8-.u64, "
                                            ".s8-.s64, .b8-.b64, .f16, .f32, .f64)",
                                            context, shown(t->text)));
    }
    // After the type: `.ptr [<space>] [.align P]` or `.align P`, both about
    // the memory pointed to.
    t = expect_any("a parameter name");
    if (!t.ok()) return t.status();
    if (t->text == ".ptr") {
      t = expect_any("a parameter name");
      if (!t.ok()) return t.status();
      if (is_state_space(t->text)) {
        t = expect_any("a parameter name");
        if (!t.ok()) return t.status();
      }
    }
    if (t->text == ".align") {
      if (auto a = alignment(context); !a.ok()) return a.status();
      t = expect_any("a parameter name");
      if (!t.ok()) return t.status();
    }
    if (scalar_type(t->text) != nullptr)
      return error(t->line, absl::StrFormat("%s has two types", context));
    if (!is_identifier(t->text, true))
      return error(t->line, absl::StrFormat("%s: expected the parameter name, found '%s'%s",
                                            context, shown(t->text),
                                            t->text[0] == '.' ? " (out of place)" : ""));
    p.name = std::string(t->text);

    uint64_t count = 1;
    bool array = false;
    auto next = take();
    if (!next.ok()) return next.status();
    if (next->has_value() && (*next)->text == "[") {
      auto n = expect_any("an array length");
      if (!n.ok()) return n.status();
      auto v = parse_uint(n->text);
      if (!v || *v == 0 || *v > kMaxParamsBytes)
        return error(n->line, absl::StrFormat("%s (%s): bad array length '%s'", context, p.name,
                                              shown(n->text)));
      auto close = expect_any("']'");
      if (!close.ok()) return close.status();
      if (close->text != "]")
        return error(close->line, absl::StrFormat("%s (%s): expected ']'", context, p.name));
      count = *v;
      array = true;
    } else {
      peeked_ = std::move(*next);
    }
    p.type = array ? ParamType::kBytes : type->type;
    p.size = static_cast<uint32_t>(count * type->size);
    const uint64_t effective = std::max<uint64_t>(align, type->size);
    if (effective > kMaxPortableAlign) {
      // Laid out from offset 0 so the list stays well formed; never launched.
      if (sig.unsupported.empty())
        sig.unsupported = absl::StrFormat(
            "line %d: %s (%s) has .align %d: ptxas aligns a parameter above %d bytes within the "
            "constant bank, at an offset that depends on the GPU architecture; align it to at "
            "most %d bytes",
            line, context, p.name, effective, kMaxPortableAlign, kMaxPortableAlign);
    }
    p.align = static_cast<uint32_t>(effective);
    return p;
  }

  // Launch directives up to the body's '{'.
  absl::Status directives(KernelSignature& sig) {
    EntryDirectives& d = sig.directives;
    for (;;) {
      auto t = expect_any("a directive or '{'");
      if (!t.ok()) return t.status();
      const std::string_view name = t->text;
      const int line = t->line;
      if (name == "{") break;
      const std::string context = absl::StrFormat("%s: %s", sig.entry, shown(name));
      // A repeated directive replaces the earlier one, as in ptxas.
      if (name == ".reqntid" || name == ".maxntid" || name == ".reqnctapercluster") {
        Dim3& dims = name == ".reqntid" ? d.reqntid : name == ".maxntid" ? d.maxntid
                                                                           : d.reqnctapercluster;
        auto shape = extents(context);
        if (!shape.ok()) return shape.status();
        dims = *shape;
      } else if (name == ".minnctapersm" || name == ".maxnreg" || name == ".maxclusterrank") {
        uint32_t& value = name == ".minnctapersm" ? d.minnctapersm
                          : name == ".maxnreg"    ? d.maxnreg
                                                  : d.maxclusterrank;
        auto v = number(context, "a count");
        if (!v.ok()) return v.status();
        if (*v == 0) return error(line, absl::StrFormat("%s 0: must be at least 1", context));
        value = static_cast<uint32_t>(*v);
      } else if (name == ".explicitcluster") {
        d.explicitcluster = true;
      } else if (name == ".pragma") {
        // `.pragma "...";` (the lexer drops the string)
        auto semi = expect_any("';'");
        if (!semi.ok()) return semi.status();
        if (semi->text != ";")
          return error(semi->line, absl::StrFormat("%s: expected ';', found '%s'", context,
                                                   shown(semi->text)));
      } else if (name.size() > 1 && name[0] == '.' && is_ident_start(name[1])) {
        // A directive this parser does not know: it cannot change the layout,
        // so skip it and its numeric arguments.
        for (;;) {
          auto arg = peek_any("'{'");
          if (!arg.ok()) return arg.status();
          if (arg->text != "," && !parse_uint(arg->text)) break;
          take().IgnoreError();
        }
      } else {
        return error(line, absl::StrFormat("%s: expected a directive or '{' before the body, "
                                           "found '%s'",
                                           sig.entry, shown(name)));
      }
    }
    if (d.reqntid.x != 0 && d.maxntid.x != 0)
      return error(last_line_, absl::StrFormat("%s: .reqntid and .maxntid cannot both be given",
                                               sig.entry));
    return absl::OkStatus();
  }

  // `x[, y[, z]]`, each at least 1; missing ones are 1.
  absl::StatusOr<Dim3> extents(const std::string& context) {
    uint32_t v[3] = {1, 1, 1};
    for (int i = 0; i < 3; ++i) {
      auto n = number(context, "a positive extent");
      if (!n.ok()) return n.status();
      if (*n == 0) return error(last_line_, absl::StrFormat("%s: an extent of 0", context));
      v[i] = static_cast<uint32_t>(*n);
      auto comma = peek_any("'{'");
      if (!comma.ok()) return comma.status();
      if (comma->text != ",") break;
      take().IgnoreError();
    }
    return Dim3{v[0], v[1], v[2]};
  }

  Lexer lex_;
  std::optional<Token> peeked_;
  int last_line_ = 1;
};

}  // namespace

std::string param_type_name(ParamType type, uint32_t size) {
  if (type == ParamType::kBytes) return absl::StrFormat(".b8[%d]", size);
  for (const auto& t : kScalarTypes)
    if (t.type == type) return std::string(t.spelling);
  return "?";
}

absl::StatusOr<std::vector<KernelSignature>> parse_ptx_signatures(std::string_view ptx) {
  return Parser(ptx).run();
}

namespace {

uint32_t scalar_size(ParamType type) {
  for (const auto& t : kScalarTypes)
    if (t.type == type) return t.size;
  return 0;
}

// The directives as the signature file spells them, one per line.
std::string directives_text(const EntryDirectives& d) {
  std::string out;
  for (const auto& [name, dims] : {std::pair{".reqntid", d.reqntid}, {".maxntid", d.maxntid},
                                   {".reqnctapercluster", d.reqnctapercluster}})
    if (dims.x != 0) absl::StrAppendFormat(&out, "%s %d, %d, %d\n", name, dims.x, dims.y, dims.z);
  for (const auto& [name, value] :
       {std::pair{".minnctapersm", d.minnctapersm}, {".maxnreg", d.maxnreg},
        {".maxclusterrank", d.maxclusterrank}})
    if (value != 0) absl::StrAppendFormat(&out, "%s %d\n", name, value);
  if (d.explicitcluster) out += ".explicitcluster\n";
  return out;
}

std::string param_text(const Param& p) {
  return absl::StrFormat("%s %s (%d bytes, aligned to %d) at offset %d", p.name,
                         param_type_name(p.type, p.size), p.size, p.align, p.offset);
}

}  // namespace

std::string format_signature_file(std::span<const KernelSignature> signatures) {
  std::string out;
  for (const KernelSignature& sig : signatures) {
    absl::StrAppendFormat(&out, "%s.visible .entry %s(", out.empty() ? "" : "\n", sig.entry);
    for (size_t i = 0; i < sig.params.size(); ++i) {
      const Param& p = sig.params[i];
      absl::StrAppendFormat(&out, "%s\n\t.param ", i ? "," : "");
      if (p.type == ParamType::kBytes) {
        absl::StrAppendFormat(&out, ".align %d .b8 %s[%d]", p.align, p.name, p.size);
        continue;
      }
      if (p.align != scalar_size(p.type)) absl::StrAppendFormat(&out, ".align %d ", p.align);
      absl::StrAppendFormat(&out, "%s %s", param_type_name(p.type, p.size), p.name);
    }
    absl::StrAppendFormat(&out, "\n)\n%s{\n}\n", directives_text(sig.directives));
  }
  return out;
}

std::string signature_difference(std::span<const KernelSignature> a, std::string_view a_name,
                                 std::span<const KernelSignature> b, std::string_view b_name) {
  const auto find = [](std::span<const KernelSignature> list, const std::string& entry) {
    for (const KernelSignature& s : list)
      if (s.entry == entry) return &s;
    return static_cast<const KernelSignature*>(nullptr);
  };
  for (const auto& [list, name, other, other_name] :
       {std::tuple{a, a_name, b, b_name}, std::tuple{b, b_name, a, a_name}}) {
    for (const KernelSignature& s : list)
      if (find(other, s.entry) == nullptr)
        return absl::StrFormat("entry %s is in %s but not in %s", s.entry, name, other_name);
  }
  for (const KernelSignature& x : a) {
    const KernelSignature& y = *find(b, x.entry);
    const size_t n = std::min(x.params.size(), y.params.size());
    for (size_t i = 0; i < n; ++i) {
      const Param& p = x.params[i];
      const Param& q = y.params[i];
      if (p.name != q.name || p.type != q.type || p.size != q.size || p.align != q.align ||
          p.offset != q.offset)
        return absl::StrFormat("entry %s: parameter #%d is %s in %s but %s in %s", x.entry, i,
                               param_text(p), a_name, param_text(q), b_name);
    }
    if (x.params.size() != y.params.size())
      return absl::StrFormat("entry %s has %d parameters in %s but %d in %s", x.entry,
                             x.params.size(), a_name, y.params.size(), b_name);
    if (directives_text(x.directives) != directives_text(y.directives))
      return absl::StrFormat("entry %s: the directives are '%s' in %s but '%s' in %s", x.entry,
                             absl::StrReplaceAll(directives_text(x.directives), {{"\n", " "}}),
                             a_name,
                             absl::StrReplaceAll(directives_text(y.directives), {{"\n", " "}}),
                             b_name);
  }
  return {};
}

}  // namespace sparkrt
