// Module header: testing helpers for users' own tests — a reader for verl's golden fixtures, so a
// loss can be checked against verl's own outputs. Needs nlohmann-json.
#pragma once

#include "verl/testing/golden.hpp"
