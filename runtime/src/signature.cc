// PTX entry-signature parser. Reads only what precedes each kernel body:
//   [.visible|.weak] .entry <name> ( .param <qualifiers> <name>[<N>], ... )
// Bodies, functions and directives are skipped. Inputs are untrusted, so
// every size is bounded and every error names the line.
#include "sparkrt/signature.h"

#include <cctype>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_format.h"

namespace sparkrt {
namespace {

// Far above any real kernel (CUDA allows 32764 bytes of parameters), low
// enough that hostile sizes cannot overflow 32-bit offsets.
constexpr uint64_t kMaxParamsBytes = 1 << 20;
constexpr size_t kMaxParams = 4096;
constexpr size_t kMaxEntries = 100000;

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
  return t == ".ptr" || t == ".global" || t == ".const" || t == ".local" || t == ".shared";
}

std::optional<uint64_t> parse_uint(std::string_view t) {
  if (t.empty() || t.size() > 10) return std::nullopt;
  uint64_t v = 0;
  for (char c : t) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return std::nullopt;
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  return v;
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
      auto sig = entry((*tok)->line);
      if (!sig.ok()) return sig.status();
      if (!names.insert(sig->entry).second)
        return absl::InvalidArgumentError(absl::StrFormat(
            "line %d: entry '%s' is declared twice", (*tok)->line, sig->entry));
      if (out.size() >= kMaxEntries)
        return absl::InvalidArgumentError("more than 100000 entries; not a kernel module");
      out.push_back(*std::move(sig));
    }
    return out;
  }

 private:
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
      return absl::InvalidArgumentError(
          absl::StrFormat("line %d: input ends where %s was expected", last_line_, what));
    return **t;
  }

  absl::StatusOr<KernelSignature> entry(int line) {
    KernelSignature sig;
    auto name = expect_any("the entry name");
    if (!name.ok()) return name.status();
    if (!is_ident_start(name->text[0]))
      return absl::InvalidArgumentError(absl::StrFormat(
          "line %d: expected an entry name after .entry, found '%s'", name->line, name->text));
    sig.entry = std::string(name->text);

    auto open = expect_any("'(' or '{'");
    if (!open.ok()) return open.status();
    if (open->text != "(") return sig;  // no parameter list

    uint64_t offset = 0;
    for (;;) {
      auto t = expect_any("'.param' or ')'");
      if (!t.ok()) return t.status();
      if (t->text == ")") break;
      if (!sig.params.empty()) {
        if (t->text != ",")
          return absl::InvalidArgumentError(absl::StrFormat(
              "line %d: %s: expected ',' or ')' after parameter #%d, found '%s'", t->line,
              sig.entry, sig.params.size() - 1, t->text));
        t = expect_any("'.param'");
        if (!t.ok()) return t.status();
      }
      if (t->text != ".param")
        return absl::InvalidArgumentError(absl::StrFormat(
            "line %d: %s: expected '.param', found '%s'", t->line, sig.entry, t->text));
      auto p = param(sig.entry, sig.params.size());
      if (!p.ok()) return p.status();
      offset = (offset + p->align - 1) / p->align * p->align;
      if (offset + p->size > kMaxParamsBytes)
        return absl::InvalidArgumentError(absl::StrFormat(
            "line %d: %s: parameters exceed %d bytes", line, sig.entry, kMaxParamsBytes));
      p->offset = static_cast<uint32_t>(offset);
      offset += p->size;
      if (sig.params.size() >= kMaxParams)
        return absl::InvalidArgumentError(
            absl::StrFormat("line %d: %s: more than %d parameters", line, sig.entry, kMaxParams));
      sig.params.push_back(*std::move(p));
    }
    sig.params_size = static_cast<uint32_t>(offset);
    return sig;
  }

  absl::StatusOr<Param> param(const std::string& entry, size_t index) {
    Param p;
    const ScalarType* type = nullptr;
    uint64_t align = 0;
    for (;;) {
      auto t = expect_any("a parameter type or name");
      if (!t.ok()) return t.status();
      if (t->text == ".align") {
        auto n = expect_any("an alignment");
        if (!n.ok()) return n.status();
        auto v = parse_uint(n->text);
        if (!v || *v == 0 || *v > 4096 || (*v & (*v - 1)) != 0)
          return absl::InvalidArgumentError(absl::StrFormat(
              "line %d: %s: parameter #%d: bad alignment '%s' (a power of two up to 4096)",
              n->line, entry, index, n->text));
        align = *v;
      } else if (const ScalarType* st = scalar_type(t->text)) {
        if (type != nullptr)
          return absl::InvalidArgumentError(absl::StrFormat(
              "line %d: %s: parameter #%d has two types", t->line, entry, index));
        type = st;
      } else if (is_state_space(t->text)) {
        continue;
      } else if (is_ident_start(t->text[0])) {
        p.name = std::string(t->text);
        break;
      } else {
        return absl::InvalidArgumentError(absl::StrFormat(
            "line %d: %s: parameter #%d: unexpected '%s'", t->line, entry, index, t->text));
      }
    }
    if (type == nullptr)
      return absl::InvalidArgumentError(absl::StrFormat(
          "line %d: %s: parameter #%d (%s) has no type", last_line_, entry, index, p.name));
    uint64_t count = 1;
    bool array = false;
    auto t = take();
    if (!t.ok()) return t.status();
    if (t->has_value() && (*t)->text == "[") {
      auto n = expect_any("an array length");
      if (!n.ok()) return n.status();
      auto v = parse_uint(n->text);
      if (!v || *v == 0 || *v > kMaxParamsBytes)
        return absl::InvalidArgumentError(absl::StrFormat(
            "line %d: %s: parameter #%d (%s): bad array length '%s'", n->line, entry, index,
            p.name, n->text));
      auto close = expect_any("']'");
      if (!close.ok()) return close.status();
      if (close->text != "]")
        return absl::InvalidArgumentError(absl::StrFormat(
            "line %d: %s: parameter #%d (%s): expected ']'", close->line, entry, index, p.name));
      count = *v;
      array = true;
    } else {
      peeked_ = std::move(*t);
    }
    p.type = array ? ParamType::kBytes : type->type;
    p.size = static_cast<uint32_t>(count * type->size);
    p.align = static_cast<uint32_t>(align != 0 ? align : type->size);
    return p;
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

}  // namespace sparkrt
