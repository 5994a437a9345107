//! Does it fit, before anything moves: the weights plus the engine's fixed overhead plus the KV
//! cache for the asked context, against each card's **free** memory.
//!
//! vLLM's budget on a card is total × `gpu_memory_utilization`, and it refuses to start when
//! free memory is below that ("Free memory on device … is less than desired GPU memory
//! utilization"). So each card gets the engine's utilization, or less when less is free (with
//! [`FREE_MARGIN_BYTES`] kept back), in whole hundredths so the value passed never rounds up.
//! The KV budget is what is left of that once the weights and [`ENGINE_OVERHEAD_BYTES`] are
//! taken; the longest context is the KV budget over the KV bytes per token, in vLLM's 16-token
//! blocks, capped at the model's `max_position_embeddings`.

use enginekit_shared::error::{CodedError, ErrorCode};
use serde::Serialize;

use super::config::{KvLayout, ModelConfig};
use crate::probe::facts::{Fact, Gpu};

/// The utilization enginekit starts vLLM with (`engine::argv::LaunchParams::new`, 0.90; also
/// the default of the vLLM the descriptor pins, v0.14.0's `CacheConfig.gpu_memory_utilization`).
pub(crate) const ENGINE_UTILIZATION_PCT: u64 = 90;
/// Free memory kept back when utilization is lowered to what is free: a desktop's compositor
/// and browser grow and shrink their share between this check and vLLM's own.
pub(crate) const FREE_MARGIN_BYTES: u64 = 512 * MIB;
/// What vLLM holds besides weights and KV cache on one card: CUDA context and other non-torch
/// memory, the activation peak of its profiling run, and CUDA graphs. vLLM's own memory profile
/// of Llama-3-8B on an H100 (vllm-project/vllm PR #10511, 2024-12-14): non_torch_memory
/// 1.79 GiB + PyTorch activation peak 1.26 GiB = 3.05 GiB; 3 GiB is that figure.
pub(crate) const ENGINE_OVERHEAD_BYTES: u64 = 3 * GIB;
/// The extra a card holds when it is one of several (NCCL buffers): the same profile at
/// tensor parallelism 2 shows non_torch_memory 3.58 GiB, 1.79 GiB more than on one card.
pub(crate) const TENSOR_PARALLEL_OVERHEAD_BYTES: u64 = 2 * GIB;
/// The shortest context worth starting when none is asked; `start` then passes the longest
/// that fits as `--max-model-len`.
pub(crate) const MIN_CONTEXT_WITHOUT_ASK: u64 = 2048;
/// vLLM allocates the KV cache in blocks of 16 tokens (`CacheConfig.block_size` default).
pub(crate) const KV_BLOCK_TOKENS: u64 = 16;
/// The longest context reported, and the longest `start` accepts (`engine::options` takes it
/// from here, so models depend on no engine code): 1 Mi tokens, the longest any engine here
/// supports.
pub(crate) const MAX_CONTEXT: u64 = 1 << 20;

const MIB: u64 = 1024 * 1024;
const GIB: u64 = 1024 * MIB;

/// What the model needs, whatever it was read from (a folder today, the hub's small files later).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelNeeds {
    pub(crate) weights_bytes: u64,
    pub(crate) kv: KvLayout,
    /// Query heads: tensor parallelism must divide them.
    pub(crate) attention_heads: Option<u64>,
    pub(crate) max_position_embeddings: Option<u64>,
}

impl ModelNeeds {
    /// The needs of a parsed config and its weights' bytes: the seam a hub id will use with the
    /// config and index fetched before any download.
    pub fn new(config: &ModelConfig, weights_bytes: u64) -> ModelNeeds {
        ModelNeeds {
            weights_bytes,
            kv: config.kv.clone(),
            attention_heads: config.attention_heads,
            max_position_embeddings: config.max_position_embeddings,
        }
    }
}

/// One card's memory as the probe reported it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CardMemory {
    pub uuid: String,
    pub index: Option<u32>,
    pub name: String,
    pub total_bytes: Option<u64>,
    pub free_bytes: Option<u64>,
}

impl CardMemory {
    /// The cards of the probe's facts, in its order.
    pub(crate) fn from_probe(gpus: &[Gpu]) -> Vec<CardMemory> {
        let known = |f: &Fact<u64>| match f {
            Fact::Known { value } => Some(*value),
            Fact::Unknown { .. } => None,
        };
        gpus.iter()
            .map(|g| CardMemory {
                uuid: g.uuid.clone(),
                index: g.index,
                name: g.name.clone(),
                total_bytes: known(&g.memory_total_bytes),
                free_bytes: known(&g.memory_free_bytes),
            })
            .collect()
    }
}

/// The verdict on one card, or on several together.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Placement {
    /// The cards (one, or the tensor-parallel group).
    pub(crate) cards: Vec<String>,
    /// `--gpu-memory-utilization` in hundredths, fitted to free memory.
    pub utilization_pct: Option<u64>,
    /// The weights on each card (all of them, or 1/N of them).
    pub(crate) weights_per_card_bytes: u64,
    /// KV bytes per token on each card (`None` when not sized).
    pub(crate) kv_cache_bytes_per_token: Option<u64>,
    /// What is left for the KV cache on the tightest card (0 when nothing is).
    pub kv_budget_bytes: Option<u64>,
    /// The longest context that fits (`None` when the KV cache is not sized or memory unknown).
    pub max_context: Option<u64>,
    /// Whether it fits; `None` when that cannot be told.
    pub fits: Option<bool>,
    /// Why `fits` is not true, in words.
    pub(crate) why: Option<String>,
}

impl Placement {
    pub(crate) fn tensor_parallel(&self) -> usize {
        self.cards.len()
    }
}

/// One card's figures and verdict.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CardFit {
    #[serde(flatten)]
    pub(crate) card: CardMemory,
    #[serde(flatten)]
    pub placement: Placement,
}

/// The whole judgment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Judgment {
    pub(crate) weights_bytes: u64,
    /// KV bytes per token on one card (`null` when not sized).
    pub(crate) kv_cache_bytes_per_token: Option<u64>,
    /// Why the KV cache is not sized.
    pub(crate) kv_not_sized: Option<String>,
    pub(crate) context_asked: Option<u64>,
    /// The context the verdict is for: the asked one, else [`MIN_CONTEXT_WITHOUT_ASK`].
    pub(crate) context_needed: u64,
    /// The KV cache at `context_needed` on one card.
    pub(crate) kv_cache_bytes_at_context: Option<u64>,
    pub(crate) engine_overhead_bytes: u64,
    pub cards: Vec<CardFit>,
    /// Several cards together, when no single one fits and a group does.
    pub(crate) tensor_parallel: Option<Placement>,
}

impl Judgment {
    /// Fits on a card or a group (`false` when unknown).
    pub(crate) fn fits(&self) -> bool {
        self.placement().is_some()
    }

    /// Where it would run: the fitting card with the longest context (then most free memory),
    /// else the tensor-parallel group.
    pub(crate) fn placement(&self) -> Option<&Placement> {
        self.cards
            .iter()
            .filter(|c| c.placement.fits == Some(true))
            .max_by_key(|c| (c.placement.max_context, c.card.free_bytes))
            .map(|c| &c.placement)
            .or(self
                .tensor_parallel
                .as_ref()
                .filter(|p| p.fits == Some(true)))
    }
}

/// Judges `needs` for `context` (tokens asked, if any) on `cards`.
pub fn judge(needs: &ModelNeeds, context: Option<u64>, cards: &[CardMemory]) -> Judgment {
    let context_needed = context.unwrap_or(MIN_CONTEXT_WITHOUT_ASK);
    let per_token = needs.kv.bytes_per_token(1);
    let fits: Vec<CardFit> = cards
        .iter()
        .map(|card| CardFit {
            card: card.clone(),
            placement: place(needs, context_needed, &[card]),
        })
        .collect();
    let any_single = fits.iter().any(|c| c.placement.fits == Some(true));
    let tensor_parallel = if any_single {
        None
    } else {
        split(needs, context_needed, cards)
    };
    Judgment {
        weights_bytes: needs.weights_bytes,
        kv_cache_bytes_per_token: per_token,
        kv_not_sized: match &needs.kv {
            KvLayout::NotSized { reason } => Some(reason.clone()),
            _ => None,
        },
        context_asked: context,
        context_needed,
        kv_cache_bytes_at_context: per_token.and_then(|t| t.checked_mul(context_needed)),
        engine_overhead_bytes: ENGINE_OVERHEAD_BYTES,
        cards: fits,
        tensor_parallel,
    }
}

/// The utilization (hundredths) that free memory allows on a card: the engine's, or
/// floor((free − margin) × 100 / total) when that is less.
pub(crate) fn utilization_pct(total: u64, free: u64) -> u64 {
    if total == 0 {
        return 0;
    }
    let usable = u128::from(free.saturating_sub(FREE_MARGIN_BYTES));
    let pct = usable * 100 / u128::from(total);
    u64::try_from(pct)
        .unwrap_or(u64::MAX)
        .min(ENGINE_UTILIZATION_PCT)
}

/// The smallest tensor-parallel group that fits: N a power of two up to the card count, N
/// dividing the attention heads, and the KV heads split evenly or replicated (vLLM's rule);
/// the N cards with the most free memory.
fn split(needs: &ModelNeeds, context_needed: u64, cards: &[CardMemory]) -> Option<Placement> {
    needs.kv.bytes_per_token(1)?;
    let heads = needs.attention_heads?;
    let mut by_free: Vec<&CardMemory> = cards.iter().collect();
    by_free.sort_by_key(|c| std::cmp::Reverse(c.free_bytes.unwrap_or(0)));
    let mut n = 2usize;
    while n <= by_free.len() {
        let tp = n as u64;
        let kv_ok = needs
            .kv
            .kv_heads()
            .is_none_or(|kv| kv.is_multiple_of(tp) || tp.is_multiple_of(kv));
        if heads.is_multiple_of(tp) && kv_ok {
            let placement = place(needs, context_needed, &by_free[..n]);
            if placement.fits == Some(true) {
                return Some(placement);
            }
        }
        n = n.checked_mul(2)?;
    }
    None
}

/// The verdict on `group` (one card, or a tensor-parallel group sharing one utilization).
fn place(needs: &ModelNeeds, context_needed: u64, group: &[&CardMemory]) -> Placement {
    let tp = group.len().max(1) as u64;
    let per_token = needs.kv.bytes_per_token(tp);
    let weights_per_card = needs.weights_bytes.div_ceil(tp);
    let mut placement = Placement {
        cards: group.iter().map(|c| c.uuid.clone()).collect(),
        utilization_pct: None,
        weights_per_card_bytes: weights_per_card,
        kv_cache_bytes_per_token: per_token,
        kv_budget_bytes: None,
        max_context: None,
        fits: None,
        why: None,
    };
    let mut memory = Vec::with_capacity(group.len());
    for card in group {
        match (card.total_bytes, card.free_bytes) {
            (Some(total), Some(free)) => memory.push((total, free)),
            _ => {
                placement.why = Some(format!(
                    "the memory of card {} is unknown",
                    card.index.map_or(card.uuid.clone(), |i| i.to_string())
                ));
                return placement;
            }
        }
    }
    // One utilization for the whole group (vLLM takes one value for every rank).
    let Some(pct) = memory.iter().map(|(t, f)| utilization_pct(*t, *f)).min() else {
        return placement;
    };
    placement.utilization_pct = Some(pct);
    let overhead = if tp > 1 {
        ENGINE_OVERHEAD_BYTES + TENSOR_PARALLEL_OVERHEAD_BYTES
    } else {
        ENGINE_OVERHEAD_BYTES
    };
    let kv_budget = memory
        .iter()
        .map(|(total, _)| {
            let budget = u128::from(*total) * u128::from(pct) / 100;
            budget.saturating_sub(u128::from(weights_per_card) + u128::from(overhead))
        })
        .min()
        .unwrap_or(0);
    placement.kv_budget_bytes = Some(u64::try_from(kv_budget).unwrap_or(u64::MAX));
    if kv_budget == 0 {
        placement.fits = Some(false);
        placement.max_context = per_token.map(|_| 0);
        placement.why = Some("the weights and the engine's overhead alone take more than the memory free for the engine".to_owned());
        return placement;
    }
    let Some(per_token) = per_token.filter(|t| *t > 0) else {
        placement.why = Some(match &needs.kv {
            KvLayout::NotSized { reason } => {
                format!("the weights fit, but the KV cache is not sized: {reason}")
            }
            _ => "the KV cache per token overflows".to_owned(),
        });
        return placement;
    };
    let block = u128::from(per_token) * u128::from(KV_BLOCK_TOKENS);
    let tokens = kv_budget / block * u128::from(KV_BLOCK_TOKENS);
    let cap = needs
        .max_position_embeddings
        .unwrap_or(MAX_CONTEXT)
        .min(MAX_CONTEXT);
    let max_context = u64::try_from(tokens).unwrap_or(u64::MAX).min(cap);
    placement.max_context = Some(max_context);
    let fits = max_context >= context_needed;
    placement.fits = Some(fits);
    if !fits {
        placement.why = Some(if context_needed > cap {
            format!("the model's longest context is {cap} tokens")
        } else {
            format!("the KV cache for {context_needed} tokens does not fit; {max_context} would")
        });
    }
    placement
}

/// Bytes as GiB with two decimals, as the reports print them.
pub(crate) fn gib(bytes: u64) -> String {
    format!("{:.2} GiB", bytes as f64 / GIB as f64)
}

/// MODEL_DOES_NOT_FIT for a judgment that fits nowhere: the weights, the KV cache at the
/// context judged, and per card its free memory and the longest context that would fit.
pub(crate) fn does_not_fit(j: &Judgment) -> CodedError {
    let kv = match (j.kv_cache_bytes_at_context, &j.kv_not_sized) {
        (Some(bytes), _) => format!(
            "a KV cache of {} for {} tokens",
            gib(bytes),
            j.context_needed
        ),
        (None, Some(reason)) => format!("a KV cache that is not sized ({reason})"),
        (None, None) => "a KV cache too large to count".to_owned(),
    };
    let message = format!(
        "The model fits no card: it needs {} of weights, {} of engine overhead and {}.",
        gib(j.weights_bytes),
        gib(j.engine_overhead_bytes),
        kv
    );
    let cards: Vec<String> = j
        .cards
        .iter()
        .map(|c| {
            let free = c.card.free_bytes.map_or("unknown".to_owned(), gib);
            let total = c.card.total_bytes.map_or("unknown".to_owned(), gib);
            let longest = match c.placement.max_context {
                Some(0) => "no context fits".to_owned(),
                Some(n) => format!("the longest context that fits is {n} tokens"),
                None => c
                    .placement
                    .why
                    .clone()
                    .unwrap_or_else(|| "cannot be judged".to_owned()),
            };
            format!(
                "card {} ({}): {free} free of {total}; {longest}",
                c.card.index.map_or(c.card.uuid.clone(), |i| i.to_string()),
                c.card.name
            )
        })
        .collect();
    let details = if cards.is_empty() {
        "no NVIDIA card was reported".to_owned()
    } else {
        cards.join("\n  ")
    };
    CodedError::new(ErrorCode::ModelDoesNotFit, message).with_details(details)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn card(n: u32, total_gib: u64, free_mib: u64) -> CardMemory {
        CardMemory {
            uuid: format!("GPU-{n}"),
            index: Some(n),
            name: "card".to_owned(),
            total_bytes: Some(total_gib * GIB),
            free_bytes: Some(free_mib * MIB),
        }
    }

    /// Llama-3.1-8B's shape: 32 layers, 8 KV heads, head 128, bf16.
    fn llama(weights: u64) -> ModelNeeds {
        ModelNeeds {
            weights_bytes: weights,
            kv: KvLayout::Heads {
                layers: 32,
                kv_heads: 8,
                head_size: 128,
                element_bytes: 2,
            },
            attention_heads: Some(32),
            max_position_embeddings: Some(131_072),
        }
    }

    #[test]
    fn utilization_is_the_engines_unless_free_memory_is_less() {
        // An idle 24 GiB card: 90.
        assert_eq!(utilization_pct(24 * GIB, 24 * GIB - 300 * MIB), 90);
        // A desktop holding 4 GiB: (20 GiB − 0.5 GiB) × 100 / 24 GiB = 81.25 → 81.
        assert_eq!(utilization_pct(24 * GIB, 20 * GIB), 81);
        assert_eq!(utilization_pct(24 * GIB, 100 * MIB), 0);
        assert_eq!(utilization_pct(0, 0), 0);
        assert_eq!(utilization_pct(u64::MAX, u64::MAX), 90);
    }

    #[test]
    fn one_card_by_hand() {
        // 24 GiB card with 20 GiB free: u = 81; budget = 25,769,803,776 × 81 / 100 =
        // 20,873,541,058 B (floored); minus weights 16,060,522,496 and overhead 3,221,225,472
        // leaves 1,591,793,090 B for the KV cache. Per token 131,072 B, per 16-token block
        // 2,097,152 B: 759 blocks (1,591,793,090 / 2,097,152 = 759.03) = 12,144 tokens.
        let j = judge(
            &llama(16_060_522_496),
            Some(8192),
            &[card(0, 24, 20 * 1024)],
        );
        let p = &j.cards[0].placement;
        assert_eq!(p.utilization_pct, Some(81));
        assert_eq!(p.kv_budget_bytes, Some(1_591_793_090));
        assert_eq!(p.max_context, Some(12_144));
        assert_eq!(p.fits, Some(true));
        assert_eq!(j.kv_cache_bytes_at_context, Some(131_072 * 8192));
        assert!(j.fits());
        // 16,384 tokens would not.
        let j = judge(
            &llama(16_060_522_496),
            Some(16_384),
            &[card(0, 24, 20 * 1024)],
        );
        assert_eq!(j.cards[0].placement.fits, Some(false));
        assert!(!j.fits());
        // The refusal names the weights (16,060,522,496 B = 14.96 GiB), the KV cache at the
        // asked context (131,072 × 16,384 = 2 GiB), the free memory and the longest context.
        let err = does_not_fit(&j);
        assert_eq!(err.code, ErrorCode::ModelDoesNotFit);
        assert!(
            err.message.contains("14.96 GiB of weights"),
            "{}",
            err.message
        );
        assert!(
            err.message.contains("2.00 GiB for 16384 tokens"),
            "{}",
            err.message
        );
        let details = err.details.unwrap();
        assert!(details.contains("20.00 GiB free of 24.00 GiB"), "{details}");
        assert!(details.contains("12144 tokens"), "{details}");
    }

    #[test]
    fn the_cap_is_the_models_longest_context() {
        // An idle 80 GiB card holds far more than 131,072 tokens of this model.
        let j = judge(&llama(16 * GIB), None, &[card(0, 80, 80 * 1024)]);
        assert_eq!(j.cards[0].placement.max_context, Some(131_072));
        assert_eq!(j.context_needed, MIN_CONTEXT_WITHOUT_ASK);
        let j = judge(&llama(16 * GIB), Some(200_000), &[card(0, 80, 80 * 1024)]);
        assert_eq!(j.cards[0].placement.fits, Some(false));
        assert!(j.cards[0]
            .placement
            .why
            .as_deref()
            .unwrap()
            .contains("131072"));
    }

    #[test]
    fn weights_larger_than_the_card_never_fit_even_unsized() {
        let mut needs = llama(30 * GIB);
        needs.kv = KvLayout::NotSized {
            reason: "x".to_owned(),
        };
        let j = judge(&needs, None, &[card(0, 24, 24 * 1024)]);
        assert_eq!(j.cards[0].placement.fits, Some(false));
        assert_eq!(j.kv_cache_bytes_per_token, None);
        // Small weights, KV unknown: cannot tell.
        needs.weights_bytes = GIB;
        let j = judge(&needs, None, &[card(0, 24, 24 * 1024)]);
        assert_eq!(j.cards[0].placement.fits, None);
        assert!(!j.fits());
    }

    #[test]
    fn unknown_memory_cannot_be_judged() {
        let mut c = card(0, 24, 1024);
        c.free_bytes = None;
        let j = judge(&llama(GIB), None, &[c]);
        assert_eq!(j.cards[0].placement.fits, None);
        assert!(j.cards[0].placement.why.is_some());
    }

    #[test]
    fn two_cards_together_when_none_alone() {
        // 40 GiB of weights on two idle 24 GiB cards: 20 GiB each. u = 90: budget
        // 25,769,803,776 × 90 / 100 = 23,192,823,398; minus 21,474,836,480 weights and 5 GiB
        // overhead (3 + 2) is negative: no. Four cards: 10 GiB weights each:
        // 23,192,823,398 − 10,737,418,240 − 5,368,709,120 = 7,086,696,038 B; per token per card
        // 2 × 32 × (8 / 4 = 2) × 128 × 2 = 32,768 B, per block 524,288 B: 13,516 blocks
        // (7,086,696,038 / 524,288 = 13,516.8) = 216,256 tokens, capped at 131,072.
        let cards: Vec<_> = (0..4).map(|n| card(n, 24, 24 * 1024)).collect();
        let j = judge(&llama(40 * GIB), Some(32_768), &cards);
        assert!(j.cards.iter().all(|c| c.placement.fits == Some(false)));
        let tp = j.tensor_parallel.as_ref().unwrap();
        assert_eq!(tp.tensor_parallel(), 4);
        assert_eq!(tp.kv_budget_bytes, Some(7_086_696_038));
        assert_eq!(tp.kv_cache_bytes_per_token, Some(32_768));
        assert_eq!(tp.max_context, Some(131_072));
        assert_eq!(j.placement(), Some(tp));
        // Three cards: only groups of 2 are tried, which do not fit.
        let j = judge(&llama(40 * GIB), Some(32_768), &cards[..3]);
        assert!(j.tensor_parallel.is_none());
    }

    #[test]
    fn groups_must_divide_the_heads() {
        let mut needs = llama(40 * GIB);
        needs.attention_heads = Some(28);
        needs.kv = KvLayout::Heads {
            layers: 28,
            kv_heads: 4,
            head_size: 128,
            element_bytes: 2,
        };
        let cards: Vec<_> = (0..8).map(|n| card(n, 24, 24 * 1024)).collect();
        // 28 heads: groups of 2 and 4 only (8 does not divide 28).
        let tp = judge(&needs, None, &cards).tensor_parallel.unwrap();
        assert_eq!(tp.tensor_parallel(), 4);
        needs.weights_bytes = 100 * GIB;
        assert!(judge(&needs, None, &cards).tensor_parallel.is_none());
    }

    #[test]
    fn the_best_single_card_is_the_longest_context() {
        let cards = [card(0, 24, 12 * 1024), card(1, 24, 23 * 1024)];
        let j = judge(&llama(8 * GIB), None, &cards);
        assert_eq!(j.placement().unwrap().cards, vec!["GPU-1".to_owned()]);
    }
}
