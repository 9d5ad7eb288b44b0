// A small JSON reader and writer for the files forestcc loads itself (plan files, the tuning
// table): RFC 8259 text in, a tree of `json::Value` out, with the line and column of every value so
// a loader can say where a bad field is. Written here rather than taken from a third party to keep
// libforestcc free of dependencies; it is control-plane code (parsed once, never per call).
//
// Numbers keep their integer-ness: an integer literal that fits is Int (int64) or UInt (above
// INT64_MAX, up to UINT64_MAX); fractions and exponents are Double. An integer literal too large
// for 64 bits is also a Double, but `integerOverflow()` says so, so a loader can report
// "out of range" instead of silently rounding.
#pragma once

#include <cstdint>
#include <functional>
#include <new>
#include <string>
#include <string_view>

#include "forestcc/error.hpp"
#include <utility>
#include <vector>

namespace forestcc::json {

enum class Type : uint8_t { Null, Bool, Int, UInt, Double, String, Array, Object };

// "null", "boolean", "integer", "integer", "number", "string", "array", "object": for messages.
const char* typeName(Type type);

class Value {
 public:
  using Array = std::vector<Value>;
  using Member = std::pair<std::string, Value>;
  using Object = std::vector<Member>;  // in file order; keys are unique (duplicates are refused)

  Value() {}  // null
  explicit Value(bool b) : type_(Type::Bool), bool_(b) {}
  explicit Value(int64_t i) : type_(Type::Int), int_(i) {}
  explicit Value(uint64_t u);  // Int when it fits, else UInt
  explicit Value(double d) : type_(Type::Double), double_(d) {}
  explicit Value(std::string s) : type_(Type::String) { new (&string_) std::string(std::move(s)); }
  explicit Value(const char* s) : Value(std::string(s)) {}
  Value(const Value& other);
  Value(Value&& other) noexcept;
  Value& operator=(const Value& other);
  Value& operator=(Value&& other) noexcept;
  ~Value() { destroyPayload(); }
  // An integer too large for 64 bits, from its decimal text ("-" and digits).
  static Value overflowedInteger(const std::string& digits);
  static Value array(Array items = {});
  static Value object(Object members = {});

  Type type() const { return type_; }
  const char* typeName() const { return json::typeName(type_); }
  bool isNull() const { return type_ == Type::Null; }
  bool isBool() const { return type_ == Type::Bool; }
  bool isInteger() const { return type_ == Type::Int || type_ == Type::UInt; }
  bool isNumber() const { return isInteger() || type_ == Type::Double; }
  bool isString() const { return type_ == Type::String; }
  bool isArray() const { return type_ == Type::Array; }
  bool isObject() const { return type_ == Type::Object; }
  // An integer literal outside [INT64_MIN, UINT64_MAX], kept as the nearest double.
  bool integerOverflow() const { return overflow_; }
  // Its decimal text ("" unless integerOverflow()).
  const std::string& integerText() const { return overflow_ ? string_ : kEmpty; }

  // Accessors throw Error(InvalidUsage, "line:col: expected ..., found ...") on the wrong type.
  bool asBool() const;
  int64_t asInt64() const;    // Int only (a UInt is out of range)
  uint64_t asUInt64() const;  // a non-negative Int or a UInt
  double asDouble() const;    // any number
  const std::string& asString() const;
  const Array& asArray() const;
  const Object& asObject() const;
  Array& asArray();
  Object& asObject();

  // Object member by key, nullptr when absent (or when this is not an object).
  const Value* find(const std::string& key) const;
  // Appends a member (builders; the parser refuses duplicates, this does not check).
  void set(std::string key, Value value);
  void push(Value value);

  // Where the value starts in its source text (1-based); 0 for values built in code.
  int line() const { return line_; }
  int column() const { return column_; }
  // "line:col" of this value, for messages.
  std::string where() const;

 private:
  friend class Parser;
  static const std::string kEmpty;
  // A plan file's tree holds millions of values, so a value holds one scalar and at most one of
  // string, array and object (56 bytes instead of 128 with a member for each kind): which payload
  // member is alive follows from type_ (a String, an overflowed integer's digits, an Array, an
  // Object), and the members below keep that so.
  enum class Payload : uint8_t { None, String, Array, Object };
  Payload payload() const {
    if (type_ == Type::String || overflow_) return Payload::String;
    if (type_ == Type::Array) return Payload::Array;
    if (type_ == Type::Object) return Payload::Object;
    return Payload::None;
  }
  void destroyPayload() noexcept;
  // Takes other's type, scalar and payload (copied or moved); the payload must be None before.
  void take(const Value& other);
  void take(Value&& other) noexcept;
  void takeScalars(const Value& other) noexcept;  // type, flags, position and the scalar's bits
  // Turns a payload-free value (a fresh one) into an empty value of `type` (String, Array or
  // Object, or a scalar type).
  void become(Type type);

  Type type_ = Type::Null;
  bool bool_ = false;
  bool overflow_ = false;
  int line_ = 0;
  int column_ = 0;
  union {
    int64_t int_ = 0;
    uint64_t uint_;
    double double_;
  };
  union {
    std::string string_;
    Array array_;
    Object object_;
  };
};

// What parse() throws: Error(InvalidUsage, "<sourceName>:<line>:<col>: <reason>"), with the parts
// kept apart for callers that word their own message.
class ParseError : public Error {
 public:
  ParseError(const std::string& source, int line, int column, const std::string& reason);
  int line() const { return line_; }
  int column() const { return column_; }
  const std::string& reason() const { return reason_; }

 private:
  int line_;
  int column_;
  std::string reason_;
};

// Parses one JSON document (UTF-8; surrounding whitespace allowed, nothing else). Refused besides
// bad syntax: invalid UTF-8 in strings, duplicate member names, nesting deeper than kMaxDepth (a
// hostile file must not exhaust the stack) and number literals longer than kMaxNumberLength
// (Python's limit on integer text, so every number read converts to a Python int).
constexpr int kMaxDepth = 512;
constexpr size_t kMaxNumberLength = 4300;
Value parse(std::string_view text, const std::string& sourceName);

// For a document whose top-level object holds one large array (a plan's "ranks"): parse() that
// hands each item of that member's array to `onItem` as soon as it is parsed, in order, instead of
// keeping it in the tree, so the caller can convert and free the items one by one. `onStart` is
// called when the array begins, with the object's members so far, the array's own member last
// (an empty array, as it stays in the returned tree). Syntax, limits and errors are parse()'s.
// A member of that name whose value is not an array is parsed into the tree as usual.
struct ArrayStream {
  std::string member;
  std::function<void(const Value& before)> onStart;
  std::function<void(Value& item)> onItem;
};
Value parse(std::string_view text, const std::string& sourceName, const ArrayStream& stream);

// Writes `value` as JSON. indent < 0: one line; otherwise pretty-printed with that many spaces.
// Doubles are written so they read back to the same value; NaN and infinities are refused
// (Error InvalidUsage), since JSON cannot carry them.
std::string dump(const Value& value, int indent = -1);
// A JSON string literal for `text` (quotes and escapes included).
std::string quote(const std::string& text);

}  // namespace forestcc::json
