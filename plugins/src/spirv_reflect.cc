#include "sparkrt/sdk/spirv_reflect.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <optional>
#include <set>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace sparkrt::sdk::spirv {
namespace {

constexpr uint32_t kMagic = 0x07230203;
constexpr size_t kHeaderWords = 5;
// The id bound of any real kernel module is in the thousands; this keeps a
// hostile bound from sizing tables.
constexpr uint32_t kMaxIdBound = 1u << 22;
constexpr uint32_t kMaxMembers = 4096;

// Opcodes, decorations and enumerants read here (SPIR-V 1.6 unified spec).
enum : uint32_t {
  kOpMemberName = 6,
  kOpEntryPoint = 15,
  kOpExecutionMode = 16,
  kOpTypeBool = 20,
  kOpTypeInt = 21,
  kOpTypeFloat = 22,
  kOpTypeVector = 23,
  kOpTypeArray = 28,
  kOpTypeStruct = 30,
  kOpTypePointer = 32,
  kOpConstant = 43,
  kOpSpecConstantComposite = 51,
  kOpVariable = 59,
  kOpDecorate = 71,
  kOpMemberDecorate = 72,
};
enum : uint32_t {
  kDecorationSpecId = 1,
  kDecorationArrayStride = 6,
  kDecorationBuiltIn = 11,
  kDecorationOffset = 35,
};
constexpr uint32_t kBuiltInWorkgroupSize = 25;
constexpr uint32_t kExecutionModelGLCompute = 5;
constexpr uint32_t kExecutionModeLocalSize = 17;
constexpr uint32_t kStorageClassPushConstant = 9;
constexpr uint32_t kStorageClassPhysicalStorageBuffer = 5349;

struct Type {
  uint32_t opcode = 0;
  uint32_t size = 0;                // bytes; 0 where unknown (an opaque type)
  std::vector<uint32_t> members;    // struct member types
  uint32_t pointee = 0;             // pointer: pointed-to type
  uint32_t storage = 0;             // pointer: storage class
};

struct EntryRecord {
  uint32_t function = 0;
  std::string name;
  std::vector<uint32_t> interface;
  std::array<uint32_t, 3> local_size{1, 1, 1};
};

absl::Status bad(size_t word, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrFormat("SPIR-V word %d: %s", word, what));
}

// A literal string starting at words[first] within an instruction ending
// before words[end]; sets `next` to the word after it.
absl::StatusOr<std::string> literal_string(std::span<const uint32_t> words, size_t first,
                                           size_t end, size_t& next) {
  std::string s;
  for (size_t w = first; w < end; ++w) {
    for (int b = 0; b < 4; ++b) {
      const char c = static_cast<char>((words[w] >> (8 * b)) & 0xff);
      if (c == '\0') {
        next = w + 1;
        return s;
      }
      s += c;
    }
  }
  return bad(first, "a literal string is not NUL-terminated within its instruction");
}

class Reader {
 public:
  explicit Reader(std::span<const uint32_t> words) : words_(words) {}

  absl::StatusOr<Module> run() {
    Module module;
    if (words_[0] != kMagic)
      return bad(0, words_[0] == __builtin_bswap32(kMagic)
                        ? "big-endian SPIR-V; give the module in little-endian words"
                        : "not SPIR-V (no magic number 0x07230203)");
    module.version = words_[1];
    const uint32_t bound = words_[3];
    if (bound == 0 || bound > kMaxIdBound)
      return bad(3, absl::StrFormat("id bound %d is out of range", bound));
    bound_ = bound;
    for (size_t at = kHeaderWords; at < words_.size();) {
      const uint32_t count = words_[at] >> 16;
      const uint32_t opcode = words_[at] & 0xffff;
      if (count == 0) return bad(at, "an instruction of word count 0");
      if (count > words_.size() - at)
        return bad(at, absl::StrFormat("instruction %d of %d words runs past the end", opcode,
                                       count));
      if (auto st = instruction(at, opcode, words_.subspan(at, count)); !st.ok()) return st;
      at += count;
    }
    return finish(std::move(module));
  }

 private:
  absl::Status check_id(size_t at, uint32_t id) const {
    if (id == 0 || id >= bound_) return bad(at, absl::StrFormat("id %d is out of bounds", id));
    return absl::OkStatus();
  }
  // The size of type `id`, or an error for one this reader cannot size.
  absl::StatusOr<uint32_t> size_of(size_t at, uint32_t id) const {
    auto it = types_.find(id);
    if (it == types_.end() || it->second.size == 0)
      return bad(at, absl::StrFormat("type %%%d has no size a push constant can have", id));
    return it->second.size;
  }

  absl::Status instruction(size_t at, uint32_t opcode, std::span<const uint32_t> ins) {
    const size_t n = ins.size();
    const auto need = [&](size_t words) -> absl::Status {
      if (n < words)
        return bad(at, absl::StrFormat("instruction %d has %d words, fewer than %d", opcode, n,
                                       words));
      return absl::OkStatus();
    };
    switch (opcode) {
      case kOpMemberName: {
        if (auto st = need(4); !st.ok()) return st;
        size_t next = 0;
        auto s = literal_string(ins, 3, n, next);
        if (!s.ok()) return bad(at, std::string(s.status().message()));
        member_names_[{ins[1], ins[2]}] = *std::move(s);
        return absl::OkStatus();
      }
      case kOpEntryPoint: {
        if (auto st = need(4); !st.ok()) return st;
        if (ins[1] != kExecutionModelGLCompute) return absl::OkStatus();  // not a kernel
        EntryRecord e;
        e.function = ins[2];
        size_t next = 0;
        auto s = literal_string(ins, 3, n, next);
        if (!s.ok()) return bad(at, std::string(s.status().message()));
        e.name = *std::move(s);
        for (size_t i = next; i < n; ++i) {
          if (auto st = check_id(at, ins[i]); !st.ok()) return st;
          e.interface.push_back(ins[i]);
        }
        for (const EntryRecord& other : entries_)
          if (other.name == e.name)
            return bad(at, absl::StrFormat("two compute entry points are named '%s'", e.name));
        entries_.push_back(std::move(e));
        return absl::OkStatus();
      }
      case kOpExecutionMode: {
        if (auto st = need(3); !st.ok()) return st;
        if (ins[2] != kExecutionModeLocalSize) return absl::OkStatus();
        if (auto st = need(6); !st.ok()) return st;
        local_sizes_[ins[1]] = {ins[3], ins[4], ins[5]};
        return absl::OkStatus();
      }
      case kOpTypeBool:
        return define(at, ins, 2, Type{opcode, 0, {}, 0, 0});
      case kOpTypeInt:
      case kOpTypeFloat: {
        if (auto st = need(3); !st.ok()) return st;
        const uint32_t bits = ins[2];
        if (bits == 0 || bits % 8 != 0 || bits > 64)
          return bad(at, absl::StrFormat("a %d-bit scalar type", bits));
        return define(at, ins, 2, Type{opcode, bits / 8, {}, 0, 0});
      }
      case kOpTypeVector: {
        if (auto st = need(4); !st.ok()) return st;
        if (ins[3] < 2 || ins[3] > 16) return bad(at, "a vector of fewer than 2 or over 16");
        auto elem = size_of(at, ins[2]);
        return define(at, ins, 2, Type{opcode, elem.ok() ? *elem * ins[3] : 0, {}, 0, 0});
      }
      case kOpConstant: {
        if (auto st = need(4); !st.ok()) return st;
        if (auto st = check_id(at, ins[2]); !st.ok()) return st;
        constants_[ins[2]] = ins[3];  // the low word: array lengths fit in it
        return absl::OkStatus();
      }
      case kOpTypeArray: {
        if (auto st = need(4); !st.ok()) return st;
        // Unsized here (0) when the element has no size or the length is a
        // specialization constant (a shared array sized at pipeline creation).
        auto elem = size_of(at, ins[2]);
        auto length = constants_.find(ins[3]);
        if (!elem.ok() || length == constants_.end())
          return define(at, ins, 2, Type{opcode, 0, {}, 0, 0});
        auto stride = array_strides_.find(ins[1]);
        const uint64_t bytes =
            uint64_t{stride != array_strides_.end() ? stride->second : *elem} * length->second;
        if (bytes > UINT32_MAX / 2) return bad(at, "an array of more than 2 GiB");
        return define(at, ins, 2, Type{opcode, static_cast<uint32_t>(bytes), {}, 0, 0});
      }
      case kOpTypeStruct: {
        if (auto st = need(2); !st.ok()) return st;
        if (n - 2 > kMaxMembers) return bad(at, "a struct of too many members");
        Type t{opcode, 0, {ins.begin() + 2, ins.end()}, 0, 0};
        for (uint32_t m : t.members)
          if (auto st = check_id(at, m); !st.ok()) return st;
        return define(at, ins, 2, std::move(t));
      }
      case kOpTypePointer: {
        if (auto st = need(4); !st.ok()) return st;
        if (auto st = check_id(at, ins[3]); !st.ok()) return st;
        // A device address is 8 bytes; other pointers have no size here.
        const uint32_t size = ins[2] == kStorageClassPhysicalStorageBuffer ? 8 : 0;
        return define(at, ins, 2, Type{opcode, size, {}, ins[3], ins[2]});
      }
      case kOpSpecConstantComposite:
        if (auto st = need(3); !st.ok()) return st;
        spec_composites_.insert(ins[2]);
        return absl::OkStatus();
      case kOpVariable: {
        if (auto st = need(4); !st.ok()) return st;
        if (ins[3] == kStorageClassPushConstant) push_constant_vars_[ins[2]] = ins[1];
        return absl::OkStatus();
      }
      case kOpDecorate: {
        if (auto st = need(3); !st.ok()) return st;
        const uint32_t target = ins[1];
        if (auto st = check_id(at, target); !st.ok()) return st;
        if (ins[2] == kDecorationSpecId) {
          if (auto st = need(4); !st.ok()) return st;
          spec_ids_.insert(ins[3]);
        } else if (ins[2] == kDecorationArrayStride) {
          if (auto st = need(4); !st.ok()) return st;
          array_strides_[target] = ins[3];
        } else if (ins[2] == kDecorationBuiltIn) {
          if (auto st = need(4); !st.ok()) return st;
          if (ins[3] == kBuiltInWorkgroupSize) workgroup_size_ids_.insert(target);
        }
        return absl::OkStatus();
      }
      case kOpMemberDecorate: {
        if (auto st = need(4); !st.ok()) return st;
        if (ins[3] == kDecorationOffset) {
          if (auto st = need(5); !st.ok()) return st;
          if (ins[2] >= kMaxMembers) return bad(at, "a member index out of range");
          offsets_[{ins[1], ins[2]}] = ins[4];
        }
        return absl::OkStatus();
      }
      default:
        return absl::OkStatus();
    }
  }

  // Records the type whose result id is ins[result_word].
  absl::Status define(size_t at, std::span<const uint32_t> ins, size_t words, Type t) {
    if (ins.size() < words)
      return bad(at, absl::StrFormat("a type instruction of %d words", ins.size()));
    const uint32_t id = ins[1];
    if (auto st = check_id(at, id); !st.ok()) return st;
    if (!types_.emplace(id, std::move(t)).second)
      return bad(at, absl::StrFormat("id %d is defined twice", id));
    // A struct is sized once its members' offsets are known: at the end.
    return absl::OkStatus();
  }

  // The members of struct `id`, each with its offset and scalar-layout size.
  absl::StatusOr<std::vector<Member>> struct_members(uint32_t id, const char* what) const {
    const size_t at = 0;
    auto block = types_.find(id);
    if (block == types_.end() || block->second.opcode != kOpTypeStruct)
      return bad(at, absl::StrFormat("the %s is not a block (a struct)", what));
    std::vector<Member> members;
    const auto& types = block->second.members;
    for (uint32_t i = 0; i < types.size(); ++i) {
      Member m;
      auto name = member_names_.find({id, i});
      if (name != member_names_.end()) m.name = name->second;
      auto offset = offsets_.find({id, i});
      if (offset == offsets_.end())
        return bad(at, absl::StrFormat("%s member #%d (%s) has no Offset", what, i, m.name));
      m.offset = offset->second;
      auto size = struct_size(types[i], 0);
      if (!size.ok()) return size.status();
      m.size = *size;
      members.push_back(std::move(m));
    }
    return members;
  }

  // The parameters behind push-constant variable `var`: its block's
  // members or, where the block is the argument-buffer address alone, the
  // members of the struct it points to.
  absl::Status block_members(uint32_t var, EntryPoint& entry) const {
    auto ptr = types_.find(push_constant_vars_.at(var));
    if (ptr == types_.end() || ptr->second.opcode != kOpTypePointer)
      return bad(0, absl::StrFormat("push-constant variable %%%d is not of a pointer type", var));
    const uint32_t block = ptr->second.pointee;
    auto members = struct_members(block, "push-constant block");
    if (!members.ok()) return members.status();
    if (members->size() != 1 || (*members)[0].name != kArgumentBufferMember) {
      entry.push_constants = *std::move(members);
      return absl::OkStatus();
    }
    auto address = types_.find(types_.at(block).members[0]);
    if (address == types_.end() || address->second.opcode != kOpTypePointer ||
        address->second.storage != kStorageClassPhysicalStorageBuffer || (*members)[0].offset != 0)
      return bad(0, absl::StrFormat("push constant %s is not a buffer reference at offset 0",
                                    kArgumentBufferMember));
    auto arguments = struct_members(address->second.pointee, "argument buffer");
    if (!arguments.ok()) return arguments.status();
    entry.push_constants = *std::move(arguments);
    entry.argument_buffer = true;
    return absl::OkStatus();
  }

  // Scalar-layout size of `id`; structs from their last member's end.
  absl::StatusOr<uint32_t> struct_size(uint32_t id, int depth) const {
    if (depth > 16) return bad(0, "structs nested more than 16 deep");
    auto it = types_.find(id);
    if (it == types_.end()) return bad(0, absl::StrFormat("type %%%d is not defined", id));
    const Type& t = it->second;
    if (t.opcode != kOpTypeStruct) return size_of(0, id);
    uint64_t end = 0;
    for (uint32_t i = 0; i < t.members.size(); ++i) {
      auto offset = offsets_.find({id, i});
      if (offset == offsets_.end())
        return bad(0, absl::StrFormat("member #%d of struct %%%d has no Offset", i, id));
      auto size = struct_size(t.members[i], depth + 1);
      if (!size.ok()) return size.status();
      end = std::max<uint64_t>(end, uint64_t{offset->second} + *size);
    }
    if (end > UINT32_MAX / 2) return bad(0, "a struct of more than 2 GiB");
    return static_cast<uint32_t>(end);
  }

  absl::StatusOr<Module> finish(Module module) {
    for (const EntryRecord& e : entries_) {
      EntryPoint entry;
      entry.name = e.name;
      if (auto it = local_sizes_.find(e.function); it != local_sizes_.end())
        entry.local_size = it->second;
      std::vector<uint32_t> blocks;
      for (uint32_t id : e.interface)
        if (push_constant_vars_.contains(id)) blocks.push_back(id);
      // Before SPIR-V 1.4 the interface lists inputs and outputs only: a
      // module's only push-constant block is then taken to be every entry's.
      if (module.version < 0x00010400 && push_constant_vars_.size() == 1)
        blocks = {push_constant_vars_.begin()->first};
      if (module.version < 0x00010400 && push_constant_vars_.size() > 1)
        return absl::InvalidArgumentError(absl::StrFormat(
            "SPIR-V %d.%d module with several push-constant blocks: which one entry %s uses is "
            "not stated before SPIR-V 1.4; compile for Vulkan 1.2 or later (SPIR-V 1.5)",
            module.version >> 16, (module.version >> 8) & 0xff, e.name));
      if (blocks.size() > 1)
        return absl::InvalidArgumentError(
            absl::StrFormat("entry %s uses %d push-constant blocks; Vulkan allows one", e.name,
                            blocks.size()));
      if (!blocks.empty()) {
        if (auto st = block_members(blocks[0], entry); !st.ok())
          return absl::InvalidArgumentError(
              absl::StrFormat("entry %s: %s", e.name, st.message()));
      }
      module.entries.push_back(std::move(entry));
    }
    module.spec_ids.assign(spec_ids_.begin(), spec_ids_.end());
    for (uint32_t id : workgroup_size_ids_)
      module.workgroup_size_is_spec |= spec_composites_.contains(id);
    return module;
  }

  std::span<const uint32_t> words_;
  uint32_t bound_ = 0;
  std::map<uint32_t, Type> types_;
  std::map<std::pair<uint32_t, uint32_t>, std::string> member_names_;
  std::map<std::pair<uint32_t, uint32_t>, uint32_t> offsets_;
  std::map<uint32_t, uint32_t> array_strides_;
  std::map<uint32_t, uint32_t> constants_;
  std::map<uint32_t, uint32_t> push_constant_vars_;  // variable -> pointer type
  std::map<uint32_t, std::array<uint32_t, 3>> local_sizes_;
  std::set<uint32_t> spec_ids_;
  std::set<uint32_t> spec_composites_;
  std::set<uint32_t> workgroup_size_ids_;
  std::vector<EntryRecord> entries_;
};

}  // namespace

const EntryPoint* Module::find(std::string_view name) const {
  for (const EntryPoint& e : entries)
    if (e.name == name) return &e;
  return nullptr;
}

bool Module::has_spec_id(uint32_t id) const {
  return std::binary_search(spec_ids.begin(), spec_ids.end(), id);
}

std::string Module::entry_names() const {
  std::vector<std::string> names;
  for (const EntryPoint& e : entries) names.push_back(e.name);
  return names.empty() ? "none" : absl::StrJoin(names, ", ");
}

absl::StatusOr<Module> reflect(std::string_view bytes) {
  if (bytes.size() % 4 != 0)
    return absl::InvalidArgumentError(
        absl::StrFormat("SPIR-V: %d bytes is not a whole number of 4-byte words", bytes.size()));
  if (bytes.size() < kHeaderWords * 4)
    return absl::InvalidArgumentError(
        absl::StrFormat("SPIR-V: %d bytes is shorter than the 20-byte header", bytes.size()));
  // Copied into words: the bytes need not be 4-byte aligned.
  std::vector<uint32_t> words(bytes.size() / 4);
  std::memcpy(words.data(), bytes.data(), bytes.size());
  return Reader(words).run();
}

absl::Status check_push_constants(const EntryPoint& entry,
                                  std::span<const SparkrtParamInfo> params) {
  const auto& members = entry.push_constants;
  const char* kind = entry.argument_buffer ? "argument-buffer member" : "push constant";
  const size_t n = std::min(members.size(), params.size());
  for (size_t i = 0; i < n; ++i) {
    const Member& m = members[i];
    if (m.offset != params[i].offset || m.size != params[i].size)
      return absl::FailedPreconditionError(absl::StrFormat(
          "entry %s: %s #%d (%s) is %d bytes at offset %d, but the signature's parameter #%d "
          "is %d bytes at offset %d",
          entry.name, kind, i, m.name.empty() ? "unnamed" : m.name, m.size, m.offset, i,
          params[i].size, params[i].offset));
  }
  if (members.size() != params.size())
    return absl::FailedPreconditionError(absl::StrFormat(
        "entry %s has %d %ss, but its signature has %d parameters", entry.name, members.size(),
        kind, params.size()));
  return absl::OkStatus();
}

}  // namespace sparkrt::sdk::spirv
