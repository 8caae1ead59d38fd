// GPT-2's pre-tokenization on strings whose pieces were worked out by hand from the pattern.
#include "dtrain/text/pretokenize.h"

#include "support/test_support.h"

#include <string>
#include <vector>

using dtrain::text::pretokenize_gpt2;

namespace {

std::vector<std::string> pieces(std::string_view text) {
  std::vector<std::string> out;
  for (std::string_view piece : pretokenize_gpt2(text)) out.emplace_back(piece);
  return out;
}

using Pieces = std::vector<std::string>;

}  // namespace

TEST_CASE("pretokenize_gpt2: words take the space before them", "[cpu]") {
  CHECK(pieces("Hello world") == Pieces{"Hello", " world"});
  CHECK(pieces("") == Pieces{});
  CHECK(pieces(" x") == Pieces{" x"});
}

TEST_CASE("pretokenize_gpt2: lower-case contractions are pieces of their own", "[cpu]") {
  CHECK(pieces("I'm sure they've said we'll go, don't you'd") ==
        Pieces{"I", "'m", " sure", " they", "'ve", " said", " we", "'ll", " go", ",", " don", "'t", " you", "'d"});
  CHECK(pieces("it's John's") == Pieces{"it", "'s", " John", "'s"});
  // The pattern is case-sensitive: 'S is punctuation, then a word.
  CHECK(pieces("IT'S") == Pieces{"IT", "'", "S"});
  CHECK(pieces("we're") == Pieces{"we", "'re"});
}

TEST_CASE("pretokenize_gpt2: digits run together, apart from letters", "[cpu]") {
  CHECK(pieces("abc123 4567") == Pieces{"abc", "123", " 4567"});
  CHECK(pieces("$100!!") == Pieces{"$", "100", "!!"});
  CHECK(pieces("3.14") == Pieces{"3", ".", "14"});
}

TEST_CASE("pretokenize_gpt2: whitespace runs leave their last space to the next word", "[cpu]") {
  CHECK(pieces("a  b") == Pieces{"a", " ", " b"});
  CHECK(pieces("a   b") == Pieces{"a", "  ", " b"});
  CHECK(pieces("x\n\ny") == Pieces{"x", "\n", "\n", "y"});
  CHECK(pieces("line\n  indented") == Pieces{"line", "\n ", " indented"});
  // Trailing whitespace is one piece (\s+(?!\S) runs to the end).
  CHECK(pieces("end  \n") == Pieces{"end", "  \n"});
  CHECK(pieces("tab\there") == Pieces{"tab", "\t", "here"});
}

TEST_CASE("pretokenize_gpt2: Unicode letters and invalid bytes", "[cpu]") {
  CHECK(pieces("h\xc3\xa9llo w\xc3\xb6rld") == Pieces{"h\xc3\xa9llo", " w\xc3\xb6rld"});
  CHECK(pieces("\xe6\x97\xa5\xe6\x9c\xac \xe8\xaa\x9e") == Pieces{"\xe6\x97\xa5\xe6\x9c\xac", " \xe8\xaa\x9e"});
  // A byte that is not UTF-8 is a piece of its own, so that the pieces cover the text.
  CHECK(pieces("a\xff"
               "b") == Pieces{"a", "\xff", "b"});
  CHECK(pieces("\xc3") == Pieces{"\xc3"});  // a character cut short
  // \s is Unicode's White_Space, as in tiktoken: U+3000 and U+00A0 are spaces, U+180E (a format
  // character, which PCRE2's own \s takes) is not.
  CHECK(pieces("a\xe3\x80\x80\xc2\xa0"
               "b") == Pieces{"a", "\xe3\x80\x80", "\xc2\xa0", "b"});
  CHECK(pieces("d \xe1\xa0\x8e\xc3\x9f") == Pieces{"d", " \xe1\xa0\x8e", "\xc3\x9f"});
}
