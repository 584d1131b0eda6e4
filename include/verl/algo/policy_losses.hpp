// Module header: every policy loss verl has, rollout correction, and the registry by verl's names.
#pragma once

#include "verl/algo/policy_losses/policy_loss.hpp"
#include "verl/algo/rollout_correction.hpp"
#include "verl/algo/policy_losses/common.hpp"
#include "verl/algo/policy_losses/vanilla.hpp"
#include "verl/algo/policy_losses/deprecated.hpp"
#include "verl/algo/policy_losses/gspo.hpp"
#include "verl/algo/policy_losses/sapo.hpp"
#include "verl/algo/policy_losses/gpg.hpp"
#include "verl/algo/policy_losses/clip_cov.hpp"
#include "verl/algo/policy_losses/kl_cov.hpp"
#include "verl/algo/policy_losses/geo_mean.hpp"
#include "verl/algo/policy_losses/cispo.hpp"
#include "verl/algo/policy_losses/dppo.hpp"
#include "verl/algo/policy_losses/reinforce.hpp"
#include "verl/algo/policy_losses/bypass_mode.hpp"
#include "verl/algo/policy_losses/registry.hpp"
