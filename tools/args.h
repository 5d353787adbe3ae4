// The one reader of command lines: every program of tools/, bench/ and examples/ reads its arguments with it, so
// that all of them take "--name value" and "--name=value" alike, print their usage for -h and --help (exit 0), and
// refuse what they do not know the same way ("<program>: <message>", a pointer to --help, exit 2). Header-only and
// standard C++ only, so that the reference benchmarks, which link nothing of ours, can use it too.
//
//   dt::tools::ArgReader args(argc, argv, kUsage);
//   while (args.next()) {
//     if (args.take("--json", json) || args.take("--steps", steps) || args.take("--shape", shape)) continue;
//     if (args.is("--device")) { device = args.value(); ...; continue; }
//     throw args.unexpected();
//   }
//
// main reads them first, through parse_or_exit (a UsageError is reported, exit 2), or catches UsageError itself
// where later steps throw it too (report_usage_error):
//   const Args a = dt::tools::parse_or_exit("train_gpt", [&] { return parse(argc, argv); });
//
// A program whose arguments are all operands reads them into its variables in one call:
//   int samples = 15, warmup = 5;
//   dt::tools::read_operands("bench/copy_floor", argc, argv, kUsage, samples, warmup);
//
// "--" ends the options: every argument after it is an operand, read as given.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace dt::tools {

// Bad arguments: main reports it with report_usage_error and exits 2.
struct UsageError {
  std::string message;
};

// Prints "<program>: <message>" and where the usage is on stderr; returns 2, the exit status of a usage error.
inline int report_usage_error(const char* program, const UsageError& e) {
  std::fprintf(stderr, "%s: %s\n(run %s --help for the syntax)\n", program, e.message.c_str(), program);
  return 2;
}

// Runs `read` (a program's reading of its command line, before anything else starts) and returns what it returns;
// on a UsageError reports it and exits 2.
template <typename Read>
auto parse_or_exit(const char* program, Read&& read) {
  try {
    return read();
  } catch (const UsageError& e) {
    std::exit(report_usage_error(program, e));
  }
}

// The whole of `text` as a number of dst's type: for an integer type a whole number that fits it, for a floating
// type any number std::stod reads. False (dst unchanged) when it is not one.
template <typename T>
bool parse_number(const std::string& text, T& dst) {
  static_assert(std::is_arithmetic_v<T> && !std::is_same_v<T, bool>, "parse_number reads integers and floats");
  try {
    size_t used = 0;
    if constexpr (std::is_floating_point_v<T>) {
      const double v = std::stod(text, &used);
      if (used != text.size()) return false;
      dst = T(v);
    } else {
      const long long v = std::stoll(text, &used);
      if (used != text.size() || !std::in_range<T>(v)) return false;
      dst = T(v);
    }
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

// The pieces of `text` between the separators ("1,450,4996" -> {"1", "450", "4996"}; "" -> {}).
inline std::vector<std::string> split_list(const std::string& text, char sep = ',') {
  std::vector<std::string> out;
  if (text.empty()) return out;
  size_t begin = 0;
  for (size_t end; (end = text.find(sep, begin)) != std::string::npos; begin = end + 1)
    out.push_back(text.substr(begin, end - begin));
  out.push_back(text.substr(begin));
  return out;
}

// A list of numbers ("1,450,4996"); UsageError naming the text and the item that is not a number of T's type.
template <typename T>
std::vector<T> parse_list(const std::string& text, char sep = ',') {
  std::vector<T> out;
  for (const std::string& item : split_list(text, sep)) {
    T v{};
    if (!parse_number(item, v)) throw UsageError{"'" + text + "': '" + item + "' is not a number"};
    out.push_back(v);
  }
  return out;
}

class ArgReader {
 public:
  ArgReader(int argc, char** argv, const char* usage) : argc_(argc), argv_(argv), usage_(usage) {}

  // Moves to the next argument; false after the last. -h and --help print the usage and exit 0.
  bool next() {
    if (++i_ >= argc_) return false;
    name_ = argv_[i_];
    inline_value_.reset();
    option_ = false;
    if (operands_only_) return true;
    if (name_ == "--") {
      operands_only_ = true;
      return next();
    }
    option_ = name_.size() > 1 && name_[0] == '-';
    if (name_.rfind("--", 0) == 0) {
      const size_t eq = name_.find('=');
      if (eq != std::string::npos) {
        inline_value_ = name_.substr(eq + 1);
        name_.resize(eq);
      }
    }
    if (name_ == "-h" || name_ == "--help") {
      std::fputs(usage_, stdout);
      std::exit(0);
    }
    return true;
  }
  // The argument ("--shape" of "--shape=7,5").
  const std::string& name() const { return name_; }
  // Whether it is an option: starts with '-' and comes before any "--" (a lone "-" is an operand).
  bool is_option() const { return option_; }
  // Whether it is the option `option` ("--device" of "--device=cuda").
  bool is(const char* option) const { return option_ && name_ == option; }
  // The option's value: after '=', else the next argument (consumed).
  std::string value() {
    if (inline_value_) return *inline_value_;
    if (i_ + 1 >= argc_) throw UsageError{name_ + " needs a value"};
    return argv_[++i_];
  }
  // The option's value, or the operand itself, as a number of type T (parse_number).
  template <typename T>
  T number() {
    const std::string text = option_ ? value() : name_;
    T n{};
    if (!parse_number(text, n)) throw UsageError{(option_ ? name_ + ": " : std::string()) + "not a number: " + text};
    return n;
  }
  // For a flag: refuses "--flag=value".
  void no_value() const {
    if (inline_value_) throw UsageError{name_ + " takes no value"};
  }
  // Whether this is the option `option`; if so, reads it into dst: for a bool, a flag (no value; sets it), for a
  // number, number(), for a std::string (or an optional one), its value as given.
  template <typename T>
  bool take(const char* option, T& dst) {
    if (!is(option)) return false;
    if constexpr (std::is_same_v<T, bool>) {
      no_value();
      dst = true;
    } else if constexpr (std::is_arithmetic_v<T>) {
      dst = number<T>();
    } else {
      dst = value();
    }
    return true;
  }
  // The error for an argument the program does not take: throw args.unexpected().
  UsageError unexpected() const {
    return UsageError{(option_ ? "unknown option '" : "unexpected argument '") + name_ + "'"};
  }
  // This argument and every one after it, exactly as given, and the end of the reading: what a launcher passes on
  // (its program and the program's own arguments).
  std::vector<std::string> rest() {
    std::vector<std::string> out(argv_ + i_, argv_ + argc_);
    i_ = argc_;
    return out;
  }
  // For a program whose arguments are all operands: reads them in order into `slots` (a number as number() reads
  // it, a std::string as given); the slots of operands not given keep their values. Refuses every option but -h
  // and --help, and more operands than slots. Returns how many were given.
  template <typename... Slots>
  int operands(Slots&... slots) {
    int given = 0;
    while (next()) {
      if (option_ || given == int(sizeof...(slots))) throw unexpected();
      [[maybe_unused]] int k = 0;
      ((k++ == given ? read_operand(slots) : void()), ...);
      ++given;
    }
    return given;
  }

 private:
  template <typename T>
  void read_operand(T& slot) {
    if constexpr (std::is_arithmetic_v<T>)
      slot = number<T>();
    else
      slot = name_;
  }

  int argc_;
  char** argv_;
  const char* usage_;
  int i_ = 0;
  std::string name_;
  std::optional<std::string> inline_value_;
  bool option_ = false;
  bool operands_only_ = false;
};

// For a program whose arguments are all operands (or none): ArgReader::operands, reported and exit 2 on a
// UsageError (parse_or_exit).
template <typename... Slots>
int read_operands(const char* program, int argc, char** argv, const char* usage, Slots&... slots) {
  return parse_or_exit(program, [&] { return ArgReader(argc, argv, usage).operands(slots...); });
}

}  // namespace dt::tools
