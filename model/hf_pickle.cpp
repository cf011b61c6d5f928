// A restricted pickle VM for torch state dicts (reference/deberta-v2.md §11.1).
//
// Note [Why a pickle VM cannot run code here]
// Python's unpickler imports any module.name a GLOBAL names and calls it on REDUCE: that is how a malicious
// checkpoint runs os.system. This VM has no way to call anything: GLOBAL only produces a tag for one of the
// names on the allow-list (anything else is rejected on the spot), and REDUCE interprets the few tags it
// knows (OrderedDict(), _rebuild_tensor_v2(...), _rebuild_parameter(...)) by building plain data.
//
// Values live in one pool and refer to each other by index, so cyclic references built through the memo
// (a list appended to itself) are harmless and freed with the pool. Every read is bounds-checked; every
// opcode consumes at least one byte, so the work is linear in the pickle size.
#include <cstring>
#include <string>
#include <unordered_map>
#include <vector>

#include "model/hf_readers.h"
#include "runtime/check.h"

namespace zt {
namespace {

enum class Kind : uint8_t {
  none,
  boolean,
  integer,
  floating,
  string,
  tuple,
  list,
  dict,
  global,
  storage,
  tensor,
  mark_sentinel
};

enum class Global : uint8_t { ordered_dict, rebuild_tensor_v2, rebuild_parameter, storage_class };

struct Value {
  Kind kind = Kind::none;
  int64_t integer = 0;          // integer, boolean
  std::string text;             // string; storage key
  std::vector<uint32_t> items;  // tuple/list elements; dict as key, value, key, value, ...
  Global global{};              // global
  StoredDType dtype{};          // global storage_class, storage
  PickledTensor tensor;         // tensor
};

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::none:
      return "None";
    case Kind::boolean:
      return "bool";
    case Kind::integer:
      return "int";
    case Kind::floating:
      return "float";
    case Kind::string:
      return "str";
    case Kind::tuple:
      return "tuple";
    case Kind::list:
      return "list";
    case Kind::dict:
      return "dict";
    case Kind::global:
      return "global";
    case Kind::storage:
      return "storage";
    case Kind::tensor:
      return "tensor";
    case Kind::mark_sentinel:
      return "mark";
  }
  return "?";
}

struct StorageClass {
  const char* name;
  StoredDType dtype;
};
constexpr StorageClass kStorageClasses[] = {
    {"FloatStorage", StoredDType::f32},     {"HalfStorage", StoredDType::f16},
    {"BFloat16Storage", StoredDType::bf16}, {"DoubleStorage", StoredDType::f64},
    {"LongStorage", StoredDType::i64},      {"IntStorage", StoredDType::i32},
    {"ShortStorage", StoredDType::i16},     {"CharStorage", StoredDType::i8},
    {"ByteStorage", StoredDType::u8},       {"BoolStorage", StoredDType::boolean}};

class PickleMachine {
 public:
  PickleMachine(ByteSpan bytes, const std::string& source) : bytes_(bytes), source_(source) {}

  std::vector<PickledTensor> run();

 private:
  [[noreturn]] void fail(const std::string& message) const {
    ZT_FAIL("pickle: ", message, " (", source_, ", byte ", opcode_pos_, ")");
  }
  void need(size_t n) const {
    if (n > bytes_.size() - pos_) fail(str("truncated: needs ", n, " more bytes"));
  }
  uint64_t read_le(size_t n) {
    need(n);
    uint64_t v = 0;
    for (size_t i = n; i-- > 0;) v = (v << 8) | bytes_[pos_ + i];
    pos_ += n;
    return v;
  }
  std::string read_bytes(uint64_t n) {
    if (n > bytes_.size() - pos_) fail(str("truncated: a ", n, "-byte string runs past the end"));
    std::string s(reinterpret_cast<const char*>(bytes_.data() + pos_), static_cast<size_t>(n));
    pos_ += static_cast<size_t>(n);
    return s;
  }
  std::string read_line() {
    for (size_t i = pos_; i < bytes_.size(); ++i) {
      if (bytes_[i] == '\n') {
        std::string s(reinterpret_cast<const char*>(bytes_.data() + pos_), i - pos_);
        pos_ = i + 1;
        return s;
      }
    }
    fail("truncated: unterminated text line");
  }

  uint32_t make(Value v) {
    if (pool_.size() >= kMaxValues) fail("too many objects");
    pool_.push_back(std::move(v));
    return static_cast<uint32_t>(pool_.size() - 1);
  }
  uint32_t make_kind(Kind k) {
    Value v;
    v.kind = k;
    return make(std::move(v));
  }
  uint32_t make_int(int64_t i, Kind k = Kind::integer) {
    Value v;
    v.kind = k;
    v.integer = i;
    return make(std::move(v));
  }
  void push(uint32_t v) { stack_.push_back(v); }
  uint32_t pop() {
    if (stack_.empty() || (!marks_.empty() && stack_.size() == marks_.back())) fail("stack underflow");
    uint32_t v = stack_.back();
    stack_.pop_back();
    return v;
  }
  uint32_t top() {
    if (stack_.empty() || (!marks_.empty() && stack_.size() == marks_.back())) fail("stack underflow");
    return stack_.back();
  }
  // Pops everything above the last MARK.
  std::vector<uint32_t> pop_mark() {
    if (marks_.empty()) fail("no MARK on the stack");
    size_t m = marks_.back();
    marks_.pop_back();
    std::vector<uint32_t> items(stack_.begin() + static_cast<std::ptrdiff_t>(m), stack_.end());
    stack_.resize(m);
    return items;
  }
  Value& at(uint32_t i) { return pool_[i]; }
  Value& expect(uint32_t i, Kind k, const char* what) {
    if (pool_[i].kind != k) fail(str(what, " must be a ", kind_name(k), ", got ", kind_name(pool_[i].kind)));
    return pool_[i];
  }
  void memo_put(uint64_t key) {
    if (memo_.size() >= kMaxValues) fail("memo too large");
    memo_[key] = top();
  }
  void memo_get(uint64_t key) {
    auto it = memo_.find(key);
    if (it == memo_.end()) fail(str("memo key ", key, " was never stored"));
    push(it->second);
  }

  uint32_t make_global(const std::string& module, const std::string& name);
  uint32_t call(uint32_t callable, uint32_t args);
  uint32_t persistent_load(uint32_t pid);
  std::vector<int64_t> int_tuple(uint32_t v, const char* what);
  void add_items(uint32_t container, const std::vector<uint32_t>& items);

  static constexpr size_t kMaxValues = size_t{1} << 24;
  ByteSpan bytes_;
  const std::string& source_;
  size_t pos_ = 0;
  size_t opcode_pos_ = 0;
  std::vector<Value> pool_;
  std::vector<uint32_t> stack_;
  std::vector<size_t> marks_;
  std::unordered_map<uint64_t, uint32_t> memo_;
};

uint32_t PickleMachine::make_global(const std::string& module, const std::string& name) {
  Value v;
  v.kind = Kind::global;
  if (module == "collections" && name == "OrderedDict") {
    v.global = Global::ordered_dict;
  } else if (module == "torch._utils" && name == "_rebuild_tensor_v2") {
    v.global = Global::rebuild_tensor_v2;
  } else if (module == "torch._utils" && name == "_rebuild_parameter") {
    v.global = Global::rebuild_parameter;
  } else {
    bool found = false;
    if (module == "torch") {
      for (const StorageClass& c : kStorageClasses) {
        if (name == c.name) {
          v.global = Global::storage_class;
          v.dtype = c.dtype;
          found = true;
        }
      }
    }
    if (!found) {
      std::string shown = module + "." + name;
      for (char& c : shown) {
        if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f) c = '?';
      }
      ZT_FAIL("pickle: global '", shown, "' is not allowed in a state dict (", source_, ", byte ",
              opcode_pos_, ")");
    }
  }
  return make(std::move(v));
}

std::vector<int64_t> PickleMachine::int_tuple(uint32_t v, const char* what) {
  const Value& t = at(v);
  if (t.kind != Kind::tuple && t.kind != Kind::list) fail(str(what, " must be a tuple of ints"));
  std::vector<int64_t> out;
  for (uint32_t i : t.items) out.push_back(expect(i, Kind::integer, what).integer);
  return out;
}

uint32_t PickleMachine::persistent_load(uint32_t pid) {
  // ('storage', torch.<T>Storage, key, location, numel)
  const Value& t = at(pid);
  if (t.kind != Kind::tuple || t.items.size() != 5) fail("persistent id must be a 5-tuple ('storage', ...)");
  std::vector<uint32_t> f = t.items;
  if (expect(f[0], Kind::string, "persistent id tag").text != "storage")
    fail("persistent id tag is not 'storage'");
  const Value& cls = expect(f[1], Kind::global, "storage class");
  if (cls.global != Global::storage_class) fail("persistent id does not name a torch storage class");
  Value s;
  s.kind = Kind::storage;
  s.dtype = cls.dtype;
  s.text = expect(f[2], Kind::string, "storage key").text;
  expect(f[3], Kind::string, "storage location");
  s.integer = expect(f[4], Kind::integer, "storage numel").integer;
  if (s.integer < 0) fail("negative storage size");
  return make(std::move(s));
}

uint32_t PickleMachine::call(uint32_t callable, uint32_t args_index) {
  const Value& fn = expect(callable, Kind::global, "REDUCE callable");
  const std::vector<uint32_t> args = expect(args_index, Kind::tuple, "REDUCE arguments").items;
  switch (fn.global) {
    case Global::ordered_dict:
      if (!args.empty()) fail("OrderedDict(...) with arguments is not supported");
      return make_kind(Kind::dict);
    case Global::rebuild_parameter:
      // _rebuild_parameter(data, requires_grad, backward_hooks) -> the tensor
      if (args.size() < 1) fail("_rebuild_parameter needs a tensor");
      expect(args[0], Kind::tensor, "_rebuild_parameter data");
      return args[0];
    case Global::rebuild_tensor_v2: {
      // _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad, backward_hooks[, metadata])
      if (args.size() < 4) fail("_rebuild_tensor_v2 needs (storage, offset, size, stride, ...)");
      Value v;
      v.kind = Kind::tensor;
      const Value& storage = expect(args[0], Kind::storage, "_rebuild_tensor_v2 storage");
      v.tensor.storage = {storage.text, storage.dtype, storage.integer};
      v.tensor.offset = expect(args[1], Kind::integer, "_rebuild_tensor_v2 storage_offset").integer;
      v.tensor.shape = int_tuple(args[2], "_rebuild_tensor_v2 size");
      v.tensor.strides = int_tuple(args[3], "_rebuild_tensor_v2 stride");
      if (v.tensor.shape.size() != v.tensor.strides.size()) fail("tensor size and stride ranks differ");
      return make(std::move(v));
    }
    case Global::storage_class:
      fail("calling a storage class is not allowed in a state dict");
  }
  fail("unknown callable");
}

void PickleMachine::add_items(uint32_t container, const std::vector<uint32_t>& items) {
  Value& c = at(container);
  if (c.kind == Kind::list) {
    c.items.insert(c.items.end(), items.begin(), items.end());
  } else if (c.kind == Kind::dict) {
    if (items.size() % 2 != 0) fail("SETITEMS with an odd number of items");
    c.items.insert(c.items.end(), items.begin(), items.end());  // duplicates are resolved at STOP
  } else {
    fail(str("cannot add items to a ", kind_name(c.kind)));
  }
}

std::vector<PickledTensor> PickleMachine::run() {
  while (true) {
    opcode_pos_ = pos_;
    need(1);
    const uint8_t op = bytes_[pos_++];
    switch (op) {
      case 0x80:  // PROTO n
        if (read_le(1) > 5) fail("unsupported pickle protocol");
        break;
      case 0x95:  // FRAME u64 length: framing only, the opcodes continue inline
        read_le(8);
        break;
      case '.': {  // STOP
        if (stack_.size() != 1 || !marks_.empty()) fail("STOP with a malformed stack");
        const Value& root = at(stack_.back());
        if (root.kind != Kind::dict)
          fail(str("top-level object is a ", kind_name(root.kind), ", not a state dict"));
        std::vector<PickledTensor> out;
        std::unordered_map<std::string, size_t> index;  // a repeated key replaces the value (dict semantics)
        for (size_t i = 0; i < root.items.size(); i += 2) {
          const Value& key = at(root.items[i]);
          if (key.kind != Kind::string) fail("state dict key is not a string");
          const Value& value = at(root.items[i + 1]);
          if (value.kind != Kind::tensor) {
            fail(str("state dict entry '", key.text, "' is a ", kind_name(value.kind), ", not a tensor"));
          }
          PickledTensor t = value.tensor;
          t.name = key.text;
          auto [it, fresh] = index.emplace(t.name, out.size());
          if (fresh) {
            out.push_back(std::move(t));
          } else {
            out[it->second] = std::move(t);
          }
        }
        return out;
      }
      case '(':  // MARK
        if (marks_.size() > 4096) fail("too many nested MARKs");
        marks_.push_back(stack_.size());
        break;
      case '0':  // POP
        pop();
        break;
      case '1':  // POP_MARK
        pop_mark();
        break;
      case '2':  // DUP
        push(top());
        break;
      case 'N':
        push(make_kind(Kind::none));
        break;
      case 0x88:  // NEWTRUE
        push(make_int(1, Kind::boolean));
        break;
      case 0x89:  // NEWFALSE
        push(make_int(0, Kind::boolean));
        break;
      case 'J':  // BININT i32
        push(make_int(static_cast<int32_t>(read_le(4))));
        break;
      case 'K':  // BININT1 u8
        push(make_int(static_cast<int64_t>(read_le(1))));
        break;
      case 'M':  // BININT2 u16
        push(make_int(static_cast<int64_t>(read_le(2))));
        break;
      case 0x8a: {  // LONG1: n bytes of two's-complement little-endian
        const uint64_t n = read_le(1);
        if (n > 8) fail("integer wider than 64 bits");
        uint64_t v = n == 0 ? 0 : read_le(static_cast<size_t>(n));
        if (n > 0 && n < 8 && (v >> (8 * n - 1)) & 1) v |= ~uint64_t{0} << (8 * n);  // sign-extend
        push(make_int(static_cast<int64_t>(v)));
        break;
      }
      case 'G': {  // BINFLOAT: big-endian f64
        need(8);
        uint64_t bits = 0;
        for (int i = 0; i < 8; ++i) bits = (bits << 8) | bytes_[pos_ + static_cast<size_t>(i)];
        pos_ += 8;
        Value v;
        v.kind = Kind::floating;
        v.integer = static_cast<int64_t>(bits);
        push(make(std::move(v)));
        break;
      }
      case 'X':     // BINUNICODE u32 length
      case 'T':     // BINSTRING i32 length
      case 'B':     // BINBYTES u32 length
      case 'U':     // SHORT_BINSTRING u8 length
      case 'C':     // SHORT_BINBYTES u8 length
      case 0x8c:    // SHORT_BINUNICODE u8 length
      case 0x8d: {  // BINUNICODE8 u64 length
        const size_t width = (op == 'U' || op == 'C' || op == 0x8c) ? 1 : op == 0x8d ? 8 : 4;
        Value v;
        v.kind = Kind::string;
        v.text = read_bytes(read_le(width));
        push(make(std::move(v)));
        break;
      }
      case ')':
        push(make_kind(Kind::tuple));
        break;
      case ']':
        push(make_kind(Kind::list));
        break;
      case '}':
        push(make_kind(Kind::dict));
        break;
      case 't':    // TUPLE from MARK
      case 'l':    // LIST from MARK
      case 'd': {  // DICT from MARK
        std::vector<uint32_t> items = pop_mark();
        uint32_t c = make_kind(op == 't' ? Kind::tuple : op == 'l' ? Kind::list : Kind::dict);
        if (op == 'd') {
          add_items(c, items);
        } else {
          at(c).items = std::move(items);
        }
        push(c);
        break;
      }
      case 0x85:  // TUPLE1..3
      case 0x86:
      case 0x87: {
        const size_t n = op - 0x84u;
        std::vector<uint32_t> items(n);
        for (size_t i = n; i-- > 0;) items[i] = pop();
        uint32_t c = make_kind(Kind::tuple);
        at(c).items = std::move(items);
        push(c);
        break;
      }
      case 'a': {  // APPEND
        uint32_t v = pop();
        add_items(top(), {v});
        break;
      }
      case 'e': {  // APPENDS
        std::vector<uint32_t> items = pop_mark();
        add_items(top(), items);
        break;
      }
      case 's': {  // SETITEM
        uint32_t v = pop();
        uint32_t k = pop();
        add_items(top(), {k, v});
        break;
      }
      case 'u': {  // SETITEMS
        std::vector<uint32_t> items = pop_mark();
        add_items(top(), items);
        break;
      }
      case 'q':  // BINPUT u8
        memo_put(read_le(1));
        break;
      case 'r':  // LONG_BINPUT u32
        memo_put(read_le(4));
        break;
      case 0x94:  // MEMOIZE
        memo_put(memo_.size());
        break;
      case 'h':  // BINGET u8
        memo_get(read_le(1));
        break;
      case 'j':  // LONG_BINGET u32
        memo_get(read_le(4));
        break;
      case 'c': {  // GLOBAL "module\nname\n"
        std::string module = read_line();
        std::string name = read_line();
        push(make_global(module, name));
        break;
      }
      case 0x93: {  // STACK_GLOBAL
        uint32_t name = pop();
        uint32_t module = pop();
        const std::string n = expect(name, Kind::string, "STACK_GLOBAL name").text;
        const std::string m = expect(module, Kind::string, "STACK_GLOBAL module").text;
        push(make_global(m, n));
        break;
      }
      case 'R':     // REDUCE callable(*args)
      case 0x81: {  // NEWOBJ cls.__new__(cls, *args): same allow-list
        uint32_t args = pop();
        uint32_t callable = pop();
        push(call(callable, args));
        break;
      }
      case 'Q': {  // BINPERSID
        uint32_t pid = pop();
        push(persistent_load(pid));
        break;
      }
      case 'b':  // BUILD: object state (OrderedDict _metadata, parameter attributes) is not needed
        pop();
        top();
        break;
      default:
        fail(str("opcode 0x", "0123456789abcdef"[op >> 4], "0123456789abcdef"[op & 15],
                 " is not allowed in a state dict"));
    }
  }
}

}  // namespace

std::vector<PickledTensor> read_pickled_state_dict(ByteSpan pickle, const std::string& source) {
  PickleMachine machine(pickle, source);
  return machine.run();
}

}  // namespace zt
