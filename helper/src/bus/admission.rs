//! How many calls the helper serves at once, checked before it makes any bus call on a caller's
//! behalf. Every call the helper makes for a caller (its credentials, polkit, whether it is still
//! there) waits for a reply, and dbus-daemon allows a connection only so many pending replies
//! (`max_replies_per_connection`); an interactive polkit check can pend for minutes. Unbounded,
//! a flood of `Start`s from one user fills that quota and every other caller's polkit check then
//! fails with `LimitsExceeded`. So: a bound on calls in flight in total (taken before the first
//! bus call, when the caller's uid is not known yet), and a smaller one per uid (taken as soon as
//! the bus has said who is calling, before polkit), so that one uid never holds more than its
//! share and the rest stays for the others.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

/// The bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Calls in flight from everyone together.
    pub total: usize,
    /// Calls in flight from one uid (root included).
    pub per_uid: usize,
}

impl Default for Limits {
    /// 32 in flight keeps the helper's pending replies (at most two per call: the credentials
    /// or polkit, and the caller's departure watch) far below dbus-daemon's default of 128; four
    /// per uid is more than one desktop session needs (a Start, a GetReceipt, a Cancel).
    fn default() -> Self {
        Limits {
            total: 32,
            per_uid: 4,
        }
    }
}

/// The shared counters.
#[derive(Debug)]
pub struct Admission {
    limits: Limits,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    total: usize,
    per_uid: HashMap<u32, usize>,
}

/// Why a call was not admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Every slot is taken.
    Full,
    /// This uid has its share in flight.
    UidFull,
}

/// One admitted call; dropping it frees its slots.
#[derive(Debug)]
pub struct Ticket {
    admission: Arc<Admission>,
    uid: Option<u32>,
}

impl Admission {
    pub fn new(limits: Limits) -> Arc<Admission> {
        Arc::new(Admission {
            limits: Limits {
                total: limits.total.max(1),
                per_uid: limits.per_uid.max(1),
            },
            state: Mutex::new(State::default()),
        })
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A slot of the total, before the caller is known.
    pub fn enter(self: &Arc<Self>) -> Result<Ticket, Refusal> {
        let mut state = self.state();
        if state.total >= self.limits.total {
            return Err(Refusal::Full);
        }
        state.total += 1;
        Ok(Ticket {
            admission: Arc::clone(self),
            uid: None,
        })
    }

    /// Calls in flight now, in total and for `uid`.
    pub fn in_flight(&self, uid: u32) -> (usize, usize) {
        let state = self.state();
        (state.total, state.per_uid.get(&uid).copied().unwrap_or(0))
    }
}

impl Ticket {
    /// Charges this call to `uid`; refused when that uid already has its share in flight.
    pub fn bind(&mut self, uid: u32) -> Result<(), Refusal> {
        if self.uid.is_some() {
            return Ok(());
        }
        let mut state = self.admission.state();
        let count = state.per_uid.entry(uid).or_insert(0);
        if *count >= self.admission.limits.per_uid {
            return Err(Refusal::UidFull);
        }
        *count += 1;
        self.uid = Some(uid);
        Ok(())
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut state = self.admission.state();
        state.total = state.total.saturating_sub(1);
        if let Some(uid) = self.uid {
            if let Some(count) = state.per_uid.get_mut(&uid) {
                *count = count.saturating_sub(1);
                if *count == 0 {
                    state.per_uid.remove(&uid);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_uid_gets_its_share_and_the_rest_stays_for_others() {
        let admission = Admission::new(Limits {
            total: 5,
            per_uid: 2,
        });
        let mut flood = Vec::new();
        for _ in 0..2 {
            let mut t = admission.enter().unwrap();
            t.bind(1000).unwrap();
            flood.push(t);
        }
        let mut third = admission.enter().unwrap();
        assert_eq!(third.bind(1000), Err(Refusal::UidFull));
        drop(third);
        let mut other = admission.enter().unwrap();
        assert_eq!(other.bind(1001), Ok(()));
        assert_eq!(admission.in_flight(1000), (3, 2));
        drop(flood);
        assert_eq!(admission.in_flight(1000), (1, 0));
        drop(other);
        assert_eq!(admission.in_flight(1001), (0, 0));
    }

    #[test]
    fn the_total_is_a_hard_bound_before_anyone_is_known() {
        let admission = Admission::new(Limits {
            total: 2,
            per_uid: 2,
        });
        let a = admission.enter().unwrap();
        let _b = admission.enter().unwrap();
        assert_eq!(admission.enter().unwrap_err(), Refusal::Full);
        drop(a);
        assert!(admission.enter().is_ok());
    }
}
