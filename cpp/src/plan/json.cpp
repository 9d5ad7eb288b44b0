#include "plan/json.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>

#include "forestcc/error.hpp"

namespace forestcc::json {

const char* typeName(Type type) {
  switch (type) {
    case Type::Null: return "null";
    case Type::Bool: return "boolean";
    case Type::Int:
    case Type::UInt: return "integer";
    case Type::Double: return "number";
    case Type::String: return "string";
    case Type::Array: return "array";
    case Type::Object: return "object";
  }
  return "?";
}

ParseError::ParseError(const std::string& source, int line, int column, const std::string& reason)
    : Error(ErrorCode::InvalidUsage,
            source + ":" + std::to_string(line) + ":" + std::to_string(column) + ": " + reason),
      line_(line),
      column_(column),
      reason_(reason) {}

// ---- Value ------------------------------------------------------------------------------------

static_assert(sizeof(Value) <= 56, "json::Value is held millions of times: keep it lean");

Value::Value(const Value& other) { take(other); }

Value::Value(Value&& other) noexcept { take(std::move(other)); }

Value& Value::operator=(const Value& other) {
  if (this != &other) {
    Value copy(other);  // first, so that other may be a part of this value
    destroyPayload();
    take(std::move(copy));
  }
  return *this;
}

Value& Value::operator=(Value&& other) noexcept {
  if (this != &other) {
    Value moved(std::move(other));  // other may be a part of this value
    destroyPayload();
    take(std::move(moved));
  }
  return *this;
}

void Value::destroyPayload() noexcept {
  switch (payload()) {
    case Payload::String: string_.~basic_string(); break;
    case Payload::Array: array_.~Array(); break;
    case Payload::Object: object_.~Object(); break;
    case Payload::None: break;
  }
  type_ = Type::Null;
  overflow_ = false;
}

void Value::take(const Value& other) {
  switch (other.payload()) {
    case Payload::String: new (&string_) std::string(other.string_); break;
    case Payload::Array: new (&array_) Array(other.array_); break;
    case Payload::Object: new (&object_) Object(other.object_); break;
    case Payload::None: break;
  }
  takeScalars(other);
}

void Value::take(Value&& other) noexcept {
  switch (other.payload()) {
    case Payload::String: new (&string_) std::string(std::move(other.string_)); break;
    case Payload::Array: new (&array_) Array(std::move(other.array_)); break;
    case Payload::Object: new (&object_) Object(std::move(other.object_)); break;
    case Payload::None: break;
  }
  takeScalars(other);
}

void Value::takeScalars(const Value& other) noexcept {
  type_ = other.type_;
  bool_ = other.bool_;
  overflow_ = other.overflow_;
  line_ = other.line_;
  column_ = other.column_;
  uint_ = other.uint_;  // the scalar's bits, whichever it is
}

void Value::become(Type type) {
  type_ = type;
  switch (payload()) {
    case Payload::String: new (&string_) std::string(); break;
    case Payload::Array: new (&array_) Array(); break;
    case Payload::Object: new (&object_) Object(); break;
    case Payload::None: break;
  }
}

Value::Value(uint64_t u) {
  if (u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    type_ = Type::Int;
    int_ = static_cast<int64_t>(u);
  } else {
    type_ = Type::UInt;
    uint_ = u;
  }
}

const std::string Value::kEmpty;

Value Value::overflowedInteger(const std::string& digits) {
  Value v;
  new (&v.string_) std::string(digits);
  v.type_ = Type::Double;
  v.overflow_ = true;
  const char* first = digits.data();
  auto result = std::from_chars(first, first + digits.size(), v.double_);
  if (result.ec != std::errc()) {
    v.double_ = (!digits.empty() && digits[0] == '-' ? -1 : 1) * std::numeric_limits<double>::infinity();
  }
  return v;
}

Value Value::array(Array items) {
  Value v;
  v.become(Type::Array);
  v.array_ = std::move(items);
  return v;
}

Value Value::object(Object members) {
  Value v;
  v.become(Type::Object);
  v.object_ = std::move(members);
  return v;
}

std::string Value::where() const { return std::to_string(line_) + ":" + std::to_string(column_); }

namespace {
[[noreturn]] void wrongType(const Value& v, const char* expected) {
  throw Error(ErrorCode::InvalidUsage,
              v.where() + ": expected " + expected + ", found " + v.typeName());
}
}  // namespace

bool Value::asBool() const {
  if (type_ != Type::Bool) wrongType(*this, "a boolean");
  return bool_;
}

int64_t Value::asInt64() const {
  if (type_ == Type::UInt) throw Error(ErrorCode::InvalidUsage, where() + ": integer out of range");
  if (type_ != Type::Int) wrongType(*this, "an integer");
  return int_;
}

uint64_t Value::asUInt64() const {
  if (type_ == Type::UInt) return uint_;
  if (type_ != Type::Int) wrongType(*this, "an integer");
  if (int_ < 0) throw Error(ErrorCode::InvalidUsage, where() + ": expected a non-negative integer");
  return static_cast<uint64_t>(int_);
}

double Value::asDouble() const {
  switch (type_) {
    case Type::Int: return static_cast<double>(int_);
    case Type::UInt: return static_cast<double>(uint_);
    case Type::Double: return double_;
    default: wrongType(*this, "a number");
  }
}

const std::string& Value::asString() const {
  if (type_ != Type::String) wrongType(*this, "a string");
  return string_;
}

const Value::Array& Value::asArray() const {
  if (type_ != Type::Array) wrongType(*this, "an array");
  return array_;
}

const Value::Object& Value::asObject() const {
  if (type_ != Type::Object) wrongType(*this, "an object");
  return object_;
}

Value::Array& Value::asArray() {
  if (type_ != Type::Array) wrongType(*this, "an array");
  return array_;
}

Value::Object& Value::asObject() {
  if (type_ != Type::Object) wrongType(*this, "an object");
  return object_;
}

const Value* Value::find(const std::string& key) const {
  if (type_ != Type::Object) return nullptr;
  for (const Member& m : object_) {
    if (m.first == key) return &m.second;
  }
  return nullptr;
}

void Value::set(std::string key, Value value) { asObject().emplace_back(std::move(key), std::move(value)); }

void Value::push(Value value) { asArray().push_back(std::move(value)); }

// ---- parser -----------------------------------------------------------------------------------

class Parser {
 public:
  Parser(std::string_view text, const std::string& source, const ArrayStream* stream = nullptr)
      : text_(text), source_(source), stream_(stream) {}

  Value document() {
    skipSpace();
    Value v = value(0);
    skipSpace();
    if (pos_ < text_.size()) fail("unexpected " + describe(text_[pos_]) + " after the JSON value");
    return v;
  }

 private:
  std::string_view text_;  // a view: a plan's text is hundreds of MB, held once by the caller
  const std::string& source_;
  const ArrayStream* stream_;  // nullptr: every value goes into the tree
  size_t pos_ = 0;
  int line_ = 1;
  size_t lineStart_ = 0;  // offset of the current line's first byte

  int column() const { return static_cast<int>(pos_ - lineStart_) + 1; }

  [[noreturn]] void fail(const std::string& what) const { throw ParseError(source_, line_, column(), what); }

  static std::string describe(char c) {
    if (c >= 0x20 && c < 0x7f) return std::string("'") + c + "'";
    char buf[16];
    std::snprintf(buf, sizeof buf, "byte 0x%02x", static_cast<unsigned char>(c));
    return buf;
  }

  bool atEnd() const { return pos_ >= text_.size(); }
  char peek() const { return text_[pos_]; }

  void skipSpace() {
    while (!atEnd()) {
      char c = peek();
      if (c == '\n') {
        ++pos_;
        ++line_;
        lineStart_ = pos_;
      } else if (c == ' ' || c == '\t' || c == '\r') {
        ++pos_;
      } else {
        break;
      }
    }
  }

  void expect(char c, const char* context) {
    if (atEnd()) fail(std::string("unexpected end of input, expected '") + c + "' " + context);
    if (peek() != c) fail(std::string("expected '") + c + "' " + context + ", found " + describe(peek()));
    ++pos_;
  }

  Value value(int depth) {
    if (atEnd()) fail("unexpected end of input, expected a value");
    Value v;
    v.line_ = line_;
    v.column_ = column();
    char c = peek();
    if (c == '{' || c == '[') {
      if (depth >= kMaxDepth) fail("nesting deeper than " + std::to_string(kMaxDepth) + " levels");
      if (c == '{') {
        object(v, depth + 1);
      } else {
        array(v, depth + 1);
      }
    } else if (c == '"') {
      v.become(Type::String);
      v.string_ = string();
    } else if (c == '-' || (c >= '0' && c <= '9')) {
      number(v);
    } else if (literal("true")) {
      v.type_ = Type::Bool;
      v.bool_ = true;
    } else if (literal("false")) {
      v.type_ = Type::Bool;
    } else if (literal("null")) {
      v.type_ = Type::Null;
    } else {
      fail("unexpected " + describe(c) + ", expected a value");
    }
    return v;
  }

  bool literal(const char* word) {
    size_t n = std::char_traits<char>::length(word);
    if (text_.compare(pos_, n, word) != 0) return false;
    pos_ += n;
    return true;
  }

  void object(Value& v, int depth) {
    v.become(Type::Object);
    ++pos_;  // '{'
    skipSpace();
    if (!atEnd() && peek() == '}') {
      ++pos_;
      return;
    }
    for (;;) {
      skipSpace();
      if (atEnd()) fail("unexpected end of input, expected a member name");
      if (peek() != '"') fail("expected a member name in quotes, found " + describe(peek()));
      size_t keyPos = pos_;  // a string never spans lines, so the line is still the key's
      std::string key = string();
      for (const Value::Member& m : v.object_) {
        if (m.first == key) {
          pos_ = keyPos;
          fail("duplicate member " + quote(key));
        }
      }
      skipSpace();
      expect(':', "after a member name");
      skipSpace();
      if (depth == 1 && stream_ != nullptr && !atEnd() && peek() == '[' && key == stream_->member) {
        streamArray(v, std::move(key), depth);
      } else {
        Value member = value(depth);
        v.object_.emplace_back(std::move(key), std::move(member));
      }
      skipSpace();
      if (atEnd()) fail("unexpected end of input, expected ',' or '}'");
      char c = peek();
      ++pos_;
      if (c == '}') return;
      if (c != ',') {
        --pos_;
        fail("expected ',' or '}' in an object, found " + describe(c));
      }
    }
  }

  // The top-level object's streamed member: an empty array in the tree, its items handed over
  // one by one (items() below).
  void streamArray(Value& object, std::string key, int depth) {
    Value placeholder;
    placeholder.line_ = line_;
    placeholder.column_ = column();
    placeholder.become(Type::Array);
    object.object_.emplace_back(std::move(key), std::move(placeholder));
    if (stream_->onStart) stream_->onStart(object);
    items(depth + 1, [&](Value item) { stream_->onItem(item); });
  }

  void array(Value& v, int depth) {
    v.become(Type::Array);
    items(depth, [&](Value item) { v.array_.push_back(std::move(item)); });
  }

  // The items of the array whose '[' is at pos_, each parsed at `depth` and handed to `take`.
  template <class Take>
  void items(int depth, Take&& take) {
    ++pos_;  // '['
    skipSpace();
    if (!atEnd() && peek() == ']') {
      ++pos_;
      return;
    }
    for (;;) {
      skipSpace();
      take(value(depth));
      skipSpace();
      if (atEnd()) fail("unexpected end of input, expected ',' or ']'");
      char c = peek();
      ++pos_;
      if (c == ']') return;
      if (c != ',') {
        --pos_;
        fail("expected ',' or ']' in an array, found " + describe(c));
      }
    }
  }

  unsigned hex4() {
    unsigned code = 0;
    for (int i = 0; i < 4; ++i) {
      if (atEnd()) fail("unexpected end of input in a \\u escape");
      char c = peek();
      unsigned digit;
      if (c >= '0' && c <= '9') {
        digit = static_cast<unsigned>(c - '0');
      } else if (c >= 'a' && c <= 'f') {
        digit = static_cast<unsigned>(c - 'a' + 10);
      } else if (c >= 'A' && c <= 'F') {
        digit = static_cast<unsigned>(c - 'A' + 10);
      } else {
        fail("bad hex digit " + describe(c) + " in a \\u escape");
      }
      code = code * 16 + digit;
      ++pos_;
    }
    return code;
  }

  static void appendUtf8(std::string& out, unsigned code) {
    if (code < 0x80) {
      out += static_cast<char>(code);
    } else if (code < 0x800) {
      out += static_cast<char>(0xc0 | (code >> 6));
      out += static_cast<char>(0x80 | (code & 0x3f));
    } else if (code < 0x10000) {
      out += static_cast<char>(0xe0 | (code >> 12));
      out += static_cast<char>(0x80 | ((code >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (code & 0x3f));
    } else {
      out += static_cast<char>(0xf0 | (code >> 18));
      out += static_cast<char>(0x80 | ((code >> 12) & 0x3f));
      out += static_cast<char>(0x80 | ((code >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (code & 0x3f));
    }
  }

  // Copies one multi-byte UTF-8 character, refusing bytes that are not well-formed UTF-8
  // (overlong forms, surrogates and code points above U+10FFFF included, as Python's decoder does).
  void utf8Sequence(std::string& out) {
    const auto byte = [&](size_t i) { return static_cast<unsigned char>(text_[pos_ + i]); };
    unsigned char lead = byte(0);
    size_t length = lead >= 0xc2 && lead <= 0xdf ? 2 : lead >= 0xe0 && lead <= 0xef ? 3 : lead >= 0xf0 && lead <= 0xf4 ? 4 : 0;
    bool ok = length != 0 && pos_ + length <= text_.size();
    for (size_t i = 1; ok && i < length; ++i) ok = (byte(i) & 0xc0) == 0x80;
    if (ok && length == 3) {
      ok = !(lead == 0xe0 && byte(1) < 0xa0) && !(lead == 0xed && byte(1) >= 0xa0);
    } else if (ok && length == 4) {
      ok = !(lead == 0xf0 && byte(1) < 0x90) && !(lead == 0xf4 && byte(1) >= 0x90);
    }
    if (!ok) fail("invalid UTF-8 (" + describe(static_cast<char>(lead)) + ") in a string");
    out.append(text_, pos_, length);
    pos_ += length;
  }

  std::string string() {
    ++pos_;  // opening quote
    std::string out;
    for (;;) {
      if (atEnd()) fail("unexpected end of input in a string");
      char c = peek();
      if (c == '"') {
        ++pos_;
        return out;
      }
      if (static_cast<unsigned char>(c) < 0x20) fail("control character " + describe(c) + " in a string");
      if (static_cast<unsigned char>(c) >= 0x80) {
        utf8Sequence(out);
        continue;
      }
      if (c != '\\') {
        out += c;
        ++pos_;
        continue;
      }
      ++pos_;
      if (atEnd()) fail("unexpected end of input in a string escape");
      char e = peek();
      ++pos_;
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          unsigned code = hex4();
          // A high surrogate followed by a low one is one code point; a lone surrogate is kept as
          // its own (WTF-8) bytes, as Python's json module keeps it, rather than refused.
          if (code >= 0xd800 && code < 0xdc00 && text_.compare(pos_, 2, "\\u") == 0) {
            size_t save = pos_;
            pos_ += 2;
            unsigned low = hex4();
            if (low >= 0xdc00 && low < 0xe000) {
              code = 0x10000 + ((code - 0xd800) << 10) + (low - 0xdc00);
            } else {
              pos_ = save;
            }
          }
          appendUtf8(out, code);
          break;
        }
        default:
          --pos_;
          // Not the raw byte: a message must stay valid UTF-8 whatever the input was.
          fail(std::string("bad escape \\") + (e >= 0x20 && e < 0x7f ? std::string(1, e) : " followed by " + describe(e)) +
               " in a string");
      }
    }
  }

  bool digitAt(size_t i) const { return i < text_.size() && text_[i] >= '0' && text_[i] <= '9'; }

  // Roughly log10 of a number literal's magnitude (the position of its first significant digit
  // relative to the decimal point, plus the exponent); only its sign matters.
  static int64_t decimalExponent(const char* first, const char* last) {
    const char* p = first;
    if (*p == '-') ++p;
    int64_t position = 0;
    bool significant = false;
    for (; p < last && *p >= '0' && *p <= '9'; ++p) {
      if (*p != '0') significant = true;
      if (significant) ++position;
    }
    if (p < last && *p == '.') {
      for (++p; p < last && *p >= '0' && *p <= '9'; ++p) {
        if (significant) continue;
        if (*p != '0') {
          significant = true;
        } else {
          --position;
        }
      }
    }
    int64_t exponent = 0;
    if (p < last && (*p == 'e' || *p == 'E')) {
      ++p;
      bool minus = *p == '-';
      if (*p == '+' || *p == '-') ++p;
      for (; p < last; ++p) exponent = std::min<int64_t>(exponent * 10 + (*p - '0'), 1'000'000'000);
      if (minus) exponent = -exponent;
    }
    return position + exponent;
  }

  void number(Value& v) {
    size_t start = pos_;
    bool negative = false;
    if (peek() == '-') {
      negative = true;
      ++pos_;
    }
    if (!digitAt(pos_)) fail("expected a digit in a number");
    if (peek() == '0' && digitAt(pos_ + 1)) fail("leading zero in a number");
    while (digitAt(pos_)) ++pos_;
    bool integer = true;
    if (!atEnd() && peek() == '.') {
      integer = false;
      ++pos_;
      if (!digitAt(pos_)) fail("expected a digit after '.' in a number");
      while (digitAt(pos_)) ++pos_;
    }
    if (!atEnd() && (peek() == 'e' || peek() == 'E')) {
      integer = false;
      ++pos_;
      if (!atEnd() && (peek() == '+' || peek() == '-')) ++pos_;
      if (!digitAt(pos_)) fail("expected a digit in a number's exponent");
      while (digitAt(pos_)) ++pos_;
    }
    const char* first = text_.data() + start;
    const char* last = text_.data() + pos_;
    if (pos_ - start > kMaxNumberLength) {
      pos_ = start;
      fail("number longer than " + std::to_string(kMaxNumberLength) + " characters");
    }
    if (integer) {
      uint64_t magnitude = 0;
      bool overflow = false;
      for (const char* p = first + (negative ? 1 : 0); p < last; ++p) {
        uint64_t digit = static_cast<uint64_t>(*p - '0');
        if (magnitude > (std::numeric_limits<uint64_t>::max() - digit) / 10) {
          overflow = true;
          break;
        }
        magnitude = magnitude * 10 + digit;
      }
      constexpr uint64_t kInt64Max = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
      if (!overflow && negative && magnitude <= kInt64Max + 1) {
        v.type_ = Type::Int;
        v.int_ = magnitude == kInt64Max + 1 ? std::numeric_limits<int64_t>::min()
                                             : -static_cast<int64_t>(magnitude);
        return;
      }
      if (!overflow && !negative) {
        v.type_ = magnitude <= kInt64Max ? Type::Int : Type::UInt;
        v.uint_ = magnitude;  // the same bits as int_ when it is an Int
        return;
      }
      v = Value::overflowedInteger(std::string(first, last));
      v.line_ = line_;
      v.column_ = static_cast<int>(start - lineStart_) + 1;
      return;
    }
    double d = 0.0;
    auto result = std::from_chars(first, last, d);  // locale-independent, unlike strtod
    if (result.ec == std::errc::result_out_of_range) {
      // Reported for overflow and underflow alike (d is left untouched): a tiny number is zero,
      // a huge one cannot be represented.
      if (decimalExponent(first, last) > 0) {
        pos_ = start;
        fail("number " + std::string(first, last) + " is out of range");
      }
      d = negative ? -0.0 : 0.0;
    }
    v.type_ = Type::Double;
    v.double_ = d;
  }
};

Value parse(std::string_view text, const std::string& sourceName) {
  return Parser(text, sourceName).document();
}

Value parse(std::string_view text, const std::string& sourceName, const ArrayStream& stream) {
  return Parser(text, sourceName, &stream).document();
}

// ---- writer -----------------------------------------------------------------------------------

std::string quote(const std::string& text) {
  std::string out = "\"";
  char buf[16];
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    const auto u = static_cast<unsigned char>(c);
    switch (c) {
      case '"': out += "\\\""; continue;
      case '\\': out += "\\\\"; continue;
      case '\b': out += "\\b"; continue;
      case '\f': out += "\\f"; continue;
      case '\n': out += "\\n"; continue;
      case '\r': out += "\\r"; continue;
      case '\t': out += "\\t"; continue;
      default: break;
    }
    if (u < 0x20 || u == 0x7f) {
      std::snprintf(buf, sizeof buf, "\\u%04x", u);
      out += buf;
      continue;
    }
    if (u < 0x80) {
      out += c;
      continue;
    }
    // Non-ASCII as \u escapes (surrogate pairs above U+FFFF): the text stays ASCII, as Python's
    // json.dumps writes it, so canonical plan text is the same from every writer. Bytes that are
    // not UTF-8 pass through (the parser never produces them).
    const size_t length = u >= 0xf0 ? 4 : u >= 0xe0 ? 3 : u >= 0xc0 ? 2 : 1;
    if (length == 1 || i + length > text.size()) {
      out += c;
      continue;
    }
    unsigned code = u & (0x7f >> length);
    for (size_t j = 1; j < length; ++j) code = (code << 6) | (static_cast<unsigned char>(text[i + j]) & 0x3f);
    i += length - 1;
    if (code >= 0x10000) {
      code -= 0x10000;
      std::snprintf(buf, sizeof buf, "\\u%04x\\u%04x", 0xd800 + (code >> 10), 0xdc00 + (code & 0x3ff));
    } else {
      std::snprintf(buf, sizeof buf, "\\u%04x", code);
    }
    out += buf;
  }
  out += '"';
  return out;
}

namespace {

void newline(std::string& out, int indent, int depth) {
  if (indent < 0) return;
  out += '\n';
  out.append(static_cast<size_t>(indent) * static_cast<size_t>(depth), ' ');
}

void write(std::string& out, const Value& v, int indent, int depth) {
  switch (v.type()) {
    case Type::Null: out += "null"; return;
    case Type::Bool: out += v.asBool() ? "true" : "false"; return;
    case Type::Int: out += std::to_string(v.asInt64()); return;
    case Type::UInt: out += std::to_string(v.asUInt64()); return;
    case Type::Double: {
      if (v.integerOverflow()) {
        out += v.integerText();
        return;
      }
      double d = v.asDouble();
      if (!std::isfinite(d)) throw Error(ErrorCode::InvalidUsage, "JSON cannot represent " + std::to_string(d));
      char buf[32];
      auto result = std::to_chars(buf, buf + sizeof buf, d);  // shortest text that reads back exactly
      std::string text(buf, result.ptr);
      // Keep it a number that reads back as a double, not an integer.
      if (text.find_first_of(".eEn") == std::string::npos) text += ".0";
      out += text;
      return;
    }
    case Type::String: out += quote(v.asString()); return;
    case Type::Array: {
      const Value::Array& items = v.asArray();
      out += '[';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += indent < 0 ? ", " : ",";
        newline(out, indent, depth + 1);
        write(out, items[i], indent, depth + 1);
      }
      if (!items.empty()) newline(out, indent, depth);
      out += ']';
      return;
    }
    case Type::Object: {
      const Value::Object& members = v.asObject();
      out += '{';
      for (size_t i = 0; i < members.size(); ++i) {
        if (i) out += indent < 0 ? ", " : ",";
        newline(out, indent, depth + 1);
        out += quote(members[i].first);
        out += ": ";
        write(out, members[i].second, indent, depth + 1);
      }
      if (!members.empty()) newline(out, indent, depth);
      out += '}';
      return;
    }
  }
}

}  // namespace

std::string dump(const Value& value, int indent) {
  std::string out;
  write(out, value, indent, 0);
  return out;
}

}  // namespace forestcc::json
