// Schedules and their text form (pipeline/schedule.h).
#include "pipeline/schedule.h"

#include <algorithm>
#include <charconv>
#include <sstream>

#include "core/error.h"

namespace dt::pipeline {
namespace {

std::string_view trim(std::string_view s) {
  const auto space = [](char c) { return c == ' ' || c == '\t' || c == '\r'; };
  while (!s.empty() && space(s.front())) s.remove_prefix(1);
  while (!s.empty() && space(s.back())) s.remove_suffix(1);
  return s;
}

std::vector<std::string_view> split_words(std::string_view s) {
  std::vector<std::string_view> words;
  while (!(s = trim(s)).empty()) {
    const size_t end = std::min(s.find_first_of(" \t"), s.size());
    words.push_back(s.substr(0, end));
    s.remove_prefix(end);
  }
  return words;
}

int parse_int(std::string_view word) {
  int value = 0;
  auto [end, ec] = std::from_chars(word.data(), word.data() + word.size(), value);
  DT_CHECK_ARG(ec == std::errc() && end == word.data() + word.size() && value >= 0, "'", word,
               "' is not a non-negative integer");
  return value;
}

std::vector<int> parse_ints(std::string_view s) {
  std::vector<int> values;
  for (std::string_view w : split_words(s)) values.push_back(parse_int(w));
  return values;
}

std::string join(const std::vector<int>& values) {
  std::string s;
  for (int v : values) s += " " + std::to_string(v);
  return s;
}

// What the lines read so far hold, and which header line gave each field (0: not yet seen).
struct Reader {
  Schedule s;
  bool named = false;
  int stages_line = 0, microbatches_line = 0, stage_ranks_line = 0, memory_bound_line = 0;

  void line(std::string_view text, int no) {
    if (text.empty()) return;
    if (text.front() == '#') {
      if (!named) s.name = std::string(trim(text.substr(1)));
      named = true;
      return;
    }
    const size_t colon = text.find(':');
    DT_CHECK_ARG(colon != std::string_view::npos, "expected 'key: value' or 'rank R: actions'");
    const std::string_view key = trim(text.substr(0, colon)), value = text.substr(colon + 1);
    if (key.starts_with("rank ")) return read_rank(key.substr(5), value);
    DT_CHECK_ARG(s.actions.empty(), "header line '", key, "' after the rank lines");
    if (key == "stages") {
      set(stages_line, no, key);
      s.num_stages = parse_int(trim(value));
    } else if (key == "microbatches") {
      set(microbatches_line, no, key);
      s.num_microbatches = parse_int(trim(value));
    } else if (key == "stage_ranks") {
      set(stage_ranks_line, no, key);
      s.stage_rank = parse_ints(value);
    } else if (key == "memory_bound") {
      set(memory_bound_line, no, key);
      s.memory_bound = parse_ints(value);
    } else {
      DT_THROW(InvalidArgument, "unknown key '", key, "' (expected stages, microbatches, stage_ranks, memory_bound or ",
               "rank R)");
    }
  }

  static void set(int& seen_at, int no, std::string_view key) {
    DT_CHECK_ARG(seen_at == 0, "'", key, "' given twice (first on line ", seen_at, ")");
    seen_at = no;
  }

  void read_rank(std::string_view number, std::string_view value) {
    const int r = parse_int(trim(number));
    DT_CHECK_ARG(r == int(s.actions.size()), "rank ", r, " where rank ", s.actions.size(), " comes next");
    auto& list = s.actions.emplace_back();
    for (std::string_view token : split_words(value)) list.push_back(parse_action(token));
  }
};

}  // namespace

std::string format_schedule(const Schedule& s) {
  DT_CHECK_ARG(s.name.find('\n') == std::string::npos && trim(s.name) == s.name, "schedule name '", s.name,
               "' must be one line without surrounding spaces to print");
  std::ostringstream os;
  os << "# " << s.name << "\nstages: " << s.num_stages << "\nmicrobatches: " << s.num_microbatches
     << "\nstage_ranks:" << join(s.stage_rank) << "\nmemory_bound:" << join(s.memory_bound) << "\n";
  for (size_t r = 0; r < s.actions.size(); ++r) {
    os << "rank " << r << ":";
    for (const Action& a : s.actions[r]) os << " " << to_string(a);
    os << "\n";
  }
  return os.str();
}

Schedule parse_schedule(std::string_view text) {
  Reader reader;
  int no = 0;
  auto fail = [&](std::string_view line, const std::string& why) {
    return InvalidArgument(str_cat("schedule line ", no, " ('", line, "'): ", why));
  };
  while (!text.empty()) {
    ++no;
    const size_t end = std::min(text.find('\n'), text.size());
    const std::string_view line = trim(text.substr(0, end));
    text.remove_prefix(std::min(end + 1, text.size()));
    try {
      reader.line(line, no);
    } catch (const InvalidArgument& e) {
      throw fail(line, e.what());
    }
  }
  Schedule& s = reader.s;
  const auto missing = [](int seen_at, const char* key) {
    DT_CHECK_ARG(seen_at != 0, "schedule: no '", key, ":' line");
  };
  missing(reader.stages_line, "stages");
  missing(reader.microbatches_line, "microbatches");
  missing(reader.stage_ranks_line, "stage_ranks");
  missing(reader.memory_bound_line, "memory_bound");
  DT_CHECK_ARG(!s.actions.empty(), "schedule: no 'rank 0:' line");
  s.num_ranks = int(s.actions.size());
  DT_CHECK_ARG(int(s.stage_rank.size()) == s.num_stages, "schedule line ", reader.stage_ranks_line,
               ": stage_ranks has ", s.stage_rank.size(), " entries for ", s.num_stages, " stages");
  DT_CHECK_ARG(int(s.memory_bound.size()) == s.num_ranks, "schedule line ", reader.memory_bound_line,
               ": memory_bound has ", s.memory_bound.size(), " entries for ", s.num_ranks, " rank lines");
  return s;
}

}  // namespace dt::pipeline
