//! Byte progress of an image pull, aggregated from the daemon's per-layer JSON lines.
//!
//! Rules (the reference's, made stricter): only `Downloading` lines with an id and a numeric
//! `current` count bytes (`Extracting` reuses the layer id with unrelated numbers); per layer the
//! total is the running maximum of the reported total and the raw current, and the current never
//! exceeds it; the aggregate total is the larger of the layer sum and a known total; a layer that
//! is complete or already present counts as done, and a finished pull reports current == total, so
//! a bar always ends at 100%. Reported values never go backwards.

use std::collections::BTreeMap;

use serde::Serialize;

/// One progress line of the pull stream, reduced to what counts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LayerEvent<'a> {
    pub(crate) id: Option<&'a str>,
    pub(crate) status: Option<&'a str>,
    pub(crate) current: Option<i64>,
    pub(crate) total: Option<i64>,
}

impl LayerEvent<'_> {
    /// The line says bytes arrived (a layer downloading, or one finished).
    pub(crate) fn moves_bytes(&self) -> bool {
        self.id.is_some()
            && matches!(
                self.status,
                Some("Downloading" | "Download complete" | "Verifying Checksum" | "Pull complete")
            )
    }
}

/// Progress as the user sees it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ProgressSnapshot {
    /// Bytes downloaded so far (never more than `total`).
    pub current: u64,
    /// Bytes expected in all (0 while unknown).
    pub total: u64,
}

#[derive(Debug, Clone, Copy, Default)]
struct LayerBytes {
    current: u64,
    total: u64,
    /// This pull saw the layer downloading (for "nothing was downloaded" reports).
    seen_downloading: bool,
    done: bool,
    already_present: bool,
}

/// The aggregator. Feed it every line with [`PullProgress::observe`].
#[derive(Debug, Clone, Default)]
pub struct PullProgress {
    layers: BTreeMap<String, LayerBytes>,
    known_total: u64,
    last: ProgressSnapshot,
    finished: bool,
}

/// What the pull did, for its outcome.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct LayerCounts {
    /// Layers that downloaded bytes during this pull.
    pub downloaded: usize,
    /// Layers the daemon already had.
    pub(crate) already_present: usize,
    /// Bytes counted from `Downloading` lines.
    pub downloaded_bytes: u64,
}

impl PullProgress {
    /// `known_total`: the descriptor's download size, when it has one.
    pub(crate) fn new(known_total: Option<u64>) -> Self {
        let known_total = known_total.unwrap_or(0);
        PullProgress {
            known_total,
            last: ProgressSnapshot {
                current: 0,
                total: known_total,
            },
            ..PullProgress::default()
        }
    }

    /// Takes one line; returns the new snapshot when it changed.
    pub(crate) fn observe(&mut self, event: &LayerEvent<'_>) -> Option<ProgressSnapshot> {
        if self.finished {
            return None;
        }
        let (Some(id), Some(status)) = (event.id, event.status) else {
            return None;
        };
        match status {
            "Downloading" => {
                let raw = event.current.and_then(|c| u64::try_from(c).ok())?;
                let reported = event.total.and_then(|t| u64::try_from(t).ok()).unwrap_or(0);
                let layer = self.layers.entry(id.to_owned()).or_default();
                layer.seen_downloading = true;
                layer.total = layer.total.max(reported).max(raw);
                layer.current = layer.current.max(raw.min(layer.total));
            }
            // The layer's bytes are all here: count it whole (its total, if it ever told us one).
            "Download complete" | "Verifying Checksum" | "Pull complete" => {
                let layer = self.layers.entry(id.to_owned()).or_default();
                layer.done = true;
                layer.current = layer.total;
            }
            "Already exists" => {
                let layer = self.layers.entry(id.to_owned()).or_default();
                layer.done = true;
                layer.already_present = true;
                layer.current = layer.total;
            }
            _ => return None,
        }
        self.report(self.aggregate())
    }

    /// The pull ended cleanly: everything counts as done, so current == total.
    pub(crate) fn finish(&mut self) -> ProgressSnapshot {
        let agg = self.aggregate();
        let total = agg.total.max(self.last.total).max(agg.current);
        self.finished = true;
        self.last = ProgressSnapshot {
            current: total,
            total,
        };
        self.last
    }

    /// The last snapshot reported.
    pub(crate) fn snapshot(&self) -> ProgressSnapshot {
        self.last
    }

    /// Per-layer counts of this pull.
    pub(crate) fn counts(&self) -> LayerCounts {
        let mut counts = LayerCounts::default();
        for layer in self.layers.values() {
            if layer.seen_downloading {
                counts.downloaded += 1;
                counts.downloaded_bytes += layer.current;
            }
            if layer.already_present {
                counts.already_present += 1;
            }
        }
        counts
    }

    fn aggregate(&self) -> ProgressSnapshot {
        let (current, total) = self.layers.values().fold((0u64, 0u64), |(c, t), layer| {
            (
                c.saturating_add(layer.current),
                t.saturating_add(layer.total),
            )
        });
        let total = total.max(self.known_total);
        ProgressSnapshot {
            current: current.min(total),
            total,
        }
    }

    /// Monotonic report: neither number ever goes back, and current never passes total.
    fn report(&mut self, next: ProgressSnapshot) -> Option<ProgressSnapshot> {
        let total = next.total.max(self.last.total);
        let current = next.current.max(self.last.current).min(total);
        let snapshot = ProgressSnapshot { current, total };
        if snapshot == self.last {
            return None;
        }
        self.last = snapshot;
        Some(snapshot)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ev<'a>(
        id: &'a str,
        status: &'a str,
        current: Option<i64>,
        total: Option<i64>,
    ) -> LayerEvent<'a> {
        LayerEvent {
            id: Some(id),
            status: Some(status),
            current,
            total,
        }
    }

    #[test]
    fn sums_downloading_layers_and_ignores_status_only_lines() {
        let mut p = PullProgress::new(None);
        assert_eq!(p.observe(&ev("a", "Pulling fs layer", None, None)), None);
        p.observe(&ev("a", "Downloading", Some(10), Some(100)));
        let s = p
            .observe(&ev("b", "Downloading", Some(5), Some(50)))
            .unwrap();
        assert_eq!(
            s,
            ProgressSnapshot {
                current: 15,
                total: 150
            }
        );
        assert_eq!(
            p.observe(&LayerEvent {
                id: None,
                status: Some("Status: x"),
                current: None,
                total: None
            }),
            None
        );
    }

    #[test]
    fn extracting_never_makes_progress_regress() {
        let mut p = PullProgress::new(None);
        p.observe(&ev("a", "Downloading", Some(90), Some(100)));
        assert_eq!(p.observe(&ev("a", "Extracting", Some(1), Some(1000))), None);
        assert_eq!(
            p.snapshot(),
            ProgressSnapshot {
                current: 90,
                total: 100
            }
        );
    }

    #[test]
    fn a_layer_without_total_never_reports_current_above_total() {
        let mut p = PullProgress::new(None);
        let s = p.observe(&ev("a", "Downloading", Some(70), None)).unwrap();
        assert_eq!(
            s,
            ProgressSnapshot {
                current: 70,
                total: 70
            }
        );
        let s = p
            .observe(&ev("a", "Downloading", Some(80), Some(0)))
            .unwrap();
        assert!(s.current <= s.total);
        // A real total arriving later is folded in.
        let s = p
            .observe(&ev("a", "Downloading", Some(85), Some(200)))
            .unwrap();
        assert_eq!(
            s,
            ProgressSnapshot {
                current: 85,
                total: 200
            }
        );
    }

    #[test]
    fn a_larger_known_total_is_used_from_the_first_report() {
        let mut p = PullProgress::new(Some(1000));
        let s = p
            .observe(&ev("a", "Downloading", Some(10), Some(100)))
            .unwrap();
        assert_eq!(
            s,
            ProgressSnapshot {
                current: 10,
                total: 1000
            }
        );
        assert_eq!(
            p.finish(),
            ProgressSnapshot {
                current: 1000,
                total: 1000
            }
        );
    }

    #[test]
    fn present_layers_count_as_done_and_the_end_is_total() {
        let mut p = PullProgress::new(None);
        p.observe(&ev("a", "Already exists", None, None));
        p.observe(&ev("b", "Downloading", Some(10), Some(40)));
        let s = p
            .observe(&ev("b", "Download complete", None, None))
            .unwrap();
        assert_eq!(
            s,
            ProgressSnapshot {
                current: 40,
                total: 40
            }
        );
        assert_eq!(
            p.finish(),
            ProgressSnapshot {
                current: 40,
                total: 40
            }
        );
        let counts = p.counts();
        assert_eq!(counts.already_present, 1);
        assert_eq!(counts.downloaded, 1);
        // Nothing moves after the end.
        assert_eq!(p.observe(&ev("c", "Downloading", Some(1), Some(5))), None);
    }

    #[test]
    fn nothing_downloaded_still_finishes() {
        let mut p = PullProgress::new(None);
        let end = p.finish();
        assert_eq!(end.current, end.total);
        assert_eq!(p.counts().downloaded_bytes, 0);
    }

    /// One generated line: layer index, status choice, current, total.
    fn line() -> impl Strategy<Value = (usize, u8, i64, Option<i64>)> {
        (
            0usize..5,
            0u8..6,
            -5i64..5000,
            proptest::option::of(-5i64..5000),
        )
    }

    proptest! {
        #[test]
        fn random_interleavings_never_regress_nor_exceed_total(
            lines in proptest::collection::vec(line(), 0..200),
            known in proptest::option::of(0u64..20_000),
        ) {
            let ids = ["l0", "l1", "l2", "l3", "l4"];
            let statuses = ["Downloading", "Extracting", "Download complete", "Already exists", "Waiting", "Pull complete"];
            let mut p = PullProgress::new(known);
            let mut last = p.snapshot();
            for (layer, status, current, total) in lines {
                let event = ev(ids[layer], statuses[status as usize], Some(current), total);
                let before = p.snapshot();
                let reported = p.observe(&event);
                let now = p.snapshot();
                if let Some(s) = reported { prop_assert_eq!(s, now); } else { prop_assert_eq!(before, now); }
                prop_assert!(now.current <= now.total, "current {} > total {}", now.current, now.total);
                prop_assert!(now.current >= last.current && now.total >= last.total, "{:?} after {:?}", now, last);
                if let Some(k) = known { prop_assert!(now.total >= k); }
                last = now;
            }
            let end = p.finish();
            prop_assert_eq!(end.current, end.total);
            prop_assert!(end.total >= last.total && end.current >= last.current);
        }
    }
}
