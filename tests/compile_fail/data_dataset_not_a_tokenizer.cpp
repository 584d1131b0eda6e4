// expect: THE_TOKENIZER_TYPE_DOES_NOT_SATISFY_THE_TOKENIZER_CONCEPT
// Datasets tokenize prompts with a type meeting verl::tokenizer::Tokenizer (encode, decode, ...).
#include "verl/data/prompt_formatter.hpp"
#include "verl/data/rl_dataset.hpp"

struct Splitter {
  std::vector<std::string> split(std::string_view) const { return {}; }
};

int main() {
  auto dataset = verl::data::RLHFDataset::from_rows(std::vector<verl::data::RLHFRow>{}, Splitter{},
                                                    verl::data::ContentOnlyFormatter{}, {});
  return static_cast<int>(dataset.size());
}
