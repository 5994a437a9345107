//! Which card a load runs on, or which cards for a tensor-parallel group.
//! The rule that a card holds one session is kept by `claim`.
//!
//! Selection: a requested card that is present wins; otherwise the most **free** memory, ties
//! by the most total memory, then the driver's order. A requested card that is gone is
//! substituted and the substitution reported, never hidden. The GPU check of setup uses the same
//! ranking on a fresh probe, so the check and the load agree when nothing else runs.

use enginekit_shared::wire::plan::GpuAccess;
use serde::Serialize;

use super::error::{EngineError, Result};
use crate::docker::GpuUuid;
use crate::probe::facts::{Fact, Gpu};

/// One card as the selection sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Card {
    pub(crate) uuid: GpuUuid,
    /// The driver's index; `None` sorts after every indexed card.
    pub(crate) index: Option<u32>,
    pub(crate) total_bytes: Option<u64>,
    pub(crate) free_bytes: Option<u64>,
    /// How a container asks for it.
    pub(crate) access: GpuAccess,
}

impl Card {
    /// The cards of a probe, in its order, each asked for as `access` says; rows whose UUID is
    /// not a valid GPU id are skipped.
    pub(crate) fn from_probe(gpus: &[Gpu], access: impl Fn(&str) -> GpuAccess) -> Vec<Card> {
        let known = |f: &Fact<u64>| match f {
            Fact::Known { value } => Some(*value),
            Fact::Unknown { .. } => None,
        };
        gpus.iter()
            .filter_map(|g| {
                Some(Card {
                    uuid: g.uuid.parse().ok()?,
                    index: g.index,
                    total_bytes: known(&g.memory_total_bytes),
                    free_bytes: known(&g.memory_free_bytes),
                    access: access(&g.uuid),
                })
            })
            .collect()
    }
}

/// The chosen card.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Selection {
    pub(crate) card: Card,
    /// The requested card, when it was not present and another one was taken instead.
    pub(crate) substituted_for: Option<GpuUuid>,
}

/// Chooses the card for a load.
pub(crate) fn select(cards: &[Card], requested: Option<&GpuUuid>) -> Result<Selection> {
    if let Some(want) = requested {
        if let Some(card) = cards.iter().find(|c| &c.uuid == want) {
            return Ok(Selection {
                card: card.clone(),
                substituted_for: None,
            });
        }
    }
    // Driver order is the position in `cards` (nvidia-smi order) when indexes tie or lack.
    let best = cards
        .iter()
        .enumerate()
        .max_by(|(ia, a), (ib, b)| {
            a.free_bytes
                .unwrap_or(0)
                .cmp(&b.free_bytes.unwrap_or(0))
                .then(a.total_bytes.unwrap_or(0).cmp(&b.total_bytes.unwrap_or(0)))
                // Earlier in driver order wins: reverse so that max picks the earlier.
                .then(ib.cmp(ia))
        })
        .map(|(_, c)| c.clone())
        .ok_or(EngineError::NoGpu)?;
    Ok(Selection {
        card: best,
        substituted_for: requested.cloned(),
    })
}

/// The cards of a tensor-parallel group the fit check chose, as the probe sees them now, in
/// the group's order; a card no longer reported fails the load rather than shrinking the group.
pub(crate) fn group(cards: &[Card], uuids: &[GpuUuid]) -> Result<Vec<Card>> {
    uuids
        .iter()
        .map(|want| {
            cards
                .iter()
                .find(|c| &c.uuid == want)
                .cloned()
                .ok_or_else(|| EngineError::GroupCardGone {
                    gpu: want.to_string(),
                })
        })
        .collect()
}

/// How a container asks for `cards` together: by CDI only when every one of them has a CDI
/// name (one request holds them all), else by `--gpus`.
pub(crate) fn access_of_all(cards: &[Card]) -> GpuAccess {
    if !cards.is_empty() && cards.iter().all(|c| c.access == GpuAccess::Cdi) {
        GpuAccess::Cdi
    } else {
        GpuAccess::GpusFlag
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn card(n: u8, index: Option<u32>, total: u64, free: u64) -> Card {
        Card {
            access: GpuAccess::GpusFlag,
            uuid: format!("GPU-0000000{n}-0000-0000-0000-000000000000")
                .parse()
                .unwrap(),
            index,
            total_bytes: Some(total << 30),
            free_bytes: Some(free << 30),
        }
    }

    #[test]
    fn a_present_requested_card_wins_even_with_less_free_memory() {
        let cards = [card(1, Some(0), 24, 20), card(2, Some(1), 80, 79)];
        let s = select(&cards, Some(&cards[0].uuid)).unwrap();
        assert_eq!(s.card, cards[0]);
        assert_eq!(s.substituted_for, None);
    }

    #[test]
    fn otherwise_most_free_then_most_total_then_driver_order() {
        let cards = [
            card(1, Some(0), 24, 10),
            card(2, Some(1), 24, 20),
            card(3, Some(2), 48, 20),
            card(4, Some(3), 48, 20),
        ];
        assert_eq!(select(&cards, None).unwrap().card, cards[2]);
        let ties = [card(1, Some(0), 24, 20), card(2, Some(1), 24, 20)];
        assert_eq!(select(&ties, None).unwrap().card, ties[0]);
        let unknown_free = Card {
            access: GpuAccess::GpusFlag,
            free_bytes: None,
            ..card(5, Some(0), 80, 0)
        };
        let cards = [unknown_free, card(6, Some(1), 8, 1)];
        assert_eq!(select(&cards, None).unwrap().card, cards[1]);
    }

    #[test]
    fn a_missing_requested_card_is_substituted_and_reported() {
        let cards = [card(1, Some(0), 24, 20)];
        let gone: GpuUuid = "GPU-99999999-0000-0000-0000-000000000000".parse().unwrap();
        let s = select(&cards, Some(&gone)).unwrap();
        assert_eq!(s.card, cards[0]);
        assert_eq!(s.substituted_for, Some(gone));
    }

    #[test]
    fn no_card_is_a_blocked_prerequisite() {
        let err = select(&[], None).unwrap_err();
        assert_eq!(
            err.code(),
            enginekit_shared::error::ErrorCode::PrerequisiteBlocked
        );
    }

    #[test]
    fn a_group_is_taken_whole_in_its_order_or_not_at_all() {
        let cards = [card(1, Some(0), 24, 20), card(2, Some(1), 24, 20)];
        let want = [cards[1].uuid.clone(), cards[0].uuid.clone()];
        assert_eq!(
            group(&cards, &want).unwrap(),
            vec![cards[1].clone(), cards[0].clone()]
        );
        let gone: GpuUuid = "GPU-99999999-0000-0000-0000-000000000000".parse().unwrap();
        let err = group(&cards, &[cards[0].uuid.clone(), gone]).unwrap_err();
        assert_eq!(
            err.code(),
            enginekit_shared::error::ErrorCode::PrerequisiteBlocked
        );
    }

    #[test]
    fn a_group_is_asked_for_by_cdi_only_when_every_card_has_a_cdi_name() {
        let cdi = Card {
            access: GpuAccess::Cdi,
            ..card(1, Some(0), 24, 20)
        };
        let flag = card(2, Some(1), 24, 20);
        assert_eq!(access_of_all(&[cdi.clone(), cdi.clone()]), GpuAccess::Cdi);
        assert_eq!(access_of_all(&[cdi, flag]), GpuAccess::GpusFlag);
        assert_eq!(access_of_all(&[]), GpuAccess::GpusFlag);
    }
}
