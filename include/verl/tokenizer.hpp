// Module header: tokenizers and chat templates — Hugging Face tokenizer.json files (byte-level BPE,
// SentencePiece-style BPE with byte fallback), added vocabularies, normalizers, pre-tokenizers and
// decoders, a byte-level character tokenizer, and chat templates (ChatML, Llama-3 and the model's own
// Jinja template, rendered as transformers renders it). Needs PCRE2 and nlohmann-json.
#pragma once

#include "verl/tokenizer/concept.hpp"
#include "verl/tokenizer/chat_message.hpp"
#include "verl/tokenizer/chat_template.hpp"
#include "verl/tokenizer/byte_level.hpp"
#include "verl/tokenizer/normalizer.hpp"
#include "verl/tokenizer/pre_tokenizer.hpp"
#include "verl/tokenizer/added_vocabulary.hpp"
#include "verl/tokenizer/bpe_model.hpp"
#include "verl/tokenizer/decoder.hpp"
#include "verl/tokenizer/char_tokenizer.hpp"
#include "verl/tokenizer/hf_tokenizer.hpp"
#include "verl/tokenizer/jinja_chat_template.hpp"
#include "verl/tokenizer/pretrained.hpp"
