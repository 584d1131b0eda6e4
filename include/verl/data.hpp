// Module header: verl's RLHF dataset schema (JSON Lines), DataProto, the seeded resumable
// data loader. Needs nlohmann-json.
#pragma once

#include "verl/data/data_proto.hpp"
#include "verl/data/rlhf_row.hpp"
#include "verl/data/jsonl.hpp"
#include "verl/data/truncation.hpp"
#include "verl/data/prompt_formatter.hpp"
#include "verl/data/random_permutation.hpp"
#include "verl/data/rl_dataset.hpp"
#include "verl/data/dataloader.hpp"
