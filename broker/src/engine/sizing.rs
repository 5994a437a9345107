//! The fit check of a load, before any Docker call: whether the model's weights and KV cache fit
//! a card's free memory ([`crate::models::fit`]), which card (or which cards together, with
//! tensor parallelism, when no card alone holds it), the `--max-model-len` when no context was
//! asked, and a `--gpu-memory-utilization` that fits what is free.
//!
//! Only a confident "does not fit" refuses the load. A model the check cannot size (a folder
//! without safetensors weights, an attention design the formula does not cover, a card whose
//! memory is unknown) is left to the engine, as before the check existed.

use enginekit_shared::error::CodedError;

use crate::docker::GpuUuid;
use crate::models::fit::{self, CardMemory, ModelNeeds, Placement};

/// What the check decided for a load that fits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Sizing {
    /// The card it fits (the asked one, else the one with the longest context), or the
    /// tensor-parallel group that holds it when no card alone does. Never empty.
    pub(crate) gpus: Vec<GpuUuid>,
    /// The context to pass when none was asked: the longest that fits.
    pub(crate) context: Option<u32>,
    /// `--gpu-memory-utilization` in hundredths, fitted to the free memory of the tightest card.
    pub(crate) utilization_pct: u64,
    /// The longest context that fits the card (or the group).
    pub(crate) max_context: u64,
}

impl Sizing {
    /// The utilization as the engine takes it (0.81 for 81).
    pub(crate) fn memory_fraction(&self) -> f64 {
        self.utilization_pct as f64 / 100.0
    }

    /// `--tensor-parallel-size`: the number of cards.
    #[cfg(test)]
    pub(crate) fn tensor_parallel(&self) -> u32 {
        u32::try_from(self.gpus.len()).unwrap_or(u32::MAX)
    }
}

/// The check's verdict.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Verdict {
    Fits(Sizing),
    /// Surely fits no card: MODEL_DOES_NOT_FIT with the figures.
    DoesNotFit(Box<CodedError>),
    /// Cannot be told; the engine decides.
    NotJudged {
        why: String,
    },
}

/// Judges `needs` for the asked context on `cards` (only the requested card when it is present).
pub(crate) fn decide(
    needs: &ModelNeeds,
    asked: Option<u32>,
    cards: &[CardMemory],
    requested: Option<&GpuUuid>,
) -> Verdict {
    let wanted: Vec<CardMemory> = match requested {
        Some(want) if cards.iter().any(|c| c.uuid == want.to_string()) => cards
            .iter()
            .filter(|c| c.uuid == want.to_string())
            .cloned()
            .collect(),
        _ => cards.to_vec(),
    };
    if wanted.is_empty() {
        return Verdict::NotJudged {
            why: "no GPU memory was reported".to_owned(),
        };
    }
    let judgment = fit::judge(needs, asked.map(u64::from), &wanted);
    let single = judgment
        .cards
        .iter()
        .filter(|c| c.placement.fits == Some(true))
        .max_by_key(|c| (c.placement.max_context, c.card.free_bytes));
    if let Some(best) = single {
        return fitted(&best.placement, asked);
    }
    let refused = judgment
        .cards
        .iter()
        .all(|c| c.placement.fits == Some(false));
    if !refused {
        // A card that cannot be judged may hold it alone: the engine decides on one card.
        let why = judgment
            .cards
            .iter()
            .find_map(|c| c.placement.why.clone())
            .unwrap_or_else(|| "the fit could not be judged".to_owned());
        return Verdict::NotJudged { why };
    }
    // No card alone: the smallest group that holds it, with tensor parallelism.
    match judgment
        .tensor_parallel
        .as_ref()
        .filter(|g| g.fits == Some(true))
    {
        Some(group) => fitted(group, asked),
        None => Verdict::DoesNotFit(Box::new(fit::does_not_fit(&judgment))),
    }
}

/// The sizing of a placement that fits.
fn fitted(placement: &Placement, asked: Option<u32>) -> Verdict {
    let gpus: std::result::Result<Vec<GpuUuid>, _> = placement
        .cards
        .iter()
        .map(|c| c.parse::<GpuUuid>())
        .collect();
    let (Some(pct), Some(max_context), Ok(gpus)) =
        (placement.utilization_pct, placement.max_context, gpus)
    else {
        return Verdict::NotJudged {
            why: format!("card {} could not be named", placement.cards.join(", ")),
        };
    };
    if gpus.is_empty() {
        return Verdict::NotJudged {
            why: "no card was placed".to_owned(),
        };
    }
    let context = match asked {
        Some(_) => None,
        None => Some(u32::try_from(max_context.min(fit::MAX_CONTEXT)).unwrap_or(u32::MAX)),
    };
    Verdict::Fits(Sizing {
        gpus,
        context,
        utilization_pct: pct,
        max_context,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::documents::descriptor::KnownEngine;
    use crate::engine::argv::{launch, LaunchParams};
    use crate::models::config::KvLayout;
    use enginekit_shared::error::ErrorCode;

    const A: &str = "GPU-11111111-0000-0000-0000-000000000000";
    const B: &str = "GPU-22222222-0000-0000-0000-000000000000";
    const GIB: u64 = 1 << 30;

    fn card(uuid: &str, index: u32, total_gib: u64, free_bytes: u64) -> CardMemory {
        CardMemory {
            uuid: uuid.to_owned(),
            index: Some(index),
            name: "card".to_owned(),
            total_bytes: Some(total_gib * GIB),
            free_bytes: Some(free_bytes),
        }
    }

    /// Llama-3.1-8B-Instruct: 16,060,522,496 bytes of weights, 131,072 KV bytes per token.
    fn llama() -> ModelNeeds {
        ModelNeeds {
            weights_bytes: 16_060_522_496,
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
    fn a_desktop_card_gets_a_lower_utilization_and_the_longest_context() {
        // 24 GiB card, the display holding 4 GiB: 20 GiB free. u = 81 (see models::fit);
        // 759 blocks of 16 tokens = 12,144 tokens.
        let cards = [card(A, 0, 24, 20 * GIB)];
        let Verdict::Fits(s) = decide(&llama(), None, &cards, None) else {
            panic!("does not fit");
        };
        assert_eq!(s.utilization_pct, 81);
        assert_eq!(s.context, Some(12_144));
        let params = LaunchParams {
            memory_fraction: s.memory_fraction(),
            ..LaunchParams::new("llama", s.context.unwrap())
        };
        assert_eq!(
            launch(KnownEngine::Vllm, &params).argv.join(" "),
            "vllm serve /enginekit/model --served-model-name llama --host 0.0.0.0 --port 8000 \
             --max-model-len 12144 --max-num-seqs 1 --gpu-memory-utilization 0.81"
        );
        // An asked context is kept.
        let Verdict::Fits(s) = decide(&llama(), Some(8192), &cards, None) else {
            panic!("does not fit");
        };
        assert_eq!(s.context, None);
    }

    #[test]
    fn the_card_it_fits_is_picked_when_none_is_asked() {
        // A: 12 GiB card, too small; B: an idle 24 GiB card.
        let cards = [card(A, 0, 12, 12 * GIB), card(B, 1, 24, 24 * GIB)];
        let Verdict::Fits(s) = decide(&llama(), Some(8192), &cards, None) else {
            panic!("does not fit");
        };
        assert_eq!(s.gpus, [B.parse::<GpuUuid>().unwrap()]);
        assert_eq!(s.tensor_parallel(), 1);
        assert_eq!(s.utilization_pct, 90);
        // Asking for the small card is refused with the figures.
        let want: GpuUuid = A.parse().unwrap();
        let Verdict::DoesNotFit(err) = decide(&llama(), Some(8192), &cards, Some(&want)) else {
            panic!("fits");
        };
        assert_eq!(err.code, ErrorCode::ModelDoesNotFit);
        assert!(err.details.unwrap().contains("card 0"));
    }

    #[test]
    fn unknowns_are_left_to_the_engine() {
        let mut needs = llama();
        needs.kv = KvLayout::NotSized {
            reason: "sliding windows".to_owned(),
        };
        let cards = [card(A, 0, 24, 24 * GIB)];
        assert!(matches!(
            decide(&needs, None, &cards, None),
            Verdict::NotJudged { .. }
        ));
        assert!(matches!(
            decide(&llama(), None, &[], None),
            Verdict::NotJudged { .. }
        ));
    }

    #[test]
    fn two_cards_together_when_none_alone_with_the_tensor_parallel_argv() {
        // 30 GiB of weights, two idle 24 GiB cards: neither alone. Together (see models::fit):
        // u = 90, 15 GiB of weights and 5 GiB of overhead per card leave 23,192,823,398 −
        // 16,106,127,360 − 5,368,709,120 = 1,717,986,918 B; 65,536 KV bytes per token per card
        // (8 KV heads split in two), 1,048,576 per block: 1,638 blocks = 26,208 tokens.
        let mut needs = llama();
        needs.weights_bytes = 30 * GIB;
        let cards = [card(A, 0, 24, 24 * GIB), card(B, 1, 24, 24 * GIB)];
        let Verdict::Fits(s) = decide(&needs, None, &cards, None) else {
            panic!("does not fit");
        };
        assert_eq!(s.tensor_parallel(), 2);
        assert_eq!(
            s.gpus,
            [A.parse::<GpuUuid>().unwrap(), B.parse::<GpuUuid>().unwrap()]
        );
        assert_eq!(s.utilization_pct, 90);
        assert_eq!(s.context, Some(26_208));
        let params = LaunchParams {
            memory_fraction: s.memory_fraction(),
            tensor_parallel: s.tensor_parallel(),
            ..LaunchParams::new("big", s.context.unwrap())
        };
        assert_eq!(
            launch(KnownEngine::Vllm, &params).argv.join(" "),
            "vllm serve /enginekit/model --served-model-name big --host 0.0.0.0 --port 8000 \
             --max-model-len 26208 --max-num-seqs 1 --gpu-memory-utilization 0.90 \
             --tensor-parallel-size 2"
        );
        // Asking for one card keeps the load on it, and the refusal says so.
        let want: GpuUuid = A.parse().unwrap();
        assert!(matches!(
            decide(&needs, None, &cards, Some(&want)),
            Verdict::DoesNotFit(_)
        ));
        // A card that cannot be judged might hold it alone: no group, the engine decides.
        let mut unknown = cards.clone();
        unknown[0].free_bytes = None;
        assert!(matches!(
            decide(&needs, None, &unknown, None),
            Verdict::NotJudged { .. }
        ));
        // Too big for both together: refused.
        needs.weights_bytes = 60 * GIB;
        assert!(matches!(
            decide(&needs, None, &cards, None),
            Verdict::DoesNotFit(_)
        ));
    }
}
